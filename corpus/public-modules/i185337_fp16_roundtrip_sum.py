"""An explicit float32 -> float16 -> float32 round trip, then a row sum: CPU Inductor drops the fp16 rounding.

issue: pytorch/pytorch#185337
expected: not-bug
device: cpu
grounds: closed by PR 185847, which keeps the round trip only under emulate_precision_casts ("Default-config behavior is unchanged")

The reporter's repro: x = arange(20).reshape(5, 4).t() / 7.0; y = x.half().float(); return y, y.sum(1)."""

import torch


def fn(x):
    y = x.to(dtype=torch.float16).to(dtype=torch.float32)
    return y, y.sum(dim=1)


def make_case():
    x = torch.arange(20, dtype=torch.float32).reshape(5, 4).t() / 7.0
    return fn, (x,)
