"""Both operands cast to float16 before an elementwise add: compiled keeps the add in fp32 (CPU).

issue: pytorch/pytorch#182131
expected: not-bug
device: cpu
grounds: closed by PR 182882 ("Close: #182131"), verified fixed "when running with TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1"; default numerics unchanged

The reporter's repro: x = arange(24).reshape(2, 3, 4) / 10, c = arange(24) % 5 == 0; eager sum 20.5996,
compiled 20.6000."""

import torch


def f(x, c):
    z = torch.where(c, torch.full_like(x, 0.5), torch.full_like(x, -0.5))
    y = z.to(torch.float16) + x.to(torch.float16)
    return y, y.float().sum()


def make_case():
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 10
    c = (torch.arange(24) % 5 == 0).reshape(2, 3, 4)
    return f, (x, c)
