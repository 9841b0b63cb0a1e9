"""Conditioning: how far the fp64 reference itself moves when the inputs move by about one ULP.

A compiler cannot be blamed for a difference that the exact answer makes too when its inputs
move by one rounding step: a LayerNorm over a near-constant row, `log2` -> `ceil` of such a
row. Nor when its intermediates do: every op of the graph rounds its result once, so a value
made near zero or near constant inside the graph (a norm over one element, a difference of
nearly equal terms) is rounding noise whatever its inputs. Before a bug verdict, the judge
(`divfuzz.oracles.judge`) reruns the fp64 reference `CONDITIONING_DRAWS` times with the inputs
moved (`perturb_inputs`) and every intermediate moved (`IntermediateNudge`) by one rounding
step, and `divfuzz.oracles.compare` counts the elements whose reference moved at least as far as
compiled differs from eager.

Invariants:
- a perturbation is a pure function of (inputs, draw): replays and the gate see the same draws;
- draws come in mirrored pairs (`_directions`): draw 1 moves every value the other way draw 0
  moves it, so a sensitivity to the sign of a rounding (a linear of a norm's noise around zero,
  then a square root) is met whichever way compiled rounded; the other draws are drawn alone;
- each floating input moves by exactly one ULP of its own dtype, up or down, per distinct value:
  equal elements move together, so exact ties (repeated maxima, equal rows) stay ties. A tie is
  part of the input's meaning (argmax returns the first maximum), a near-tie is not;
- integer inputs (indices, masks) never move, and a perturbed copy keeps `requires_grad`;
- an intermediate moves by one step of the dtype the real graph computes it in, at the scale of
  its own value or of its operands, whichever is larger (a rounding error is relative to the
  operands: `x - mean(x)` near zero carries the error of `x`), again per distinct value;
- in the last draw (`ZERO_DRAW`), an intermediate no larger than that step at its operands'
  scale becomes zero instead: a difference of nearly equal terms may round to
  exactly zero in another evaluation (a bilinear weight sum, on the CPU, gave 1.3e-6 in eager
  and 0.0 compiled from operands near 30), and an op singular at zero (fmod(x, x), 1/x, log)
  then gives NaN or inf from rounding alone. A value as large as its operands never moves to zero.
"""

from __future__ import annotations

import torch

CONDITIONING_DRAWS = 3
# Draws that move the intermediates alone, the inputs as given (`IntermediateNudge` only): where
# they move the exact answer as far as compiled differs, the sensitivity lies in values eager
# itself computes with rounding, so eager agreeing with fp64 there is luck, not precision that
# suffices (`divfuzz.oracles.severity_policy._ill_conditioned`). As the draws with the inputs: a
# mirrored pair, then the zero draw.
INNER_DRAWS = 3
# The draw whose nudge takes intermediates within one rounding step of zero to zero.
ZERO_DRAW = CONDITIONING_DRAWS - 1
_SEED = 0x5EED


def _directions(draw: int) -> tuple[int, bool]:
    """(the draw whose random directions `draw` uses, whether it flips them): draws 0 and 1 are a
    mirrored pair; every draw from the zero draw on is its own."""
    if draw < ZERO_DRAW:
        return draw - draw % 2, draw % 2 == 1
    return draw, False


def _up(n: int, generator: torch.Generator, flip: bool) -> torch.Tensor:
    """`n` directions (True: up), drawn from `generator`, all reversed when `flip`."""
    up = torch.rand((n,), generator=generator) < 0.5
    return ~up if flip else up


def perturb_inputs(inputs: list, draw: int) -> list:
    """Copies of `inputs` with every floating tensor moved by one ULP of its dtype per distinct
    value, the direction drawn from (`draw`, the value's rank among the distinct values), the
    mirror of the paired draw's (`_directions`)."""
    seed_draw, flip = _directions(draw)
    g = torch.Generator().manual_seed(_SEED + 7919 * seed_draw)
    out = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            out.append(x)
            continue
        values, inverse = torch.unique(x.detach(), return_inverse=True)
        up = _up(values.numel(), g, flip).reshape(values.shape).to(values.device)
        target = torch.where(up, torch.full_like(values, float("inf")), torch.full_like(values, -float("inf")))
        moved = torch.nextafter(values, target.to(values.device))
        moved = torch.where(torch.isfinite(values), moved, values)  # NaN and Inf stay what they are
        out.append(moved[inverse].reshape(x.shape).requires_grad_(x.requires_grad))
    return out


class IntermediateNudge:
    """A value hook for the fp64 reference (`divfuzz.generators.build.build_reference(hook=...)`)
    that moves every node's value by one rounding step of the dtype the real graph computes it in
    (`real_dtypes`: name -> dtype name), up or down per distinct value as drawn from (`draw`,
    the node's position), at the scale max(|value|, RMS of each of its operands); in `ZERO_DRAW`
    a value within that step of zero at its operands' scale becomes zero. Inputs pass
    unchanged (`perturb_inputs` moves them); so do float64 nodes and non-floating values."""

    def __init__(self, reads: dict[str, tuple[str, ...]], real_dtypes: dict[str, str], draw: int):
        self.reads, self.real_dtypes, self.draw = reads, real_dtypes, draw
        self.seen: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, value):
        self.seen[name] = value
        dtype = self.real_dtypes.get(name)
        if (name not in self.reads or dtype in (None, "float64") or not isinstance(value, torch.Tensor)
                or not value.is_floating_point() or value.numel() == 0):
            return value
        step = torch.finfo(getattr(torch, dtype)).eps
        operands = torch.zeros((), dtype=value.dtype, device=value.device)
        for operand in self.reads[name]:
            x = self.seen.get(operand)
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
                finite = x.detach()[torch.isfinite(x.detach())]
                if finite.numel():
                    operands = torch.maximum(operands, finite.double().pow(2).mean().sqrt().to(value.dtype).to(value.device))
        scale = torch.maximum(value.detach().abs(), operands)
        seed_draw, flip = _directions(self.draw)
        g = torch.Generator().manual_seed(_SEED + 7919 * seed_draw + 104729 * (len(self.seen) + 1))
        values, inverse = torch.unique(value.detach(), return_inverse=True)
        up = _up(values.numel(), g, flip).reshape(values.shape).to(value.device)
        sign = torch.where(up, 1.0, -1.0).to(value.dtype)[inverse].reshape(value.shape)
        moved = value + (sign * step * scale).detach()
        if self.draw == ZERO_DRAW:
            # zero, with the gradient flowing through as it does through every other nudge
            moved = torch.where(value.detach().abs() <= step * operands, value - value.detach(), moved)
        return torch.where(torch.isfinite(value), moved, value)
