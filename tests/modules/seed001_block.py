"""Seed 001's model block (`../shared/seeds/001_*`): RMSNorm then the squared-leaky-ReLU MLP,
with the residual, as in the Parameter Golf transformer whose training step Inductor's
mix-order reduction made 6.3 ms slower on an H100. For `divfuzz minimize --module ... --oracle perf --train`.

`block()` is sized for a CPU test; `block_h100()` is the seed's own size (dim 512, 32 x 2048
tokens, bf16).
"""

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim * mult, bias=False)
        self.proj = nn.Linear(dim * mult, dim, bias=False)

    def forward(self, x):
        return self.proj(F.leaky_relu(self.fc(x), negative_slope=0.5).square())


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mlp = MLP(dim)

    def forward(self, x):
        return x + self.mlp(F.rms_norm(x, (x.size(-1),)))


def block():
    torch.manual_seed(0)
    return Block(128), (torch.randn(4, 256, 128),)


def block_h100():
    torch.manual_seed(0)
    return Block(512).bfloat16(), (torch.randn(32, 2048, 512, dtype=torch.bfloat16),)
