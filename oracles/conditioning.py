"""Conditioning: how far the fp64 reference itself moves when the inputs move by about one ULP.

A compiler cannot be blamed for a difference that the exact answer makes too when its inputs
move by one rounding step: a LayerNorm over a near-constant row, `log2` -> `ceil` of such a
row. Before a bug verdict, the judge (`divfuzz.oracles.judge`) reruns the fp64 reference on
`CONDITIONING_DRAWS` perturbed copies of the inputs, and `divfuzz.oracles.compare` counts the elements
whose reference moved at least as far as compiled differs from eager.

Invariants:
- a perturbation is a pure function of (inputs, draw): replays and the gate see the same draws;
- each floating input moves by exactly one ULP of its own dtype, up or down, per distinct value:
  equal elements move together, so exact ties (repeated maxima, equal rows) stay ties. A tie is
  part of the input's meaning (argmax returns the first maximum), a near-tie is not;
- integer inputs (indices, masks) never move, and a perturbed copy keeps `requires_grad`.
"""

from __future__ import annotations

import torch

CONDITIONING_DRAWS = 3
_SEED = 0x5EED


def perturb_inputs(inputs: list, draw: int) -> list:
    """Copies of `inputs` with every floating tensor moved by one ULP of its dtype per distinct
    value, the direction drawn from (`draw`, the value's rank among the distinct values)."""
    g = torch.Generator().manual_seed(_SEED + 7919 * draw)
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            out.append(x)
            continue
        values, inverse = torch.unique(x.detach(), return_inverse=True)
        up = (torch.rand(values.shape, generator=g) < 0.5).to(values.device)
        target = torch.where(up, torch.full_like(values, float("inf")), torch.full_like(values, -float("inf")))
        moved = torch.nextafter(values, target.to(values.device))
        moved = torch.where(torch.isfinite(values), moved, values)  # NaN and Inf stay what they are
        out.append(moved[inverse].reshape(x.shape).requires_grad_(x.requires_grad))
    return out
