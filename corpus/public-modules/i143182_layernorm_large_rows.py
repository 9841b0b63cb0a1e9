"""nn.LayerNorm over large 2-D rows on the CPU: compiled differs from eager by ~7e-4.

issue: pytorch/pytorch#143182
expected: not-bug
device: cpu
grounds: eellison: "only submit an issue if compile diverges more from fp64 than eager ... the results are closer, so we are more accurately computing this"

The reporter's model normalises over [10000, 1000] on a (1, 3, 10000, 1000) randn input (30M elements);
scaled here to [1000, 300] on (1, 3, 1000, 300) to stay CPU-cheap; same reduction-order mechanism."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm([1000, 300])

    def forward(self, x):
        return self.ln(x)


def make_case():
    x = torch.randn(1, 3, 1000, 300, generator=torch.Generator().manual_seed(0))
    return Model().train(False), (x,)
