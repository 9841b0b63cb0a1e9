"""torch.minimum(-0.0, +0.0) in bf16 returns +0.0 under Inductor on CUDA; eager keeps -0.0.

issue: pytorch/pytorch#185610
expected: bug
device: cuda
grounds: fixed by PR 186933 ("Fixes #185610": use tl.minimum, which follows IEEE 754 signed zeros)

The reporter's repro: x = [-0.0], y = [0.0], bf16."""

import torch


def fn(x, y):
    return torch.minimum(x, y)


def make_case():
    x = torch.tensor([-0.0], dtype=torch.bfloat16)
    y = torch.tensor([0.0], dtype=torch.bfloat16)
    return fn, (x, y)
