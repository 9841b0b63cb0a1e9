"""Whether some order of an accumulation leaves the float range, row by row.

A compiler may reassociate a sum, a sum of squares or a product along a dim (a tree reduction, a
parallel scan): each order has its own partial results. PyTorch's numerical-accuracy notes say it
under "Extremal values": when intermediate results may overflow the range of the dtype, the end
result may overflow too, even though it is representable. Eager's order is one of many, so an
accumulation whose partial results *can* leave the range in some order is arithmetic at the range's
edge, not a compiler defect, wherever the order makes inf, NaN or zero land.

`leaves_range_rows(x64, accumulation)` answers per row of the fp64 input `x64` (its last dim
accumulated). The range is float32's: bfloat16 shares it, and float16 reductions and scans
accumulate in float32 in eager and in Inductor alike (opmath), so float16's narrower range is
never where their partial results live.

Invariants: a row with every partial result of every order inside `RANGE_EDGE_FRACTION` of the
largest finite float32 (and, for products, no partial product that underflows past the smallest
subnormal where the row's own prefix products are normal) is never flagged; NaN in the input
flags nothing (the input's own inf/NaN are judged elsewhere).
"""

from __future__ import annotations

import math

import torch

from divfuzz.oracles.severity_policy import RANGE_EDGE_FRACTION

_F32 = torch.finfo(torch.float32)
# log2 of the largest partial result still away from the edge, and of the smallest float32 subnormal
_LOG2_EDGE = math.log2(RANGE_EDGE_FRACTION * _F32.max)
_LOG2_SMALLEST = math.log2(_F32.smallest_normal) - 23
_LOG2_NORMAL = math.log2(_F32.smallest_normal)
# Stands in for log2(0) in window sums, far beyond any finite float64 product's exponent
_ZERO_LOG = 1.0e5


def _max_window(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Over the last dim: for each position j, the largest sum of a contiguous window ending at or
    before j (running), computed from prefix sums (max over k <= j of S_k - min over i < k of S_i)."""
    s = torch.cumsum(v, -1)
    before = torch.cat([torch.zeros_like(s[..., :1]), s[..., :-1]], -1)
    lowest_before = torch.cummin(before, -1).values
    return torch.cummax(s - lowest_before, -1).values, s


def leaves_range_rows(x64: torch.Tensor, accumulation: str) -> torch.Tensor:
    """A bool per row of `x64` (shape `x64.shape[:-1]`): some order of accumulating the row gives
    a partial result outside float32's range (`accumulation`: one of `OpDef.accumulates`'s
    values). A variance's partial results are squares about the mean: an implementation that
    squares the raw values, and overflows where the centred squares do not, is not excused."""
    x = x64.detach().to(torch.float64)
    if x.dim() == 0:
        x = x.reshape(1)
    if accumulation == "sum":
        return x.abs().sum(-1) >= RANGE_EDGE_FRACTION * _F32.max
    if accumulation == "sum_of_squares":
        return (x * x).sum(-1) >= RANGE_EDGE_FRACTION * _F32.max
    if accumulation == "centered_sum_of_squares":
        centered = x - x.mean(-1, keepdim=True)
        return (centered * centered).sum(-1) >= RANGE_EDGE_FRACTION * _F32.max
    if accumulation != "prod":
        raise ValueError(f"unknown accumulation {accumulation!r}")
    logs = x.abs().log2()
    zero = x == 0
    highest, log_prefix = _max_window(torch.where(zero, -_ZERO_LOG, logs))
    overflows = highest[..., -1] >= _LOG2_EDGE
    # A window whose product underflows to zero where the prefix product holding it is normal:
    # one order gives 0 (then 0 * inf = NaN) where the row's true product is representable.
    # (Zeros count as -_ZERO_LOG in the prefix, +_ZERO_LOG in the lowest window: a window holding
    # an exact zero is exactly zero in every order.)
    negated_lowest, _ = _max_window(torch.where(zero, -_ZERO_LOG, -logs))
    underflows = ((-negated_lowest < _LOG2_SMALLEST) & (log_prefix > _LOG2_NORMAL)).any(-1)
    return (overflows | underflows) & ~torch.isnan(x).any(-1)


def leaves_range_mask(x64: torch.Tensor, accumulation: str, out_shape: torch.Size) -> torch.Tensor | None:
    """`leaves_range_rows` laid over an output of `out_shape`: a scan's output (same shape as the
    input) is flagged row by row, a reduction over the last dim (one element per row, any
    keepdim) element by element; None for any other geometry."""
    rows = leaves_range_rows(x64, accumulation)
    if tuple(out_shape) == tuple(x64.shape):
        return rows.unsqueeze(-1).expand(x64.shape)
    if math.prod(out_shape) == rows.numel():
        return rows.reshape(out_shape)
    return None
