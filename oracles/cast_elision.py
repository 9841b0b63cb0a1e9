"""Whether compiled dropped the rounding of a model's explicit casts, element by element.

A model's explicit cast to a lower precision (`x.to(torch.bfloat16)`) is part of what it computes:
the fp64 reference keeps its rounding. When compiled equals, on the elements a finding is about,
what the model computes *without* those casts' rounding, and is far from what it computes with
them, compiled dropped a rounding the model asks for (`divfuzz.oracles.mechanisms`'
`explicit-cast-elided`, a bug whatever precision switch restores it).

`dropped_cast_elements(rule, eager, compiled, kept, loose)` takes one output: eager's and
compiled's values, the fp64 reference with the casts' rounding (`kept`) and without it (`loose`),
and returns (elements the rule is about, those explained by a dropped cast).

Invariants: an element counts only when compiled is within `FEW_ULPS` of `loose` *and* more than
twice that from `kept` (so a cast whose rounding changes nothing there proves nothing); an integer
element only when compiled equals `loose`'s integer and not `kept`'s.
"""

from __future__ import annotations

import torch

from divfuzz.oracles.boundary import ulp_of
from divfuzz.oracles.severity_policy import FEW_ULPS

# A float element differs grossly when eager's and compiled's values are this far apart relative
# to the larger (a zero against a non-zero, or a finite value against inf, is 1 or more).
GROSS_RELATIVE = 2.0**-6


def same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal, or both NaN."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def rule_elements(rule: str, eager: torch.Tensor, compiled: torch.Tensor) -> torch.Tensor:
    """The elements of an output that `rule` is about: the new NaN/Inf for `nan-inf-new`, the
    grossly different ones for `float-gross-worse`; every differing element otherwise, or when
    the rule's own set is empty. Rounding differences elsewhere in the output (a reordered sum
    differs in its last bits everywhere) are not what a mechanism has to account for."""
    if not compiled.is_floating_point():
        return compiled != eager
    differing = ~same_values(eager, compiled)
    if rule == "nan-inf-new":
        named = ~torch.isfinite(compiled) & torch.isfinite(eager)
    elif rule == "float-gross-worse":
        e, c = eager.double(), compiled.double()
        apart = (e - c).abs() > GROSS_RELATIVE * torch.maximum(e.abs(), c.abs())
        named = differing & (apart | ~torch.isfinite(e) | ~torch.isfinite(c))
    else:
        return differing
    return named if bool(named.any()) else differing


def dropped_cast_elements(rule: str, eager: torch.Tensor, compiled: torch.Tensor, kept: torch.Tensor,
                          loose: torch.Tensor) -> tuple[int, int]:
    """(elements `rule` is about, those where compiled equals the model without its casts' rounding)."""
    if not (eager.shape == compiled.shape == kept.shape == loose.shape):
        return 0, 0
    device = loose.device
    named = rule_elements(rule, eager.to(compiled.device), compiled).to(device)
    got, loose64, kept64 = compiled.detach().double().to(device), loose.detach().double(), kept.detach().double().to(device)
    if compiled.is_floating_point():
        ulp = ulp_of(loose64, str(compiled.dtype).removeprefix("torch."))
        close = ((got - loose64).abs() <= FEW_ULPS * ulp) & ((got - kept64).abs() > 2 * FEW_ULPS * ulp)
    else:
        close = (got == loose64) & (got != kept64)
    return int(named.sum()), int((named & close).sum())
