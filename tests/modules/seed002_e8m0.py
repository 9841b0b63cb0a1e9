"""Seed 002's E8M0 model (the issue's reproducer, smaller input), as a user module: convs,
batch norms, a hand-written erf GELU, then abs -> +eps -> log2 -> ceil -> clamp -> +127 -> uint8."""

import torch
import torch.nn as nn


class E8M0Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, padding=1)
        self.pw1 = nn.Conv2d(32, 64, kernel_size=1)
        self.bn1 = nn.BatchNorm2d(64)
        self.pw2 = nn.Conv2d(64, 128, kernel_size=1)
        self.bn2 = nn.BatchNorm2d(128)

    def forward(self, x):
        x = self.bn1(self.pw1(self.conv1(x)))
        x = 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))
        x = self.bn2(self.pw2(x))
        x = 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))
        feat = torch.abs(x) + 1e-7
        return (torch.clamp(torch.ceil(torch.log2(feat)), min=-127, max=127) + 127).to(torch.uint8)


def make_case():
    torch.manual_seed(0)
    return E8M0Model().eval(), (torch.randn(4, 3, 32, 32),)
