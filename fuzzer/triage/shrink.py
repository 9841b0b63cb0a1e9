"""Shrinking a diverging case to the smallest spec that still fails the same way.

`minimize_spec(spec, predicate, budget_s=...)` runs named passes (drop nodes by delta debugging,
cut a node into a fresh input, bypass a node, drop outputs, drop backward/autocast/casts,
simplify params, simplify the input recipe, shrink rows, shrink dims) until a whole round makes
no progress or the budget is spent. The predicate is "still lands in the same finding kind (and
the same culprit when given)"; `case_predicate` builds it on a `Worker`, so every candidate runs
in a subprocess and a crash or hang in the compiler is only a failed candidate.

Invariants:
- the input must fail the predicate (checked first, like torch's fx_minifier): else MinimizeError;
- every candidate passes `validate_spec` before the predicate sees it (shapes are re-inferred
  through the registry's `infer`/`weights` by `rebuild_spec`);
- deterministic: the same spec and the same predicate answers give the same result; answers
  are cached by spec digest, so no candidate is run twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from records.errors import MinimizeError, SpecError
from generators.opdef import INFER_ERRORS, Meta
from generators.registry import get_op
from generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from generators.validate import validate_spec

Predicate = Callable[[GraphSpec], bool]
DEFAULT_EPS = 1e-5



@dataclass(frozen=True)
class MinimizeResult:
    """The minimal spec and a record of how it was reached."""

    spec: GraphSpec
    ops_before: int
    ops_after: int
    elements_before: int
    elements_after: int
    passes: tuple[tuple[str, int], ...]  # (pass name, accepted candidates), in the order first taken
    predicate_calls: int  # candidates actually run (each is one compiled case)
    wall_s: float
    budget_exhausted: bool

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "elements_before": self.elements_before,
            "elements_after": self.elements_after,
            "passes": [list(p) for p in self.passes],
            "predicate_calls": self.predicate_calls,
            "wall_s": round(self.wall_s, 2),
            "budget_exhausted": self.budget_exhausted,
        }

    def describe(self) -> str:
        taken = ", ".join(f"{name} x{n}" for name, n in self.passes) or "none"
        return (
            f"minimized {self.ops_before} -> {self.ops_after} ops, {self.elements_before} -> "
            f"{self.elements_after} input elements in {self.wall_s:.0f} s, {self.predicate_calls} compiles "
            f"(passes: {taken}){'; budget exhausted' if self.budget_exhausted else ''}"
        )


def spec_elements(spec: GraphSpec) -> int:
    """Elements of all graph inputs (data and weights): the size measure the minimizer lowers."""
    return spec.input_elements


# ---------------------------------------------------------------------------------------------
# Rebuilding a spec after an edit: shapes, dtypes and weights re-inferred through the registry
# ---------------------------------------------------------------------------------------------


def rebuild_spec(
    spec: GraphSpec,
    *,
    nodes: tuple[Node, ...] | None = None,
    outputs: tuple[str, ...] | None = None,
    data_shapes: dict[str, tuple[int, ...]] | None = None,
    extra_inputs: tuple[TensorSpec, ...] = (),
    autocast: str | None | bool = False,
) -> GraphSpec | None:
    """A valid spec from edited parts, or None when the edit leaves no valid graph.

    Data inputs take `data_shapes`; every node's shape and dtype is re-inferred from its data
    inputs; its weight inputs are re-derived from `op.weights` (new shapes, dropped when a param
    such as `bias=False` no longer needs them, created when needed); nodes that no output
    reaches and inputs that nothing uses are dropped. `autocast=False` keeps the spec's autocast.
    """
    nodes = spec.nodes if nodes is None else nodes
    outputs = spec.outputs if outputs is None else outputs
    autocast_dtype = spec.autocast if autocast is False else autocast
    old_inputs = {t.name: t for t in tuple(spec.inputs) + tuple(extra_inputs)}
    live = _reached_from(outputs, nodes)
    nodes = tuple(n for n in nodes if n.name in live)
    if not nodes:
        return None
    inputs, metas = _live_data_inputs(spec, nodes, old_inputs, live, data_shapes or {})
    new_nodes = []
    for n in nodes:
        rebuilt = _reinfer_node(spec, n, old_inputs, inputs, metas, autocast_dtype)
        if rebuilt is None:
            return None
        new_nodes.append(rebuilt)
    if any(o not in metas for o in outputs) or len(set(outputs)) != len(outputs):
        return None
    candidate = replace(
        spec, inputs=_in_original_order(inputs, old_inputs), nodes=tuple(new_nodes), outputs=tuple(outputs), autocast=autocast_dtype
    )
    try:
        return validate_spec(candidate, source="minimizer candidate")
    except SpecError:
        return None


def _reached_from(outputs: tuple[str, ...], nodes: tuple[Node, ...]) -> set[str]:
    """Names of the nodes and inputs that the outputs reach: all that the rebuilt spec keeps."""
    by_name = {n.name: n for n in nodes}
    live: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        if name in by_name:
            stack.extend(by_name[name].inputs)
    return live


def _live_data_inputs(spec: GraphSpec, nodes: tuple[Node, ...], old_inputs: dict[str, TensorSpec], live: set[str],
                      data_shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, TensorSpec], dict[str, Meta]]:
    """The reached data inputs (weights are re-derived per node), in `data_shapes`' shapes, and
    their metas; `requires_grad` only where the spec still runs backward."""
    weight_names = set()
    for n in nodes:
        weight_names.update(n.inputs[get_op(n.op).arity :])
    inputs: dict[str, TensorSpec] = {}
    metas: dict[str, Meta] = {}
    for t in old_inputs.values():
        if t.name in live and t.name not in weight_names:
            shape = tuple(data_shapes.get(t.name, t.shape))
            inputs[t.name] = replace(t, shape=shape, requires_grad=t.requires_grad and spec.backward)
            metas[t.name] = Meta(shape, t.dtype)
    return inputs, metas


def _reinfer_node(spec: GraphSpec, n: Node, old_inputs: dict[str, TensorSpec], inputs: dict[str, TensorSpec],
                  metas: dict[str, Meta], autocast_dtype: str | None) -> Node | None:
    """Node `n` with shape and dtype re-inferred from its data inputs' metas and its weights
    re-derived from `op.weights` (added to `inputs` and `metas`, as is the node's own meta);
    None when the op no longer accepts its inputs or params."""
    op = get_op(n.op)
    data_names = n.inputs[: op.arity]
    if any(d not in metas for d in data_names):
        return None
    data = tuple(metas[d] for d in data_names)
    if not op.accepts(data):
        return None
    try:
        out = op.infer(data, n.kwargs)
        weights = op.weights(data, n.kwargs)
    except INFER_ERRORS:
        return None
    dtype = autocast_dtype if (autocast_dtype and op.family == "linear") else out.dtype
    # Old weights by role suffix, so that a weight keeps its name, dtype and init.
    old_weight_names = dict(zip((w.suffix for w in _old_weights(spec, n, old_inputs)), n.inputs[op.arity :]))
    names = []
    for w in weights:
        name = old_weight_names.get(w.suffix) or f"{n.name}_{w.suffix}"
        old = old_inputs.get(name)
        wdtype = old.dtype if old is not None else ("float32" if autocast_dtype else data[0].dtype)
        inputs[name] = TensorSpec(name, tuple(w.shape), wdtype, requires_grad=spec.backward and w.trainable, init=w.init)
        metas[name] = Meta(tuple(w.shape), wdtype)
        names.append(name)
    metas[n.name] = Meta(tuple(out.shape), dtype)
    return replace(n, inputs=tuple(data_names) + tuple(names), shape=tuple(out.shape), dtype=dtype)


def _in_original_order(inputs: dict[str, TensorSpec], old_inputs: dict[str, TensorSpec]) -> tuple[TensorSpec, ...]:
    """Inputs in their original order, new ones after."""
    order = [t.name for t in old_inputs.values()]
    return tuple(sorted(inputs.values(), key=lambda t: order.index(t.name) if t.name in order else len(order)))


def _old_weights(spec: GraphSpec, node: Node, old_inputs: dict[str, TensorSpec]):
    op = get_op(node.op)
    try:
        data = tuple(Meta(*spec.meta(d)) if d not in old_inputs else Meta(old_inputs[d].shape, old_inputs[d].dtype) for d in node.inputs[: op.arity])
        return op.weights(data, node.kwargs)
    except INFER_ERRORS:
        return ()


def _data_inputs(spec: GraphSpec) -> list[TensorSpec]:
    weight_names = set()
    for n in spec.nodes:
        weight_names.update(n.inputs[get_op(n.op).arity :])
    return [t for t in spec.inputs if t.name not in weight_names]


def _rewire(nodes: tuple[Node, ...], outputs: tuple[str, ...], old: str, new: str):
    nodes = tuple(replace(n, inputs=tuple(new if i == old else i for i in n.inputs)) for n in nodes)
    outs: list[str] = []
    for o in outputs:
        o = new if o == old else o
        if o not in outs:
            outs.append(o)
    return nodes, tuple(outs)


def _same_shape_inputs(spec: GraphSpec, node: Node) -> list[str]:
    op = get_op(node.op)
    return [i for i in node.inputs[: op.arity] if spec.meta(i)[0] == node.shape]


# ---------------------------------------------------------------------------------------------
# Passes: each yields candidate specs, simplest first; the first that still fails is taken
# ---------------------------------------------------------------------------------------------


def _remove_nodes(spec: GraphSpec, names: set[str]) -> GraphSpec | None:
    """Drop nodes, rewiring each one's consumers to its first same-shape data input."""
    nodes, outputs = spec.nodes, spec.outputs
    for n in spec.nodes:
        if n.name not in names:
            continue
        same = _same_shape_inputs(spec, n)
        if not same:
            return None
        target = same[0]
        while target in names:  # a chain of removed nodes: follow it to a kept value
            t_node = spec.node(target)
            nxt = _same_shape_inputs(spec, t_node)
            if not nxt:
                return None
            target = nxt[0]
        nodes, outputs = _rewire(nodes, outputs, n.name, target)
    nodes = tuple(n for n in nodes if n.name not in names)
    if not any(o in {n.name for n in nodes} for o in outputs):
        return None  # only inputs left as outputs: nothing to compile
    outputs = tuple(o for o in outputs if o in {n.name for n in nodes})
    return rebuild_spec(spec, nodes=nodes, outputs=outputs)


def pass_drop_nodes(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Delta debugging over nodes: chunks of halving size, each removed with its consumers rewired."""
    names = [n.name for n in spec.nodes]
    size = max(1, len(names) // 2)
    while True:
        for start in range(0, len(names), size):
            chunk = set(names[start : start + size])
            if len(chunk) < len(names):
                cand = _remove_nodes(spec, chunk)
                if cand is not None:
                    yield cand
        if size == 1:
            return
        size = max(1, size // 2)


def pass_cut_to_input(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Replace a node by a fresh data input of its shape and dtype (what feeds it no longer matters)."""
    used = {t.name for t in spec.inputs} | {n.name for n in spec.nodes}
    for n in spec.nodes:
        if n.name in spec.outputs or not _is_float(n.dtype):
            continue
        fresh = _fresh_name(used, "x")
        t = TensorSpec(fresh, tuple(n.shape), n.dtype, requires_grad=spec.backward, init="data")
        nodes, outputs = _rewire(spec.nodes, spec.outputs, n.name, fresh)
        nodes = tuple(m for m in nodes if m.name != n.name)
        cand = rebuild_spec(spec, nodes=nodes, outputs=outputs, extra_inputs=(t,))
        if cand is not None:
            yield cand


def pass_bypass(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Replace a node by each of its same-shape data inputs (drop_nodes only tries the first)."""
    for n in spec.nodes:
        for alt in _same_shape_inputs(spec, n)[1:]:
            nodes, outputs = _rewire(spec.nodes, spec.outputs, n.name, alt)
            nodes = tuple(m for m in nodes if m.name != n.name)
            if any(o in {m.name for m in nodes} for o in outputs):
                cand = rebuild_spec(spec, nodes=nodes, outputs=tuple(o for o in outputs if o in {m.name for m in nodes}))
                if cand is not None:
                    yield cand


def pass_drop_outputs(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Keep one output at a time, then drop one at a time."""
    if len(spec.outputs) < 2:
        return
    for o in spec.outputs:
        cand = rebuild_spec(spec, outputs=(o,))
        if cand is not None:
            yield cand
    for o in spec.outputs:
        cand = rebuild_spec(spec, outputs=tuple(x for x in spec.outputs if x != o))
        if cand is not None:
            yield cand


def pass_drop_backward(spec: GraphSpec) -> Iterator[GraphSpec]:
    if spec.backward:
        cand = rebuild_spec(replace(spec, backward=False))
        if cand is not None:
            yield cand


def pass_drop_autocast(spec: GraphSpec) -> Iterator[GraphSpec]:
    """No autocast; then drop each cast node."""
    if spec.autocast:
        cand = rebuild_spec(spec, autocast=None)
        if cand is not None:
            yield cand
    for n in spec.nodes:
        if n.op == "cast":
            cand = _remove_nodes(spec, {n.name})
            if cand is not None:
                yield cand


_PARAM_SIMPLER = (("affine", False), ("bias", False), ("eps", DEFAULT_EPS))


def pass_simplify_params(spec: GraphSpec) -> Iterator[GraphSpec]:
    """No affine, no bias, default eps: one param of one node at a time."""
    for i, n in enumerate(spec.nodes):
        kw = n.kwargs
        for key, simple in _PARAM_SIMPLER:
            if key in kw and kw[key] != simple:
                new = replace(n, params=tuple(sorted({**kw, key: simple}.items())))
                nodes = spec.nodes[:i] + (new,) + spec.nodes[i + 1 :]
                cand = rebuild_spec(spec, nodes=nodes)
                if cand is not None:
                    yield cand


def pass_simplify_recipe(spec: GraphSpec) -> Iterator[GraphSpec]:
    if spec.recipe.kind != "normal":
        yield replace(spec, recipe=InputRecipe("normal", spec.recipe.seed))
    if spec.recipe.seed != 0:
        yield replace(spec, recipe=InputRecipe(spec.recipe.kind, 0))


def _shrunk(d: int) -> list[int]:
    return [x for x in (1, d // 4, d // 2, (3 * d) // 4) if 1 <= x < d]


def _shrink_dim(spec: GraphSpec, axis_from_end: int | None, axis: int | None) -> Iterator[GraphSpec]:
    """Shrink one axis of every data input that has it (all data inputs share the axis)."""
    data = _data_inputs(spec)
    if not data:
        return
    ref = data[0].shape
    idx = axis if axis is not None else len(ref) - 1 - axis_from_end
    if not 0 <= idx < len(ref):
        return
    for new in _shrunk(ref[idx]):
        shapes = {}
        for t in data:
            if len(t.shape) == len(ref) and t.shape[idx] == ref[idx]:
                shapes[t.name] = t.shape[:idx] + (new,) + t.shape[idx + 1 :]
        cand = rebuild_spec(spec, data_shapes=shapes)
        if cand is not None:
            yield cand


def pass_shrink_rows(spec: GraphSpec) -> Iterator[GraphSpec]:
    """The batch (first) dimension, most aggressive first."""
    yield from _shrink_dim(spec, None, 0)


def pass_shrink_dims(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Every other dimension of the data inputs, then linear/matmul widths."""
    data = _data_inputs(spec)
    rank = len(data[0].shape) if data else 0
    for axis in range(1, rank):
        yield from _shrink_dim(spec, None, axis)
    for i, n in enumerate(spec.nodes):
        width = n.kwargs.get("out_features")
        if isinstance(width, int):
            for new in _shrunk(width):
                node = replace(n, params=tuple(sorted({**n.kwargs, "out_features": new}.items())))
                cand = rebuild_spec(spec, nodes=spec.nodes[:i] + (node,) + spec.nodes[i + 1 :])
                if cand is not None:
                    yield cand


PASSES: tuple[tuple[str, Callable[[GraphSpec], Iterator[GraphSpec]]], ...] = (
    ("drop_backward", pass_drop_backward),
    ("drop_outputs", pass_drop_outputs),
    ("drop_nodes", pass_drop_nodes),
    ("cut_to_input", pass_cut_to_input),
    ("bypass_node", pass_bypass),
    ("drop_autocast_and_casts", pass_drop_autocast),
    ("simplify_params", pass_simplify_params),
    ("simplify_recipe", pass_simplify_recipe),
    ("shrink_rows", pass_shrink_rows),
    ("shrink_dims", pass_shrink_dims),
)


def _is_float(dtype: str) -> bool:
    return dtype in ("float32", "bfloat16", "float16", "float64")


def _fresh_name(used: set[str], prefix: str) -> str:
    i = 0
    while f"{prefix}{i}" in used:
        i += 1
    used.add(f"{prefix}{i}")
    return f"{prefix}{i}"


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


@dataclass
class _Budget:
    """The minimizer's deadline and its predicate's answers, cached by spec digest: a candidate
    is never run twice, and `calls` counts the ones that were run."""

    predicate: Predicate
    deadline: float
    calls: int = 0
    cache: dict = field(default_factory=dict)

    def left(self) -> bool:
        return time.monotonic() < self.deadline

    def fails(self, cand: GraphSpec) -> bool:
        key = cand.digest()
        if key not in self.cache:
            self.calls += 1
            self.cache[key] = bool(self.predicate(cand))
        return self.cache[key]


def minimize_spec(
    spec: GraphSpec,
    predicate: Predicate,
    *,
    budget_s: float = 120.0,
    passes=PASSES,
    log: Callable[[str], None] | None = None,
) -> MinimizeResult:
    """The smallest spec (by ops, then input elements) for which `predicate` still holds.

    Must be deterministic; checks first that `predicate(spec)` holds, else raises MinimizeError.
    Each round tries every pass; a pass takes the first candidate that still fails, restarts
    on the smaller spec, and the rounds repeat until one makes no progress or the budget ends.
    """
    t0 = time.monotonic()
    budget = _Budget(predicate, deadline=t0 + budget_s)
    if not budget.fails(spec):
        raise MinimizeError(
            f"the input case does not fail the predicate ({len(spec.nodes)} ops, {spec.op_signature()}): nothing to minimize"
        )
    current, taken = _run_rounds(spec, passes, budget, log or (lambda s: None))
    return MinimizeResult(
        spec=current,
        ops_before=len(spec.nodes),
        ops_after=len(current.nodes),
        elements_before=spec_elements(spec),
        elements_after=spec_elements(current),
        passes=tuple(taken.items()),
        predicate_calls=budget.calls,
        wall_s=time.monotonic() - t0,
        budget_exhausted=not budget.left(),
    )


def _run_rounds(spec: GraphSpec, passes, budget: _Budget, log: Callable[[str], None]) -> tuple[GraphSpec, dict[str, int]]:
    """Rounds of every pass until one makes no progress or the budget ends: (the smallest
    failing spec, accepted candidates per pass name, in the order first taken)."""
    current = spec
    taken: dict[str, int] = {}
    progress = True
    while progress and budget.left():
        progress = False
        for name, make in passes:
            # A pass restarts on each smaller spec it finds, until it finds none.
            while budget.left():
                cand = _first_smaller_failing(make(current), current, budget)
                if cand is None:
                    break
                log(f"{name}: {len(current.nodes)} -> {len(cand.nodes)} ops, {spec_elements(cand)} elements")
                current = cand
                taken[name] = taken.get(name, 0) + 1
                progress = True
    return current, taken


def _first_smaller_failing(candidates: Iterator[GraphSpec], current: GraphSpec, budget: _Budget) -> GraphSpec | None:
    """The first candidate smaller than `current` that still fails, or None (also when the budget ends)."""
    for cand in candidates:
        if not budget.left():
            return None
        if _smaller(cand, current) and budget.fails(cand):
            return cand
    return None


def _complexity(spec: GraphSpec) -> tuple:
    return (
        len(spec.nodes),
        len(spec.outputs),
        int(spec.backward),
        int(spec.autocast is not None),
        sum(1 for n in spec.nodes for k, v in n.params if (k, v) in (("affine", True), ("bias", True))),
        spec_elements(spec),
        int(spec.recipe.kind != "normal"),
        int(spec.recipe.seed != 0),
        sum(1 for n in spec.nodes for k, v in n.params if k == "eps" and v != DEFAULT_EPS),
    )


def _smaller(cand: GraphSpec, current: GraphSpec) -> bool:
    """A total order that every accepted step lowers: the loop always ends."""
    return _complexity(cand) < _complexity(current)


# ---------------------------------------------------------------------------------------------
# The predicate: a case run in a Worker lands in the same finding kind
# ---------------------------------------------------------------------------------------------


def case_predicate(
    worker,
    *,
    device: str,
    config,
    kind: str,
    timeout_s: float = 120.0,
    strict: bool = False,
    must_pass_with=None,
    on_verdict: Callable | None = None,
    severity: str | None = None,
    oracle: str = "numeric",
    perf_margin: float | None = None,
) -> Predicate:
    """`spec -> bool`: running `spec` under `config` in `worker` gives a finding of `kind`
    (and, when `severity` is given, one at least that severe: a bug must not shrink into noise).

    `must_pass_with`, a CompileConfig, keeps the culprit: the candidate must also show no
    finding of `kind` under it (e.g. with the Inductor switch that removes the divergence).
    With `oracle="perf"` each candidate is timed (`fuzzer.engine.perf`: a bounded number of
    pairs) and must stay slower by the margin, at the same severity (a slowdown must not shrink
    into the compiled wrapper's fixed cost).
    """
    from fuzzer.engine.worker import CaseRequest
    from oracles.findings import finding_of

    from records.severity import Severity
    from oracles.severity import severity_of

    def same_kind(spec: GraphSpec, cfg, keep_severity: bool = False) -> bool:
        verdict = worker.run(CaseRequest(spec, device, cfg, oracle=oracle, perf_margin=perf_margin), timeout_s)
        if on_verdict is not None:
            on_verdict(spec, cfg, verdict)
        finding = finding_of(verdict, strict=strict)
        if finding is None or finding.kind.value != kind:
            return False
        if keep_severity and severity is not None:
            reason = severity_of(verdict)
            return reason is not None and reason.severity.at_least(Severity(severity))
        return True

    def predicate(spec: GraphSpec) -> bool:
        if not same_kind(spec, config, keep_severity=True):
            return False
        return must_pass_with is None or not same_kind(spec, must_pass_with)

    return predicate
