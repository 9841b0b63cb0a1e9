"""Running a spec's graph function on its inputs: outputs, gradients, and the integer outputs'
boundary distances. One place, for the case (`divfuzz.fuzzer.engine.execute`) and the experiments
that explain it (`divfuzz.fuzzer.engine.explain`)."""

from __future__ import annotations

import contextlib

import torch

from divfuzz.generators.aliasing import mutated_inputs, mutated_output
from divfuzz.generators.build import rounding_boundaries
from divfuzz.generators.runtime import cotangents, same_layout_copy
from divfuzz.generators.shape_siblings import dynamic_marks
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


def fresh_inputs(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of `inputs` in their own layouts (strides, offset), each requiring grad as its input does."""
    return [same_layout_copy(x).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in inputs]


def mark_dynamic_dims(spec: GraphSpec, inputs: list[torch.Tensor]) -> None:
    """`torch._dynamo.mark_dynamic` on the tensors a run passes, for each mark of a "marked" spec
    (`dynamic_marks`; a dim of fewer than 2 elements, which Dynamo specialises, is left as it is).
    Marking is an attribute of the tensor: an eager or fp64 run ignores it, a compiled run's
    first call compiles those dims dynamic."""
    marks = dynamic_marks(spec)
    if not marks:
        return
    # lazy: heavy: Dynamo costs ~0.8 s beyond torch; only a dynamic spec's runs need it
    import torch._dynamo

    for i, d in marks:
        if inputs[i].shape[d] >= 2:
            torch._dynamo.mark_dynamic(inputs[i], d)


def run_forward_backward(spec: GraphSpec, fn, inputs: list[torch.Tensor], cots=None, *,
                         backward_span=None) -> tuple[Named, list]:
    """Outputs (then each input the graph writes into, as `mutated:<input>`; then, for backward
    specs, gradients of every requires_grad input), named.

    `cots` are the output gradients to use; when None they are drawn from the recipe's seed and
    returned, so that the compiled and reference runs can reuse the same values. `backward_span`,
    a context manager, times the backward pass (for a compiled graph: the backward's compile).
    A graph that writes into its inputs (`divfuzz.generators.aliasing.mutated_inputs`) runs on
    copies of them in their own layouts, so that every run (eager twice, compiled, fp64) starts
    from the same values and `inputs` stay as they were; what it wrote is judged as what a caller
    sees. A "marked" dynamic spec's dims are marked on the tensors passed (`mark_dynamic_dims`).
    Invariant: `inputs` are never written into.
    """
    mutated = mutated_inputs(spec)
    if mutated:
        inputs = fresh_inputs(inputs)
    mark_dynamic_dims(spec, inputs)
    written = [(mutated_output(t.name), x) for t, x in zip(spec.inputs, inputs) if t.name in mutated]
    if not spec.backward:
        with torch.no_grad():
            outs = fn(*inputs)
        return [(n, o) for n, o in zip(spec.outputs, outs)] + written, []
    outs = fn(*inputs)
    if cots is None:
        cots = cotangents(outs, spec.recipe.seed)
    named: Named = [(n, o.detach()) for n, o in zip(spec.outputs, outs)] + [(n, x.detach()) for n, x in written]
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
