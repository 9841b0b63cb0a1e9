"""Input values: each recipe is a plain-torch function of (shape, generator) returning float32.

Invariants: values are a pure function of (recipe kind, seed, the spec's input order), made on
the CPU and then moved, so every device sees the same numbers. `reports/repro.py` copies these
functions' source into each `repro.py`, so they use nothing but `torch`.
"""

from __future__ import annotations

import torch


def normal(shape, g):
    return torch.randn(shape, generator=g)


def large_mean(shape, g):
    # Rows with a large mean and a small spread: mean/variance computations cancel.
    row_mean = torch.rand(tuple(shape[:-1]) + (1,), generator=g) * 400 + 100
    return row_mean + 0.05 * torch.randn(shape, generator=g)


def near_constant(shape, g):
    row_value = torch.randn(tuple(shape[:-1]) + (1,), generator=g)
    return row_value + 1e-4 * torch.randn(shape, generator=g)


def near_pow2(shape, g):
    # Powers of two, each moved by up to 8 float32 ULPs: log2 then sits next to an integer.
    power = torch.exp2(torch.randint(-6, 7, shape, generator=g).float())
    nudge = 1 + torch.randint(-8, 9, shape, generator=g).float() * 2.0**-23
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * power * nudge


def near_bf16_midpoint(shape, g):
    # float32 values within 3 ULPs of the midpoint between two neighbouring bfloat16 values.
    base = torch.randn(shape, generator=g).to(torch.bfloat16).float().view(torch.int32)
    jitter = torch.randint(-3, 4, shape, generator=g, dtype=torch.int32)
    return (base + 0x8000 + jitter).view(torch.float32)


def log_uniform(shape, g):
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * torch.pow(10.0, torch.rand(shape, generator=g) * 12 - 6)


def mixed_sign(shape, g):
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * torch.exp(torch.randn(shape, generator=g) * 2)


def decimal_grid(shape, g):
    # Multiples of 0.1 (prices, timestamps, tenths): a floor or trunc division by a decimal
    # constant then sits on its jumps, where eager's exact floor division and a compiler's
    # floor(x * (1 / 0.1)) or floor(x / 0.1) disagree.
    return torch.randint(-20000, 20001, shape, generator=g).float() * 0.1


# Edge values (issue 24). Each is a pure function of (shape, generator), as above.


def ties(shape, g):
    # Values on a coarse grid (every value repeats), each row's maximum 2.5 at two distinct
    # positions (where the last dim allows), and every second row along dim -2 a copy of the row
    # before it: argmax/max/sort/topk/pooling and their backward meet exact ties.
    values = torch.randint(-4, 5, shape, generator=g).float() * 0.5
    rows = tuple(shape[:-1]) + (1,)
    first = torch.randint(0, shape[-1], rows, generator=g)
    second = (first + 1 + torch.randint(0, max(shape[-1] - 1, 1), rows, generator=g)) % shape[-1]
    values = values.scatter(-1, first, 2.5).scatter(-1, second, 2.5)
    if len(shape) >= 2 and shape[-2] >= 2:
        values[..., 1::2, :] = values[..., 0 : shape[-2] - 1 : 2, :]
    return values


def signed_zeros(shape, g):
    # A quarter +0.0, a quarter -0.0, a quarter tiny normals of either sign (2**-20 to 2**-60),
    # the rest standard normal: sqrt/rsqrt/reciprocal/sign/division meet the sign of zero.
    kind = torch.randint(0, 4, shape, generator=g)
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    tiny = sign * torch.exp2(-torch.randint(20, 61, shape, generator=g).float())
    values = torch.where(kind == 2, tiny, torch.randn(shape, generator=g))
    values = torch.where(kind == 0, torch.zeros(shape), values)
    return torch.where(kind == 1, torch.full(shape, -0.0), values)


