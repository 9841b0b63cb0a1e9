"""Signed zeros through value-selecting ops and through arithmetic, for the signed-zero-selection
mechanism (tests/test_signed_zero_selection.py): `minimum_of_zeros` selects between a -0.0 and a
+0.0 (IEEE 754-2019 orders -0 below +0; issue 185610's class); `amax_of_zeros` reduces rows that
hold both; `scaled_zeros` makes its zeros' signs by arithmetic, which no selection explains."""

import torch


def _zeros(n: int, dtype=torch.float32):
    signs = torch.tensor([(-1.0) ** i for i in range(n)], dtype=dtype)
    return signs * 0.0  # -0.0 where the sign is negative: -1.0 * 0.0


def minimum_of_zeros():
    # issue 194347's shape: one element each, which the CPU lowering's scalar path selects
    return (lambda a, b: torch.minimum(a, b)), (torch.tensor([-0.0]), torch.tensor([0.0]))


def amax_of_zeros():
    return (lambda a: torch.amax(a.reshape(8, 8), dim=-1)), (_zeros(64),)


def scaled_zeros():
    return (lambda a: (a * 0.5) + 0.0), (_zeros(64),)
