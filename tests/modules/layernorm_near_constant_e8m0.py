"""Ill-conditioned, not a bug: a hand-written LayerNorm over rows that are constant up to a few
ULPs, then the E8M0 scale encoding `ceil(log2(|y|)) + 127 -> int8`. The normalised values of such a
row are set by rounding residue: the fp64 answer itself moves by far more than a rounding step when
an input moves by one ULP, so integer flips far from a rounding boundary prove nothing."""

import torch


def encode(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-12)
    return (torch.ceil(torch.log2(y.abs() + 1e-30)) + 127).clamp(0, 254).to(torch.int8)


def make_case():
    g = torch.Generator().manual_seed(2)
    base = torch.randn(256, 1, generator=g) * 4
    steps = torch.randint(-2, 3, (256, 128), generator=g).float()
    x = base + steps * base.abs() * 2.0**-23  # each row constant up to +-2 ULPs
    return encode, (x,)
