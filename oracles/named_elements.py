"""Which elements of one output a finding's rule is about.

A mechanism (`divfuzz.fuzzer.engine.explain`, `divfuzz.oracles.cast_elision`) has to account for
the elements the rule names, not every last-bit difference beside them: a reordered sum differs in
its last bits everywhere. Torch only; no graph knowledge.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Named = Sequence[tuple[str, torch.Tensor]]

# A float element differs grossly when eager's and compiled's values are this far apart relative
# to the larger (a zero against a non-zero, or a finite value against inf, is 1 or more).
GROSS_RELATIVE = 2.0**-6


def same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal, or both NaN."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def rule_elements(rule: str, eager: torch.Tensor, compiled: torch.Tensor) -> torch.Tensor:
    """The elements of an output that `rule` is about: the new NaN/Inf for `nan-inf-new`, the
    grossly different ones for `float-gross-worse`, the zeros of the other sign for
    `zero-sign-wrong`; every differing element otherwise, or when
    the rule's own set is empty. Rounding differences elsewhere in the output (a reordered sum
    differs in its last bits everywhere) are not what a mechanism has to account for."""
    if not compiled.is_floating_point():
        return compiled != eager
    differing = ~same_values(eager, compiled)
    if rule == "nan-inf-new":
        named = ~torch.isfinite(compiled) & torch.isfinite(eager)
    elif rule == "zero-sign-wrong":  # zeros compare equal: these differ in the sign bit alone
        named = (eager == 0) & (compiled == 0) & (torch.signbit(eager) != torch.signbit(compiled))
    elif rule == "float-gross-worse":
        e, c = eager.double(), compiled.double()
        apart = (e - c).abs() > GROSS_RELATIVE * torch.maximum(e.abs(), c.abs())
        named = differing & (apart | ~torch.isfinite(e) | ~torch.isfinite(c))
    else:
        return differing
    return named if bool(named.any()) else differing


def nearest_alternative(eager: Named, others: list[Named], compiled: Named) -> tuple[list[tuple[str, torch.Tensor]], int]:
    """Eager's outputs with each element replaced by the value, among eager's and `others`' (eager
    run another legal way, e.g. a sum in another order), nearest compiled's (equal for integers;
    NaN equals NaN), and how many elements moved. Outputs are matched by name; one whose shapes
    disagree is kept as eager's."""
    got = dict(compiled)
    alternatives = [dict(o) for o in others]
    mixed, moved = [], 0
    for name, e in eager:
        c = got.get(name)
        alts = [a.get(name) for a in alternatives]
        if not isinstance(c, torch.Tensor) or not all(isinstance(a, torch.Tensor) and a.shape == e.shape for a in alts) \
                or c.shape != e.shape:
            mixed.append((name, e))
            continue
        c = c.to(e.device)
        best, far = e, _distance(e, c)
        for a in alts:
            a = a.to(e.device)
            d = _distance(a, c)
            nearer = d < far
            best, far = torch.where(nearer, a, best), torch.where(nearer, d, far)
        moved += int((~same_values(best, e) if e.is_floating_point() else best != e).sum())
        mixed.append((name, best))
    return mixed, moved


def _distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise |a - b| in float64, 0 where equal (NaN with NaN, inf with the same inf) and inf
    where one side is NaN or inf and the other is not."""
    if not a.is_floating_point():
        return (a != b).double()
    a, b = a.double(), b.double()
    d = (a - b).abs()
    return torch.where(same_values(a, b), torch.zeros_like(d), torch.nan_to_num(d, nan=float("inf")))
