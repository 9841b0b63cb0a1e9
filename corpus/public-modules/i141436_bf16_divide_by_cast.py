"""bf16 tensor divided by an fp32 tensor cast to bf16: compiled differs from eager by up to 8.

issue: pytorch/pytorch#141436
expected: not-bug
device: cuda
grounds: eellison: "See ... config.py#L595-L606 for explanation. with this config on there is no difference." (emulate_precision_casts); closed

The reporter's repro: Y = randn(1, 6, 128, 4, 32) bf16, y = randn(1, 6, 128, 4) fp32 (unseeded there)."""

import torch


def division(Y, y):
    return Y / y.to(Y.dtype).unsqueeze(-1)


def make_case():
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(1, 6, 128, 4, 32, generator=g).to(torch.bfloat16)
    y = torch.randn(1, 6, 128, 4, generator=g)
    return division, (Y, y)
