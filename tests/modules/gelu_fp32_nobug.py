"""No bug: F.gelu (erf) in fp32 on a standard-normal 64x64 input. Compiled differs from eager by
rounding only (measured before issue 20: "41/4096 differ, max 401 ULP; compiled is closer to
fp64", rated suspect with a repro). Nothing here may be filed."""

import torch
import torch.nn.functional as F


def make_case():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    return F.gelu, (x,)
