"""Seed 000's larger model, as a user would hand it to `divfuzz minimize --module`:
LayerNorm -> two gated linears p(x) * sigmoid(g(x)) -> LayerNorm -> Linear, run under bf16 autocast.
It holds two separate root causes: the layer-norm decomposition and the fused gate."""

import torch


class GatedBlock(torch.nn.Module):
    def __init__(self, dim: int = 128):
        super().__init__()
        self.norm_in = torch.nn.LayerNorm(dim)
        self.p = torch.nn.Linear(dim, dim)
        self.g = torch.nn.Linear(dim, dim)
        self.norm_out = torch.nn.LayerNorm(dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        x = self.norm_in(x)
        x = self.p(x) * self.g(x).sigmoid()
        return self.out(self.norm_out(x))


def make_case():
    torch.manual_seed(0)
    return GatedBlock(), (torch.randn(4096, 128),)
