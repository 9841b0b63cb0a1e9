"""Whether a zero of the other sign is a value-selecting op choosing between signed zeros.

`torch.minimum(-0.0, +0.0)` is -0.0 in eager, as IEEE 754-2019's minimum orders -0 below +0; a
kernel that selects with `a < b` treats the two as equal and returns whichever it compares second.
Inductor fixed that as a bug on CUDA (issue 185610, PR 186933 "Use tl.minimum to handle signed
zeros", merged by jansel; PR 185765 covered maximum and the arg- variants); the CPU lowering's
counterpart is open with a fix proposed (issue 194347, PR 194472, which notes that CPU eager is
itself inconsistent between its scalar and SIMD paths). The mechanism's row is
`divfuzz.records.mechanism_table.MECHANISMS["signed-zero-selection"]`; the experiments that call
this live in `divfuzz.fuzzer.engine.explain` (campaign graphs) and
`divfuzz.fuzzer.triage.user_module` (captured aten graphs). Torch only; no graph knowledge.

Invariant: an element counts only where the op's own operands offer a zero of each sign (both
operands of a binary selection, the reduced input of a selecting reduction): a selection cannot
make a zero's sign, only pick one, so elsewhere the sign came from arithmetic before it (a GELU's
underflow, issue 189804, closed as not planned), which this mechanism does not explain.
"""

from __future__ import annotations

import torch

from divfuzz.oracles.named_elements import rule_elements

# Binary ops that return one of their two operands, by name (torch's and aten's share them).
BINARY_SELECTORS = frozenset({"minimum", "maximum", "fmin", "fmax"})
# Reductions that return one of their input's values (the campaign's `max_dim`/`min_dim` are
# aten's `max.dim`/`min.dim`).
REDUCING_SELECTORS = frozenset({"amax", "amin", "max", "min", "max_dim", "min_dim"})


def is_selector(op: str) -> bool:
    """Whether `op` (a torch, aten or campaign op name, without an overload) selects one of its operands' values."""
    return op in BINARY_SELECTORS or op in REDUCING_SELECTORS


def _both_signs(x: torch.Tensor) -> torch.Tensor:
    zero = x == 0
    return zero & torch.signbit(x), zero & ~torch.signbit(x)


def selected_zeros(op: str, operands: list, eager: torch.Tensor, compiled: torch.Tensor) -> tuple[int, int]:
    """(the zeros of the other sign in `compiled`, those of them where `op`'s `operands` (eager's
    values) offer a zero of each sign to select from). (0, 0) for an op that selects nothing or
    operands of another shape."""
    if not is_selector(op) or not operands or not all(isinstance(x, torch.Tensor) for x in operands):
        return 0, 0
    with torch.no_grad():
        named = rule_elements("zero-sign-wrong", eager, compiled.to(eager.device))
        n_named = int(named.sum())
        if op in BINARY_SELECTORS:
            if len(operands) < 2:
                return n_named, 0
            a, b = (x.detach().to(eager.device) for x in operands[:2])
            try:
                a, b = torch.broadcast_tensors(a, b)
            except RuntimeError:
                return n_named, 0
            if a.shape != eager.shape:
                return n_named, 0
            offered = (a == 0) & (b == 0) & (torch.signbit(a) != torch.signbit(b))
            return n_named, int((named & offered).sum())
        negative, positive = _both_signs(operands[0].detach())
        offered = bool(negative.any()) and bool(positive.any())  # the reduced input holds both zeros
        return n_named, n_named if offered else 0


def detail(n_named: int, output: str, op: str) -> str:
    """The explanation's words, the same on both paths."""
    return (f"all {n_named} zeros of the other sign in {output} = {op} are where its operands hold a zero of each "
            "sign: the kernel selected as if -0.0 == +0.0")
