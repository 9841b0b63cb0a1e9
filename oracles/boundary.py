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
  not a compiler finding (see `divfuzz.oracles.compare.compare_int`).
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


def distance_ulps(
    pre_image: torch.Tensor, dtype: str, *, grid_offset: float | None = None, threshold: float | None = None,
    row_reduced: bool = False,
) -> torch.Tensor:
    """ULPs (of `dtype`) from each pre-image to where its output jumps: the grid {k + grid_offset}
    or one `threshold` (exactly one is given). `row_reduced`: a row's output counts over the last
    dimension, so its distance is that of its closest element (a NaN compares false on both sides
    of a threshold and never flips, so it does not count)."""
    if (grid_offset is None) == (threshold is None):
        raise ValueError("distance_ulps: give exactly one of grid_offset and threshold")
    if grid_offset is not None:
        dist = distance_to_grid_ulps(pre_image, offset=grid_offset, dtype=dtype)
    else:
        dist = distance_to_value_ulps(pre_image, threshold, dtype=dtype)
    return dist.nan_to_num(nan=float("inf")).amin(-1) if row_reduced else dist


def undefined_cast(pre: torch.Tensor, int_dtype: torch.dtype) -> torch.Tensor:
    """Where casting the float `pre` to `int_dtype` is undefined: NaN, Inf or outside its range."""
    info = torch.iinfo(int_dtype)
    pre64 = pre.to(torch.float64)
    return ~torch.isfinite(pre64) | (pre64 <= info.min - 1) | (pre64 >= info.max + 1)


def selection_distance_ulps(x: torch.Tensor, dim: int | None, *, largest: bool, keepdim: bool = False) -> torch.Tensor:
    """For an arg-reduction of `x` along `dim` (None: the whole tensor), each result's distance
    from a tie: the gap between the best and the second-best candidate, relative to
    max(|best|, 1), in ULPs of `x`'s dtype. An index that changes in a row whose winner stood
    clear (far from a tie) changes the value selected; a NaN row, or tied infinities, reads 0 (a
    tie). The same measure as the campaign's arg-reductions (`divfuzz.generators.ops`, `_tie_gap`)."""
    dtype = _dtype_name(x)
    v = x.detach().to(torch.float64)
    if dim is None:
        v, dim = v.reshape(-1), 0
    if v.shape[dim] < 2:
        gap = torch.full_like(v.select(dim, 0), float("inf"))
    else:
        top = torch.topk(v, 2, dim, largest=largest).values
        best, second = top.select(dim, 0), top.select(dim, 1)
        gap = torch.nan_to_num((best - second).abs() / best.abs().clamp(min=1), nan=0.0)
    if keepdim:
        gap = gap.unsqueeze(dim)
    return gap / ulp_of(torch.ones_like(gap), dtype)

