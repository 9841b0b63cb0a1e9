"""Inductor's vectorized GELU gives a tiny negative (-1.65e-7) where eager gives -0.0, so sign() flips.

issue: pytorch/pytorch#189804
expected: not-bug
device: cpu
grounds: frost-intel: "a very ill-conditioned input ... doesn't really represent an accuracy problem ... close this as not-planned?"; closed

The reporter's input: two values near -5.53 where eager's erf GELU underflows to -0.0."""

import torch
import torch.nn.functional as F


class BugModel(torch.nn.Module):
    def forward(self, x):
        return torch.sign(F.gelu(x))


def make_case():
    x = torch.tensor([-5.533906936645508, -5.531643390655518], dtype=torch.float32)
    return BugModel(), (x,)
