"""A wrong output type: `cumsum` of a bool mask with an explicit `dtype=torch.float16`. The
user's next line sees whatever dtype comes back; any other dtype than eager's is wrong whatever
the values (issue 20: a rewrite pass once dropped the dtype, returning float32)."""

import torch


def masked_positions(x):
    return torch.cumsum(x > 0, dim=-1, dtype=torch.float16)


def make_case():
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    return masked_positions, (x,)
