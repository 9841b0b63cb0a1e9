"""An explicit fp32 -> bf16 -> fp32 cast after a matmul is lost: Inductor drops the bf16 rounding (CUDA).

issue: pytorch/pytorch#179561
expected: bug
device: cuda
grounds: fixed by maintainer jansel's PR 180575 ("Fixes #179561", fix fp32=>bf16=>fp32 cast being lost)

The repro of the fix PRs (180575's test, 179572's description): matmul, .to(bf16).float(), x * sigmoid(x),
sum(dim=1); max diff 0.109 before the fix. Shapes are not in the excerpt; 64x128 @ 128x64 here."""

import torch


def fn(x, w):
    x = torch.matmul(x, w)
    x = x.to(torch.bfloat16).float()
    x = x * torch.sigmoid(x)
    return x.sum(dim=1)


def make_case():
    g = torch.Generator().manual_seed(0)
    return fn, (torch.randn(64, 128, generator=g), torch.randn(128, 64, generator=g))
