"""Eval-mode BatchNorm1d, ELU, GroupNorm, then log(clamp(., 1e-6)) diverges by ~1 under Inductor.

issue: pytorch/pytorch#181696
expected: bug
device: any
grounds: labelled high priority; maintainer jansel's PR 184644 ("Fixes #181696": match native CPU group norm affine numerics in the decomposition)

The reporter's model on torch.ones([6, 10, 12]): GroupNorm of a constant row is 0 in exact arithmetic,
so log(clamp(t, 1e-6)) magnifies the decomposition's last-bit residue to a gap of ~1."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(10).train(False)
        self.elu = nn.ELU()
        self.gn = nn.GroupNorm(10, 10).train(False)

    def forward(self, x):
        t = self.bn(x)
        t = self.elu(t)
        t = self.gn(t)
        return torch.log(torch.clamp(t, min=1e-6))


def make_case():
    torch.manual_seed(0)
    model = Model().train(False)
    return model, (torch.ones([6, 10, 12]),)
