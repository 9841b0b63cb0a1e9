"""Inductor folds sum(softmax(x)) to exactly 1.0, so floor of it gives 1 where eager gives 0.

issue: pytorch/pytorch#189787
expected: bug
device: cpu
grounds: triaged (pt2: numerics-discrepancy); maintainer aorenste posted a smaller repro of the same floor(sum(softmax)) pattern

In fp32 the row sums of a softmax land just below or above 1, and floor() turns that last bit into a
whole unit. The pattern is the issue's floor(sum(softmax(x))); the XPU mirror of the issue measured 12
of 43 rows flipped from 0 to 1. The 43 rows here are seeded randn, not the thread's literal values."""

import torch
import torch.nn.functional as F


def f(x):
    return torch.floor(F.softmax(x, dim=-1).sum(dim=-1))


def make_case():
    x = torch.randn(43, 64, generator=torch.Generator().manual_seed(0))
    return f, (x,)
