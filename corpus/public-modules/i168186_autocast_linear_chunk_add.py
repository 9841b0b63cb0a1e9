"""bf16 autocast: linear * linear, chunk, then add diverges from eager (rtol 1.0 on some elements).

issue: pytorch/pytorch#168186
expected: not-bug
device: cuda
grounds: maintainer masnesral: "I can repro, but on a recent build it seems that emulate_precision_casts fixes the issue"

The reporter's Module2 (dim 128, no bias) under torch.autocast(bfloat16); aot_eager matches. The thread's
input held 33.5M output elements; (4, 32, 32, 128) here. The autocast region is inside forward so that
divfuzz compiles it as the reporter's script does."""

import torch
from torch import nn


class Module2(nn.Module):
    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.p_in = nn.Linear(dim, 2 * dim, bias=False)
        self.g_in = nn.Linear(dim, 2 * dim, bias=False)

    def forward(self, x, mask):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            x = self.p_in(x) * self.g_in(x)
            a, b = torch.chunk(x, 2, dim=-1)
            return a + b


def make_case():
    torch.manual_seed(0)
    model = Module2()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, 32, 128, generator=g)
    mask = torch.ones(4, 32, 32)
    return model, (x, mask)
