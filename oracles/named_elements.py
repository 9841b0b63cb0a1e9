"""Which elements of one output a finding's rule is about.

A mechanism (`divfuzz.fuzzer.engine.explain`, `divfuzz.oracles.cast_elision`) has to account for
the elements the rule names, not every last-bit difference beside them: a reordered sum differs in
its last bits everywhere. Torch only; no graph knowledge.
"""

from __future__ import annotations

import torch

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
