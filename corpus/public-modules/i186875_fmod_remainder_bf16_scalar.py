"""bf16 fmod and remainder by a Python float: Inductor on the CPU keeps 1.7 unrounded, eager rounds it to bf16.

issue: pytorch/pytorch#186875
expected: bug
device: cpu
grounds: fixed by PR 186942 ("Fixes #186875": round fmod/remainder scalars for bf16/fp16 on the CPU)

The reporter's input is x = bf16(1.7) and its negative: eager gives 0 and -0, compiled 0.0031 and 1.6953
(remainder lands a whole period away)."""

import torch


def f(x):
    return torch.fmod(x, 1.7), torch.remainder(x, 1.7)


def make_case():
    x = torch.tensor([1.703125, -1.703125], dtype=torch.bfloat16)
    return f, (x,)
