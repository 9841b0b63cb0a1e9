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


# Parameter initialisations.
def fan_in(shape, g):
    return torch.randn(shape, generator=g) / shape[-1] ** 0.5


def near_one(shape, g):
    return (1 + 0.1 * torch.randn(shape, generator=g)).abs()


def near_zero(shape, g):
    return 0.1 * torch.randn(shape, generator=g)


RECIPES = {
    f.__name__: f
    for f in (normal, large_mean, near_constant, near_pow2, near_bf16_midpoint, log_uniform, mixed_sign, decimal_grid)
}
INITS = {f.__name__: f for f in (fan_in, near_one, near_zero)}
