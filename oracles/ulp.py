"""ULP distance between floating tensors, from their bit patterns.

Invariants: +0 and -0 are 0 ULPs apart; adjacent representable values are 1 apart, across zero
too (the smallest positive and negative subnormals are 2 apart, zero lying between them);
NaN positions are not measured here (see `nan_inf_mismatch`).
"""

from __future__ import annotations

import torch

_INT_VIEW = {
    torch.float32: (torch.int32, 0x7FFFFFFF),
    torch.bfloat16: (torch.int16, 0x7FFF),
    torch.float16: (torch.int16, 0x7FFF),
    torch.float64: (torch.int64, 0x7FFFFFFFFFFFFFFF),
}


def ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Map floats to int64 so that ordering and adjacency match the reals (-0 and +0 both to 0)."""
    int_dtype, magnitude_mask = _INT_VIEW[x.dtype]
    i = x.contiguous().view(int_dtype).to(torch.int64)
    magnitude = i & magnitude_mask
    return torch.where(i < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in ULPs of their (common) dtype, as int64; 0 wherever either side is NaN."""
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance needs one dtype, got {a.dtype} and {b.dtype}")
    d = (ordered_bits(a) - ordered_bits(b)).abs()
    return torch.where(torch.isnan(a) | torch.isnan(b), torch.zeros_like(d), d)


def nan_inf_mismatch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elements where NaN or signed-Inf placement differs between a and b."""
    nan_differs = torch.isnan(a) != torch.isnan(b)
    inf_differs = torch.isinf(a) != torch.isinf(b)
    both_inf_sign = torch.isinf(a) & torch.isinf(b) & (torch.signbit(a) != torch.signbit(b))
    return nan_differs | inf_differs | both_inf_sign


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads included): the test for eager determinism."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(torch.equal(ordered_bits(a), ordered_bits(b)) and torch.equal(torch.signbit(a), torch.signbit(b)))
    return bool(torch.equal(a, b))
