"""Distances, in ULPs of a floating dtype, from float64 pre-images to rounding boundaries.

Used for integer outputs: a flip whose pre-image sat within a few ULPs of a boundary is the
expected consequence of a last-bit difference (`boundary`); one far from any boundary is not (`gross`).
"""

from __future__ import annotations

import torch

# (mantissa bits, smallest normal exponent) of each dtype: ulp(x) = 2**(max(e, emin) - bits).
_FORMAT = {
    "float32": (23, -126),
    "bfloat16": (7, -126),
    "float16": (10, -14),
    "float64": (52, -1022),
}


def ulp_of(values64: torch.Tensor, dtype: str) -> torch.Tensor:
    """The spacing of `dtype` at each value (float64). Zero maps to the smallest subnormal spacing."""
    bits, emin = _FORMAT[dtype]
    _, exponent = torch.frexp(values64.abs())
    e = (exponent.to(torch.float64) - 1).clamp(min=emin)
    return torch.exp2(e - bits)


def distance_to_grid_ulps(pre64: torch.Tensor, *, offset: float, dtype: str) -> torch.Tensor:
    """ULPs from each value to the nearest point of the grid {k + offset : k integer}."""
    nearest = torch.round(pre64 - offset) + offset
    dist = (pre64 - nearest).abs() / ulp_of(pre64, dtype)
    return torch.where(torch.isfinite(pre64), dist, torch.full_like(dist, float("inf")))


def distance_to_value_ulps(pre64: torch.Tensor, value: float, *, dtype: str) -> torch.Tensor:
    """ULPs from each value to one threshold (a comparison boundary)."""
    dist = (pre64 - value).abs() / ulp_of(pre64, dtype)
    return torch.where(torch.isfinite(pre64), dist, torch.full_like(dist, float("inf")))
