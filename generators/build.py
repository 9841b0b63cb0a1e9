"""Building a spec into torch: the only place where specs meet torch objects.

One spec builds three things:
- `make_inputs`: its concrete inputs, a pure function of (spec, device);
- `build_callable`: the torch function `f(*inputs) -> tuple of outputs` (autocast inside);
- `build_reference`: the same math in float64 (every floating dtype and cast mapped to float64,
  autocast off), and `rounding_boundaries`, where its integer outputs jump.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from generators.recipes import INITS, RECIPES
from generators.opdef import RoundingBoundary
from generators.registry import get_op
from generators.spec import GraphSpec

TORCH_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


@dataclass(frozen=True)
class BuildContext:
    """Maps spec dtypes to torch dtypes: identity for the real graph, float64 for the reference."""

    reference: bool = False

    def dt(self, name_or_dtype) -> torch.dtype:
        d = TORCH_DTYPES[name_or_dtype] if isinstance(name_or_dtype, str) else name_or_dtype
        if self.reference and d.is_floating_point:
            return torch.float64
        return d


def make_inputs(spec: GraphSpec, device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Concrete inputs in `spec.inputs` order: drawn on the CPU from the recipe's seed, then moved."""
    g = torch.Generator().manual_seed(spec.recipe.seed)
    recipe = RECIPES[spec.recipe.kind]
    out = []
    for t in spec.inputs:
        make = recipe if t.init == "data" else INITS[t.init]
        value = make(tuple(t.shape), g).to(TORCH_DTYPES[t.dtype]).to(device)
        out.append(value.requires_grad_(t.requires_grad))
    return out


def reference_inputs(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 copies of the real inputs (the same values, after their rounding to the input dtype)."""
    return [
        x.detach().to(torch.float64).requires_grad_(x.requires_grad) if x.is_floating_point() else x.detach()
        for x in inputs
    ]


def _run(spec: GraphSpec, tensors, ctx: BuildContext, keep: dict | None = None):
    env = {t.name: v for t, v in zip(spec.inputs, tensors)}
    for node in spec.nodes:
        op = get_op(node.op)
        args = [env[n] for n in node.inputs]
        env[node.name] = op.run(ctx, *args, **node.kwargs)
    if keep is not None:
        keep.update(env)
    return tuple(env[o] for o in spec.outputs)


def build_callable(spec: GraphSpec, device_type: str = "cpu", keep: dict | None = None) -> Callable[..., tuple]:
    """The real graph as a torch function of its inputs, with the spec's autocast region inside.

    `keep`, when given, receives every intermediate value (for eager runs only: not under compile).
    """
    ctx = BuildContext(reference=False)
    autocast = TORCH_DTYPES[spec.autocast] if spec.autocast else None

    def graph(*tensors):
        region = (
            torch.autocast(device_type=device_type, dtype=autocast) if autocast else contextlib.nullcontext()
        )
        with region:
            return _run(spec, tensors, ctx, keep)

    graph.__name__ = f"divfuzz_graph_{spec.digest()}"
    return graph


def build_reference(spec: GraphSpec) -> Callable[..., tuple]:
    """The float64 reference: same ops, every floating dtype mapped to float64, no autocast."""
    ctx = BuildContext(reference=True)

    def reference(*tensors):
        return _run(spec, tensors, ctx)

    return reference


def rounding_boundaries(spec: GraphSpec, eager_env: dict[str, torch.Tensor]) -> dict[str, RoundingBoundary]:
    """For each integer output whose op declares one: where its elements jump (`RoundingBoundary`).

    Built from eager's own intermediate values (`eager_env`, kept by `build_callable(keep=...)`):
    the pre-image is what eager actually rounded, in the dtype it rounded it (autocast included).
    """
    maps = {}
    with torch.no_grad():
        for name in spec.outputs:
            try:
                node = spec.node(name)
            except KeyError:
                continue
            op = get_op(node.op)
            if op.boundary is None:
                continue
            maps[name] = op.boundary(eager_env[node.inputs[0]].detach(), **node.kwargs)
    return maps


def cotangents(outputs: tuple, seed: int) -> list[torch.Tensor | None]:
    """Fixed random output gradients (one per differentiable output), seeded from the recipe."""
    g = torch.Generator().manual_seed(seed + 7919)
    result = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
            result.append(torch.randn(out.shape, generator=g).to(dtype=out.dtype, device=out.device))
        else:
            result.append(None)
    return result
