"""Running a spec's graph function on its inputs: outputs, gradients, and the integer outputs'
boundary distances. One place, for the case (`divfuzz.fuzzer.engine.execute`) and the experiments
that explain it (`divfuzz.fuzzer.engine.explain`)."""

from __future__ import annotations

import contextlib

import torch

from divfuzz.generators.build import rounding_boundaries
from divfuzz.generators.runtime import cotangents
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.boundary import distance_ulps

Named = list[tuple[str, torch.Tensor]]


def boundary_distances(spec: GraphSpec, eager_env: dict) -> dict[str, torch.Tensor]:
    """Per integer output, each element's pre-image distance (ULPs) from where it jumps: the ops'
    `RoundingBoundary` measured by the boundary oracle. NaN marks an undefined cast."""
    return {
        name: distance_ulps(b.pre_image, b.dtype, grid_offset=b.grid_offset, threshold=b.threshold, row_reduced=b.row_reduced)
        for name, b in rounding_boundaries(spec, eager_env).items()
    }


def run_forward_backward(spec: GraphSpec, fn, inputs: list[torch.Tensor], cots=None, *,
                         backward_span=None) -> tuple[Named, list]:
    """Outputs (and, for backward specs, gradients of every requires_grad input), named.

    `cots` are the output gradients to use; when None they are drawn from the recipe's seed and
    returned, so that the compiled and reference runs can reuse the same values. `backward_span`,
    a context manager, times the backward pass (for a compiled graph: the backward's compile).
    """
    if not spec.backward:
        with torch.no_grad():
            outs = fn(*inputs)
        return [(n, o) for n, o in zip(spec.outputs, outs)], []
    outs = fn(*inputs)
    if cots is None:
        cots = cotangents(outs, spec.recipe.seed)
    named: Named = [(n, o.detach()) for n, o in zip(spec.outputs, outs)]
    pairs = [(o, c) for o, c in zip(outs, cots) if c is not None and o.requires_grad]
    targets = [(t.name, x) for t, x in zip(spec.inputs, inputs) if t.requires_grad]
    if pairs and targets:
        with backward_span if backward_span is not None else contextlib.nullcontext():
            grads = torch.autograd.grad(
                [o for o, _ in pairs],
                [x for _, x in targets],
                [c.to(o.dtype) for o, c in pairs],
                allow_unused=True,
            )
        named += [(f"grad:{name}", g) for (name, _), g in zip(targets, grads) if g is not None]
    return named, cots
