"""var_mean / std_mean of an empty tensor return mean 0. instead of nan under torch.compile.

issue: pytorch/pytorch#197108
expected: bug
device: any
grounds: labelled release triage; root-caused to the Welford lowering (the mean is the raw accumulator identity), draft fix PR 197165

A full reduction over a (0,) float32 tensor: eager and aot_eager give (nan, nan), Inductor (nan, 0.)."""

import torch


def f(x):
    return torch.var_mean(x), torch.std_mean(x)


def make_case():
    return f, (torch.empty(0),)
