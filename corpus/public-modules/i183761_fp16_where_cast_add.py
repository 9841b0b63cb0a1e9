"""fp16 where + full_like + cast + add differs from eager by one fp16 step on four elements (CPU).

issue: pytorch/pytorch#183761
expected: not-bug
device: cpu
grounds: jansel: "this looks like intended Inductor behavior ... The exact-eager mode is TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1"

Inputs as the repro agent printed them: x = arange/7 (0.0000, 0.1429, ...), mask every fourth element;
with 30 elements and constants 0.75 / -0.25 this gives the thread's eager sum 62.6470, compiled 62.6429,
4 elements differing by 0.0020 (the literal script is not in the excerpt)."""

import torch


def f(x, c):
    z = torch.where(c, torch.full_like(x, 0.75), torch.full_like(x, -0.25))
    y = z.to(torch.float16) + x.to(torch.float16)
    return y, y.float().sum()


def make_case():
    x = torch.arange(30, dtype=torch.float32) / 7
    c = torch.arange(30) % 4 == 0
    return f, (x, c)
