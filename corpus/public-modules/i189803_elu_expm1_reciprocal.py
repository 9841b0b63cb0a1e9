"""Inductor's CPU vector code lowers expm1 to exp(x) - 1, so reciprocal(elu(x) + exp(elu(x))) drifts by ~100.

issue: pytorch/pytorch#189803
expected: bug
device: cpu
grounds: fixed by PR 190533 ("Fixes #189803": use Sleef expm1 in CPU vec codegen, the repro's max diff 215 -> 0)

The denominator elu(x) + exp(elu(x)) crosses zero near x = -0.836, where a 1-ULP drift of elu becomes a
large one. The pattern is the PR's; inputs are seeded randn plus a dense sweep around the root."""

import torch
import torch.nn.functional as F


def f(x):
    e = F.elu(x)
    return torch.reciprocal(e + torch.exp(e))


def make_case():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4096, generator=g), torch.linspace(-0.85, -0.82, 4096)])
    return f, (x,)
