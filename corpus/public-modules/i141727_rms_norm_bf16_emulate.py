"""rms_norm of a bf16 input upcast to fp32: compiled differs from eager by one bf16 ULP, equally close to fp64.

issue: pytorch/pytorch#141727
expected: not-bug
device: cuda
grounds: Chillee: "There's never any guarantee of exact matches between compiled code and eager code, due to tiling."

The reporter's repro (with emulate_precision_casts=True): torch.manual_seed(0); x = randn(2, 157, 4096) bf16,
scale = randn(4096) bf16; eager and compiled are both 0.0311 from fp64. Batch 1 here (643k elements)."""

import torch


def f(x, scale):
    y = x.float()
    z = torch.rms_norm(y, (4096,), scale, 1e-05)
    return z.to(dtype=torch.bfloat16)


def make_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 157, 4096, generator=g).to(torch.bfloat16)
    scale = torch.randn(4096, generator=g).to(torch.bfloat16)
    return f, (x, scale)
