"""F.gelu in fp32 on a 64x64 randn input: compiled and eager differ by rounding.

issue: pytorch/pytorch#142224
expected: not-bug
device: cuda
grounds: ezyang: "torch.compile reserves the right to change numerics slightly, as long as it leads to a result that is closer to the true value"

The reporter's model (V100): torch.manual_seed(42); x = randn(64, 64); F.gelu."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        return F.gelu(x)


def make_case():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(42))
    return Model().train(False), (x,)
