"""A bfloat16 value, scaled, then a threshold that selects between two constants: eager rounds the
scaled value to bfloat16 before it compares, and the compiled CPU kernel (torch 2.13) compares the
float32 product, so 4 of 4,096 elements take the other branch. The rounding decides a comparison:
no elidable noise, whatever emulate_precision_casts restores (PR 195223, issue 195214)."""

import torch


def thresholded(x, a, b):
    y = x.to(torch.bfloat16) * 3.0
    return torch.where(y > 1.0, a, b)


def make_case():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4096, generator=g) * 0.7
    return thresholded, (x, torch.full((4096,), 5.0), torch.full((4096,), -5.0))
