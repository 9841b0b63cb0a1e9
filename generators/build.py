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

from divfuzz.generators.aliasing import alias_roots, mutated_roots
from divfuzz.generators.layouts import CONTIGUOUS, layout_code
from divfuzz.generators.recipes import INITS, RECIPES
from divfuzz.generators.runtime import same_layout_copy
from divfuzz.generators.opdef import JumpRule, OpDef, RoundingBoundary
from divfuzz.records.reference_rules import round_scalar, rounds_before_comparison, scalar_dtype
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
    """Concrete inputs in `spec.inputs` order: drawn on the CPU from the recipe's seed, moved, then
    laid out as each input's `layout` says (`divfuzz.generators.layouts`)."""
    g = torch.Generator().manual_seed(spec.recipe.seed)
    recipe = RECIPES[spec.recipe.kind]
    out = []
    for t in spec.inputs:
        make = recipe if t.init == "data" else INITS[t.init]
        value = make(tuple(t.shape), g).to(TORCH_DTYPES[t.dtype]).to(device)
        if t.layout != CONTIGUOUS:
            value = layout_function(t.layout, len(t.shape))(value)
        out.append(value.requires_grad_(t.requires_grad))
    return out


@functools.lru_cache(maxsize=64)
def layout_function(layout: str, rank: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`layouts.layout_code` compiled into `f(t)`: the text repro.py prints, run here."""
    source = f"def lay_out(t):\n    return {layout_code(layout, 't', rank)}\n"
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(source, f"<divfuzz layout {layout}>", "exec"), namespace)  # our own template text
    return namespace["lay_out"]


def reference_inputs(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 copies of the real inputs (the same values, after their rounding to the input
    dtype), each in its input's layout (`same_layout_copy`: strides, offset and overlap kept)."""
    return [
        same_layout_copy(x, torch.float64).requires_grad_(x.requires_grad) if x.is_floating_point() else x.detach()
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


def _plan(spec: GraphSpec, params_of: Callable[[Any], dict[str, Any]] | None = None) -> Plan:
    """Each node's (name, input names, op function), resolved before any tracing: Dynamo then sees
    only the ops' own expressions, never the lookup and compile that produce them. `params_of(node)`
    gives the params to build it with (the node's own by default)."""
    params_of = params_of or (lambda n: n.kwargs)
    return tuple((n.name, tuple(n.inputs), op_function(get_op(n.op), len(n.inputs), params_of(n))) for n in spec.nodes)


def reference_params(spec: GraphSpec, node, device_type: str) -> dict[str, Any]:
    """The params a node is built with in the fp64 reference: its own, with each scalar the op
    combines with its input (`OpDef.eager_rounds_scalars`) rounded to the dtype eager computes it
    in on `device_type` (`divfuzz.records.reference_rules.scalar_dtype`: the input's bfloat16 or
    float16 where eager rounds it so, else float32): the reference means what eager's op means."""
    op = get_op(node.op)
    params = node.kwargs
    if not op.eager_rounds_scalars or not node.inputs:
        return params
    dtype = spec.meta(node.inputs[0])[1]
    rounded = dict(params)
    for name, kind in op.eager_rounds_scalars.items():
        target = scalar_dtype(kind, dtype, device_type)
        if name in rounded and target is not None and isinstance(rounded[name], float):
            rounded[name] = round_scalar(rounded[name], target)
    return rounded


# A value hook for experiments (`divfuzz.fuzzer.engine.explain`): (the input's or node's name,
# its value) -> the value the graph goes on with. Never used for a compiled graph.
ValueHook = Callable[[str, Any], Any]


def _run(spec: GraphSpec, plan: Plan, tensors, ctx: BuildContext, keep: dict | None = None, hook: ValueHook | None = None):
    env = {t.name: v for t, v in zip(spec.inputs, tensors)}
    written = mutated_roots(spec) if hook is not None else set()
    roots = alias_roots(spec) if written else {}
    if hook is not None:
        env = {name: _hooked(hook, name, v, roots.get(name) in written) for name, v in env.items()}
    for name, inputs, fn in plan:
        value = fn(ctx.dt, *[env[i] for i in inputs])
        env[name] = value if hook is None else _hooked(hook, name, value, roots.get(name) in written)
    if keep is not None:
        keep.update(env)
    return tuple(env[o] for o in spec.outputs)


def _hooked(hook: ValueHook, name: str, value, aliased: bool):
    """`hook(name, value)`; where the graph later writes into `value`'s storage (`aliased`), the
    hooked values are written into `value` itself, so that the experiment's writes still reach
    the tensors they alias (a mutated input, a view's base) and `mutated:<input>` means what it
    means in the real graph."""
    new = hook(name, value)
    if not aliased or new is value or not isinstance(value, torch.Tensor):
        return new
    with torch.no_grad():
        value.copy_(new)
    return value


# Other orders of a last dim that an order-free op (`OpDef.order_free`) may accumulate in:
# backwards, from its middle round, and even positions before odd ones (what a vectorised or
# split reduction's lanes see).
LAST_DIM_ORDERS = ("reversed", "rolled", "interleaved")


def last_dim_permutation(n: int, order: str, device) -> torch.Tensor:
    """The positions 0..n-1 in `order` (one of `LAST_DIM_ORDERS`)."""
    index = torch.arange(n, device=device)
    if order == "reversed":
        return index.flip(0)
    if order == "rolled":
        return index.roll(n // 2)
    if order == "interleaved":
        return torch.cat([index[0::2], index[1::2]])
    raise ValueError(f"Expected an order in {LAST_DIM_ORDERS} but got {order!r}")


_SCAN_COMBINE = {"add": torch.add, "mul": torch.mul, "logaddexp": torch.logaddexp}


def log_depth_scan(x: torch.Tensor, combine: str) -> torch.Tensor:
    """The inclusive scan of `x` along its last dim, associated as a log-depth (Hillis-Steele)
    parallel prefix: the same mathematical result as a sequential scan, in another order."""
    step, y, op = 1, x, _SCAN_COMBINE[combine]
    while step < y.shape[-1]:
        y = torch.cat([y[..., :step], op(y[..., step:], y[..., :-step])], -1)
        step *= 2
    return y


def _scanned(node, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` for a scan node (`OpDef.scan`) computed as a log-depth scan, in float32 for a bfloat16
    or float16 input (the precision eager's and Inductor's scans accumulate in), then cast to
    the op's output dtype (its `dtype` param, else the input's)."""
    combine, target = get_op(node.op).scan, node.kwargs.get("dtype")

    def scanned(D, *args):
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] < 2:
            return fn(D, *args)
        out_dtype = D(target) if target else x.dtype
        work = x.to(out_dtype)
        if work.dtype in (torch.bfloat16, torch.float16):
            work = work.float()
        return log_depth_scan(work, combine).to(out_dtype)

    return scanned


def _in_order(node, fn: Callable[..., Any], order: str) -> Callable[..., Any]:
    """`fn` for an order-free node with its args' last dim taken in `order`, its output put back
    in place, or a scan node associated as a log-depth scan (`_scanned`, whatever `order`): the
    same mathematical result, accumulated in another order. Other nodes: `fn`."""
    if get_op(node.op).scan is not None:
        return _scanned(node, fn)
    free = get_op(node.op).order_free
    if free is None:
        return fn

    def reordered(D, *args):
        n = args[0].shape[-1] if isinstance(args[0], torch.Tensor) and args[0].dim() >= free.min_dims else 0
        if n < 2:
            return fn(D, *args)
        perm = last_dim_permutation(n, order, args[0].device)
        moved = [a.index_select(-1, perm) if i in free.args and isinstance(a, torch.Tensor) and a.dim() and a.shape[-1] == n
                 else a for i, a in enumerate(args)]
        out = fn(D, *moved)
        if free.keeps_dim and isinstance(out, torch.Tensor) and out.dim() and out.shape[-1] == n:
            out = out.index_select(-1, torch.argsort(perm))
        return out

    return reordered


def build_callable(spec: GraphSpec, device_type: str = "cpu", keep: dict | None = None,
                   hook: ValueHook | None = None, *, order: str | None = None) -> Callable[..., tuple]:
    """The real graph as a torch function of its inputs, with the spec's autocast region inside.

    `keep`, when given, receives every intermediate value (for eager runs only: not under compile);
    `hook` replaces each input's and node's value as the graph runs (eager experiments only);
    `order` (one of `LAST_DIM_ORDERS`, eager experiments only) runs every order-free op with its
    reduced dim permuted (`_in_order`).
    """
    ctx = BuildContext(reference=False)
    plan = _plan(spec)
    if order is not None:
        plan = tuple((name, inputs, _in_order(spec.node(name), fn, order)) for name, inputs, fn in plan)
    autocast = TORCH_DTYPES[spec.autocast] if spec.autocast else None

    def graph(*tensors):
        region = (
            torch.autocast(device_type=device_type, dtype=autocast) if autocast else contextlib.nullcontext()
        )
        with region:
            return _run(spec, plan, tensors, ctx, keep, hook)

    graph.__name__ = f"divfuzz_graph_{spec.digest()}"
    return graph


def _keeping_explicit_cast(node, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` for the fp64 reference: an explicit cast to a lower floating precision
    (`OpDef.rounds_to_param`) rounds its float64 result to that dtype and back."""
    param = get_op(node.op).rounds_to_param
    dtype = TORCH_DTYPES.get(node.kwargs.get(param)) if param else None
    if dtype is None or not dtype.is_floating_point or dtype == torch.float64:
        return fn

    def rounded(D, *args):
        value = fn(D, *args)
        return value.to(dtype).to(torch.float64) if value.is_floating_point() else value

    return rounded


def _rounding_compared(spec: GraphSpec, node, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` for the fp64 reference of an op that compares (`OpDef.decision`, or a comparison's
    jump: `JumpRule.threshold`): each bfloat16/float16 input rounded to its dtype first, as eager
    holds the values it compares (`divfuzz.records.reference_rules.rounds_before_comparison`)."""
    op = get_op(node.op)
    rule = deciding_rule(node)
    if rule is None or rule.threshold is None:
        return fn
    dtypes = [spec.meta(i)[1] for i in node.inputs]
    rounded = [TORCH_DTYPES[d] if rounds_before_comparison(d) else None for d in dtypes]
    if not any(rounded) or op.family == "selection":
        return fn

    def comparing(D, *args):
        return fn(D, *[a.to(r).to(torch.float64) if r is not None and isinstance(a, torch.Tensor) and a.is_floating_point() else a
                       for a, r in zip(args, rounded)])

    return comparing


def build_reference(spec: GraphSpec, keep: dict | None = None, hook: ValueHook | None = None, *,
                    device_type: str = "cpu", explicit_casts: bool = True) -> Callable[..., tuple]:
    """The float64 reference, one semantics for every path: the same ops with every floating dtype
    mapped to float64 and no autocast, but the graph's explicit casts kept (`_keeping_explicit_cast`)
    and a scalar rounded where eager rounds it on `device_type` (`reference_params`), and the
    bfloat16/float16 values a comparison reads rounded to their dtype (`_rounding_compared`).
    `keep` and `hook` as for `build_callable` (the values are float64 here). `explicit_casts=False`
    drops those roundings the model's code asks for (its casts, its comparisons' operands): what
    it computes without them, for the experiments that ask whether compiled dropped one
    (`divfuzz.fuzzer.engine.explain`)."""
    ctx = BuildContext(reference=True)
    keeping = _keeping_explicit_cast if explicit_casts else (lambda node, fn: fn)
    comparing = (lambda node, fn: _rounding_compared(spec, node, fn)) if explicit_casts else (lambda node, fn: fn)
    plan = tuple((name, inputs, comparing(spec.node(name), keeping(spec.node(name), fn)))
                 for name, inputs, fn in _plan(spec, lambda n: reference_params(spec, n, device_type)))

    def reference(*tensors):
        return _run(spec, plan, tensors, ctx, keep, hook)

    return reference


def deciding_rule(node) -> JumpRule | None:
    """The discrete decision node `node` makes: its op's comparison inside (`OpDef.decision`) or
    the jump of its integer-valued output (`OpDef.boundary`); None for an op that decides nothing
    or selects among its elements (which element an argmax picks is the tie experiment's)."""
    op = get_op(node.op)
    if op.family == "selection":
        return None
    make = op.decision or op.boundary
    return make(_arg_names(len(node.inputs)), dict(node.kwargs)) if make is not None else None


def evaluate_template(name: str, expression: str, args: list) -> Any:
    """A template over a0, a1, ... (an op's `JumpRule.pre_image`) evaluated on `args` in their own
    dtypes (the real graph's dtype map), compiled by the templates' one compiler."""
    return _compile_expression(name, len(args), expression)(BuildContext().dt, *args)


def decision_values(spec: GraphSpec, node, env: dict, *, device_type: str) -> torch.Tensor | None:
    """What `node` decides, element by element, given the values its inputs hold in `env` (an
    eager run's or a reference's): the side of its threshold (-1, 0, 1) or the integer its
    pre-image floors to, evaluated in float64 with the scalars eager rounds rounded so
    (`reference_params`). Two runs that feed the node different roundings of the same values
    decide differently exactly where these differ. None when the node decides nothing, or its
    inputs are not in `env`."""
    rule = deciding_rule(node)
    if rule is None or not all(isinstance(env.get(i), torch.Tensor) for i in node.inputs):
        return None
    params = reference_params(spec, node, device_type)
    rule = (get_op(node.op).decision or get_op(node.op).boundary)(_arg_names(len(node.inputs)), params)
    args = [env[i].detach().to(torch.float64) if env[i].is_floating_point() else env[i].detach() for i in node.inputs]
    with torch.no_grad():
        pre = _compile_expression(f"{node.op}_decision", len(args), rule.pre_image)(BuildContext(reference=True).dt, *args)
        if rule.threshold is not None:
            return torch.sign(pre - rule.threshold)
        return torch.floor(pre - rule.grid_offset)


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
            if rule.computed_input_only and node.inputs[0] in {t.name for t in spec.inputs}:
                continue
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
