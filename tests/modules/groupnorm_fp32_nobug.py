"""No bug: GroupNorm in fp32 over large rows (8 groups of 16,384 elements). Inductor's reduction
order differs from eager's; both are rounding. Nothing here may be filed."""

import torch


def make_case():
    g = torch.Generator().manual_seed(1)
    norm = torch.nn.GroupNorm(8, 64)
    x = torch.randn(2, 64, 64, 32, generator=g) * 3 + 1
    return norm, (x,)
