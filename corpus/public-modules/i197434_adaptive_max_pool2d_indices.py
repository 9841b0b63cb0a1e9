"""adaptive_max_pool2d with return_indices on a transposed input returns transposed indices.

issue: pytorch/pytorch#197434
expected: bug
device: any
grounds: fixed by PR 197596 ("Fixes #197434": the argmax offset was decoded in the wrong window order)

The reporter's repro: torch.manual_seed(0); x = torch.randn(2, 4, 12, 12).transpose(2, 3); 27 of 32 indices differ."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        out = F.adaptive_max_pool2d(x, (2, 2), return_indices=True)
        return out[1]


def make_case():
    x = torch.randn(2, 4, 12, 12, generator=torch.Generator().manual_seed(0)).transpose(2, 3)
    return Model(), (x,)
