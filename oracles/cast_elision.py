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
from divfuzz.oracles.named_elements import rule_elements
from divfuzz.oracles.severity_policy import FEW_ULPS

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
