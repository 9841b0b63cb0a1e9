"""argmin of a transposed 2x2 tensor plus 0.5 returns the wrong index under torch.compile.

issue: pytorch/pytorch#197739
expected: bug
device: any
grounds: labelled high priority (torch 2.14: eager 1, compiled 2)

The reporter's model: x.t() + 0.5, then argmin; torch.manual_seed(0); x = torch.randn(2, 2)."""

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        xt = x.t()
        out = xt + 0.5
        return out.argmin()


def make_case():
    x = torch.randn(2, 2, generator=torch.Generator().manual_seed(0))
    return Model(), (x,)
