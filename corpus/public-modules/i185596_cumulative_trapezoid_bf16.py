"""cumulative_trapezoid of bf16 y over an expanded fp32 x: forward and gradients differ, compiled closer to fp64.

issue: pytorch/pytorch#185596
expected: not-bug
device: cuda
grounds: eellison: "If you compare the results to a higher precision baseline, you'll see that torch.compile is more accurate"
train: yes

The reporter's inputs: torch.manual_seed(0); y = randn(8, 1, 5, 16) as bf16; torch.manual_seed(1000);
x_base = randn(16) fp32, viewed and expanded like y; the loss is out.float().sum()."""

import torch


def fn(y, x_base):
    x = x_base.view(1, 1, 1, 16).expand_as(y)
    return torch.cumulative_trapezoid(y, x, dim=-1)


def make_case():
    y = torch.randn(8, 1, 5, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16).requires_grad_(True)
    x_base = torch.randn(16, generator=torch.Generator().manual_seed(1000)).requires_grad_(True)
    return fn, (y, x_base)
