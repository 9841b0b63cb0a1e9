"""Building a spec into torch: the only place where specs meet torch objects.

One spec builds three things:
- `make_inputs`: its concrete inputs, a pure function of (spec, device);
- `build_callable`: the torch function `f(*inputs) -> tuple of outputs` (autocast inside);
- `build_reference`: the same math in float64 (every floating dtype and cast mapped to float64,
  autocast off), and `rounding_boundaries`, where its integer outputs jump.

Each node runs its op's `code` template, compiled once per (op, argument count, params) into a
plain function `op(D, a0, a1, ...)` (`op_function`): the very expression `divfuzz.reports.repro` prints,
so the graph divfuzz judges and the `repro.py` it writes are one text. Params reach that text
only through the templates' own formatter and lookup tables (`divfuzz.generators.ops._num`, ...), which
accept nothing but validated numbers and known choices.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from divfuzz.generators.recipes import INITS, RECIPES
from divfuzz.generators.opdef import OpDef, RoundingBoundary
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.dtypes import ALL_DTYPES

# The dtype vocabulary's names as torch dtypes (each name is torch's own).
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in ALL_DTYPES}


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


def _arg_names(n: int) -> list[str]:
    return [f"a{i}" for i in range(n)]


def _params_key(params: dict[str, Any]) -> tuple:
    # The type is part of the key: 1 and True (and 1 and 1.0) are equal and hash alike in Python,
    # yet a template prints them differently.
    return tuple(sorted((k, type(v).__name__, v) for k, v in params.items()))


@functools.lru_cache(maxsize=4096)
def _compile_expression(name: str, n_args: int, expression: str) -> Callable[..., Any]:
    source = f"def {name}(D, {', '.join(_arg_names(n_args))}):\n    return {expression}\n"
    namespace: dict[str, Any] = {"torch": torch, "F": F}
    # Our own template text (validated names a0.., numbers through `_num`, lookup tables): the
    # same text repro.py prints, compiled so that divfuzz runs exactly what it prints.
    exec(compile(source, f"<divfuzz op {name}>", "exec"), namespace)
    return namespace[name]


def op_function(op: OpDef, n_args: int, params: dict[str, Any]) -> Callable[..., Any]:
    """The op's `code` template for these params as a function `f(D, a0, ..., a{n_args-1})`,
    where `D` is the dtype map (`BuildContext.dt`). Compiled once per distinct text."""
    return _op_function(op.name, n_args, _params_key(params))


@functools.lru_cache(maxsize=4096)
def _op_function(op_name: str, n_args: int, key: tuple) -> Callable[..., Any]:
    params = {k: v for k, _, v in key}
    return _compile_expression(op_name, n_args, get_op(op_name).code(_arg_names(n_args), params))


Plan = tuple[tuple[str, tuple[str, ...], Callable[..., Any]], ...]


def _plan(spec: GraphSpec) -> Plan:
    """Each node's (name, input names, op function), resolved before any tracing: Dynamo then sees
    only the ops' own expressions, never the lookup and compile that produce them."""
    return tuple((n.name, tuple(n.inputs), op_function(get_op(n.op), len(n.inputs), n.kwargs)) for n in spec.nodes)


def _run(spec: GraphSpec, plan: Plan, tensors, ctx: BuildContext, keep: dict | None = None):
    env = {t.name: v for t, v in zip(spec.inputs, tensors)}
    for name, inputs, fn in plan:
        env[name] = fn(ctx.dt, *[env[i] for i in inputs])
    if keep is not None:
        keep.update(env)
    return tuple(env[o] for o in spec.outputs)


def build_callable(spec: GraphSpec, device_type: str = "cpu", keep: dict | None = None) -> Callable[..., tuple]:
    """The real graph as a torch function of its inputs, with the spec's autocast region inside.

    `keep`, when given, receives every intermediate value (for eager runs only: not under compile).
    """
    ctx = BuildContext(reference=False)
    plan = _plan(spec)
    autocast = TORCH_DTYPES[spec.autocast] if spec.autocast else None

    def graph(*tensors):
        region = (
            torch.autocast(device_type=device_type, dtype=autocast) if autocast else contextlib.nullcontext()
        )
        with region:
            return _run(spec, plan, tensors, ctx, keep)

    graph.__name__ = f"divfuzz_graph_{spec.digest()}"
    return graph


def build_reference(spec: GraphSpec) -> Callable[..., tuple]:
    """The float64 reference: same ops, every floating dtype mapped to float64, no autocast."""
    ctx = BuildContext(reference=True)
    plan = _plan(spec)

    def reference(*tensors):
        return _run(spec, plan, tensors, ctx)

    return reference


def rounding_boundaries(spec: GraphSpec, eager_env: dict[str, torch.Tensor]) -> dict[str, RoundingBoundary]:
    """For each integer output whose op declares one: where its elements jump (`RoundingBoundary`).

    Built from eager's own intermediate values (`eager_env`, kept by `build_callable(keep=...)`):
    the pre-image is the op's `JumpRule.pre_image` template evaluated on eager's input to the op,
    in that input's dtype.
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
            rule = op.boundary(_arg_names(1), dict(node.kwargs))
            x = eager_env[node.inputs[0]].detach()
            pre_image = _compile_expression(f"{op.name}_pre_image", 1, rule.pre_image)(BuildContext().dt, x)
            maps[name] = RoundingBoundary(
                pre_image,
                str(x.dtype).removeprefix("torch."),
                grid_offset=rule.grid_offset,
                threshold=rule.threshold,
                row_reduced=rule.row_reduced,
            )
    return maps
