"""matmul, explicit bf16 cast, then an fp32 bias add: compiled differs by up to 0.03 on every element.

issue: pytorch/pytorch#181568
expected: not-bug
device: cuda
grounds: repro agent (PREDEFINED_MITIGATION): "TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 reduces max_abs_diff to 0.0"; closed

The reporter's repro: torch.manual_seed(119); x = randn(2, 15, 32); w = randn(32, 17); b = randn(17)
(the thread compiles with dynamic=True; divfuzz compiles static)."""

import torch


def f(x, w, b):
    y = (x @ w).to(torch.bfloat16) + b
    return y, y.mean(-1)


def make_case():
    g = torch.Generator().manual_seed(119)
    x = torch.randn(2, 15, 32, generator=g)
    w = torch.randn(32, 17, generator=g)
    b = torch.randn(17, generator=g)
    return f, (x, w, b)
