"""Distances, in ULPs of a floating dtype, from the pre-image eager rounded to the nearest boundary.

Used for integer outputs: a flip whose pre-image sat within a few ULPs of a boundary is the
expected consequence of a last-bit difference (`boundary`); one far from any boundary is not (`gross`).

Invariants:
- the pre-image is the value eager actually rounded, in the dtype it rounded (callers pass eager's
  own intermediate, not a float64 recomputation);
- the ULP is that dtype's spacing at max(|pre-image|, 1): the absolute error of an op whose
  operands are O(1) does not shrink with its result, so near zero (log2(x) for x near 1, a
  threshold of 0) a last-bit difference stays a few ULPs instead of millions;
- a NaN or infinite pre-image has distance NaN: it marks an undefined float->int cast, which is
  not a compiler finding (see `oracles.compare.compare_int`).
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

# Below this magnitude a pre-image's ULP is taken at this magnitude (see the module docstring).
UNIT_SCALE = 1.0


# Explicit mantissa bits of each floating dtype: 2**bits is where its spacing reaches 1.
MANTISSA_BITS = {name: bits for name, (bits, _) in _FORMAT.items()}


def ulp_of(values64: torch.Tensor, dtype: str) -> torch.Tensor:
    """The spacing of `dtype` at each value (float64). Zero maps to the smallest subnormal spacing."""
    bits, emin = _FORMAT[dtype]
    _, exponent = torch.frexp(values64.abs())
    e = (exponent.to(torch.float64) - 1).clamp(min=emin)
    return torch.exp2(e - bits)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _unit(pre64: torch.Tensor, dtype: str) -> torch.Tensor:
    return ulp_of(pre64.abs().clamp(min=UNIT_SCALE), dtype)


def distance_to_grid_ulps(pre: torch.Tensor, *, offset: float, dtype: str | None = None) -> torch.Tensor:
    """ULPs from each pre-image to the nearest point of the grid {k + offset : k integer}.

    `dtype` defaults to the pre-image's own dtype (the one eager rounded in); NaN where the
    pre-image is NaN or infinite (an undefined cast).
    """
    dtype = dtype or _dtype_name(pre)
    pre64 = pre.to(torch.float64)
    nearest = torch.round(pre64 - offset) + offset
    dist = (pre64 - nearest).abs() / _unit(pre64, dtype)
    return torch.where(torch.isfinite(pre64), dist, torch.full_like(dist, float("nan")))


def distance_to_value_ulps(pre: torch.Tensor, value: float, *, dtype: str | None = None) -> torch.Tensor:
    """ULPs from each pre-image to one threshold (a comparison boundary); NaN where not finite."""
    dtype = dtype or _dtype_name(pre)
    pre64 = pre.to(torch.float64)
    dist = (pre64 - value).abs() / _unit(pre64, dtype)
    return torch.where(torch.isfinite(pre64), dist, torch.full_like(dist, float("nan")))


def undefined_cast(pre: torch.Tensor, int_dtype: torch.dtype) -> torch.Tensor:
    """Where casting the float `pre` to `int_dtype` is undefined: NaN, Inf or outside its range."""
    info = torch.iinfo(int_dtype)
    pre64 = pre.to(torch.float64)
    return ~torch.isfinite(pre64) | (pre64 <= info.min - 1) | (pre64 >= info.max + 1)
