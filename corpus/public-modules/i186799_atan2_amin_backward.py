"""atan2(x, y).amin(dim=-1) backward drops the gradient at argmin positions under Inductor (CPU, fp32).

issue: pytorch/pytorch#186799
expected: bug
device: cpu
grounds: triaged, oncall: cpu inductor; maintainer jansel's PR 186953 fixes the CPU amin/amax backward rematerialization mismatch
train: yes

The reporter's repro: torch.manual_seed(0); x = randn(2, 3); y = randn(2, 3); forward matches, the
compiled x.grad loses the upstream 1 at an argmin (reproduced on 2.13.0.dev20260608+cpu)."""

import torch


def fn(x, y):
    return torch.atan2(x, y).amin(dim=-1)


def make_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, generator=g).requires_grad_(True)
    y = torch.randn(2, 3, generator=g)
    return fn, (x, y)