def inf_divisors(shape, g):
    # One in eight +inf, one in eight -inf, one in sixteen +0.0 and one in sixteen -0.0, the rest
    # mixed-sign magnitudes from e**-4 to e**4: remainder/fmod/division by infinite, zero and
    # negative divisors (and infinite dividends).
    kind = torch.randint(0, 16, shape, generator=g)
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    values = sign * torch.exp(torch.randn(shape, generator=g) * 2)
    values = torch.where(kind < 2, torch.full(shape, float("inf")), values)
    values = torch.where((kind >= 2) & (kind < 4), torch.full(shape, -float("inf")), values)
    values = torch.where(kind == 4, torch.zeros(shape), values)
    return torch.where(kind == 5, torch.full(shape, -0.0), values)


def subnormal(shape, g):
    # Both signs of: float32 (and bfloat16) subnormals, the smallest float32 normals (within 8 ULPs
    # of 2**-126), float16 subnormals (2**-24 to 2**-14, normal in float32) and standard normals.
    kind = torch.randint(0, 4, shape, generator=g)
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    f32_sub = torch.randint(1, 2**23, shape, generator=g, dtype=torch.int32).view(torch.float32)
    f32_min = (torch.randint(0, 9, shape, generator=g, dtype=torch.int32) + 2**23).view(torch.float32)
    f16_sub = torch.exp2(-14 - torch.rand(shape, generator=g) * 10)
    values = torch.where(kind == 0, f32_sub, torch.where(kind == 1, f32_min, torch.where(kind == 2, f16_sub, torch.randn(shape, generator=g).abs())))
    return sign * values


def near_fp16_midpoint(shape, g):
    # float32 values within 3 ULPs of the midpoint between two neighbouring float16 values (the
    # float16 normals randn reaches: its spacing is 2**13 float32 ULPs there).
    base = torch.randn(shape, generator=g).clamp(-60000.0, 60000.0).to(torch.float16).float()
    base = torch.where(base.abs() < 2.0**-14, torch.ones(shape), base).view(torch.int32)
    jitter = torch.randint(-3, 4, shape, generator=g, dtype=torch.int32)
    return (base + 0x1000 + jitter).view(torch.float32)


def near_half_integer(shape, g):
    # Integers and half-integers k/2 (|k/2| <= 64) moved by up to 2 float32 ULPs (0 stays 0): the
    # jumps of round (ties to even), floor, ceil, trunc and remainder. In bf16/fp16 they round back
    # to k/2 exactly.
    values = torch.randint(-128, 129, shape, generator=g).float() * 0.5
    nudged = (values.view(torch.int32) + torch.randint(-2, 3, shape, generator=g, dtype=torch.int32)).view(torch.float32)
    return torch.where(values == 0, values, nudged)


def near_overflow(shape, g):
    # Half the magnitudes within a factor 2 of float16's largest value (65504), half within a factor
    # 2 of float32's (bfloat16 rounds the top of that range to inf); both signs. A square, an exp,
    # a sum or a variance overflows.
    near_fp16 = 65504.0 * (0.5 + 0.5 * torch.rand(shape, generator=g))
    near_fp32 = 3.4028234663852886e38 * (0.5 + 0.5 * torch.rand(shape, generator=g))
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * torch.where(torch.rand(shape, generator=g) < 0.5, near_fp16, near_fp32)


# Parameter initialisations.
def fan_in(shape, g):
    return torch.randn(shape, generator=g) / shape[-1] ** 0.5


def near_one(shape, g):
    return (1 + 0.1 * torch.randn(shape, generator=g)).abs()


def near_zero(shape, g):
    return 0.1 * torch.randn(shape, generator=g)


RECIPES = {
    f.__name__: f
    for f in (
        normal, large_mean, near_constant, near_pow2, near_bf16_midpoint, log_uniform, mixed_sign, decimal_grid,
        ties, signed_zeros, inf_divisors, subnormal, near_fp16_midpoint, near_half_integer, near_overflow,
    )
}
# The recipes of edge values (a test checks each contains what its comment promises).
EDGE_RECIPES = ("ties", "signed_zeros", "inf_divisors", "subnormal", "near_fp16_midpoint", "near_half_integer", "near_overflow")
INITS = {f.__name__: f for f in (fan_in, near_one, near_zero)}
