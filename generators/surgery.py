"""Spec surgery: edit a valid spec (drop, bypass or cut a node, change params, shapes, outputs or
autocast) and get a valid spec back, or None when the edit leaves no valid graph.

Every edit ends in `rebuild_spec`, which re-types each node through `divfuzz.generators.node_typing` (the
rule the strategies draw with and `validate_spec` checks), re-derives its weights from its op,
drops what no output reaches, and returns only what `validate_spec` accepts. The minimizer
(`divfuzz.fuzzer.triage.shrink`) chooses the edits; this module owns what an edit does to a spec.

Invariants: pure functions of their arguments (a spec is frozen data); a weight that survives an
edit keeps its name, dtype and init; inputs keep their order, new ones come after.
"""

from __future__ import annotations

from dataclasses import replace

from divfuzz.generators.aliasing import MUTATED_PREFIX, alias_roots, writes_in_place
from divfuzz.generators.node_typing import node_output, node_weights
from divfuzz.generators.opdef import INFER_ERRORS, Meta, WeightSpec
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec, reachable
from divfuzz.generators.validate import validate_spec
from divfuzz.records.errors import SpecError


def rebuild_spec(
    spec: GraphSpec,
    *,
    nodes: tuple[Node, ...] | None = None,
    outputs: tuple[str, ...] | None = None,
    data_shapes: dict[str, tuple[int, ...]] | None = None,
    extra_inputs: tuple[TensorSpec, ...] = (),
    autocast: str | None | bool = False,
    gradients: frozenset[str] | None = None,
) -> GraphSpec | None:
    """A valid spec from edited parts, or None when the edit leaves no valid graph.

    Data inputs take `data_shapes`; every node's shape and dtype is re-typed from its data
    inputs; its weight inputs are re-derived from `op.weights` (new shapes, dropped when a param
    such as `bias=False` no longer needs them, created when needed); nodes that no output
    reaches and inputs that nothing uses are dropped. `autocast=False` keeps the spec's autocast.
    `gradients`, when given, names the only inputs that keep `requires_grad` (the others' gradients
    go); an input that lost it keeps it lost through later rebuilds.
    """
    nodes = spec.nodes if nodes is None else nodes
    outputs = spec.outputs if outputs is None else outputs
    autocast_dtype = spec.autocast if autocast is False else autocast
    old_inputs = {t.name: t for t in tuple(spec.inputs) + tuple(extra_inputs)}
    live = reachable(outputs, nodes)
    nodes = tuple(n for n in nodes if n.name in live)
    if not nodes:
        return None
    inputs, metas = _live_data_inputs(spec, nodes, old_inputs, live, data_shapes or {})
    new_nodes = []
    for n in nodes:
        rebuilt = _retype_node(spec, n, old_inputs, inputs, metas, autocast_dtype)
        if rebuilt is None:
            return None
        new_nodes.append(rebuilt)
    if any(o not in metas for o in outputs) or len(set(outputs)) != len(outputs):
        return None
    if gradients is not None:
        inputs = {name: replace(t, requires_grad=t.requires_grad and name in gradients) for name, t in inputs.items()}
    candidate = replace(
        spec, inputs=_in_original_order(inputs, old_inputs), nodes=tuple(new_nodes), outputs=tuple(outputs), autocast=autocast_dtype
    )
    try:
        return validate_spec(candidate, source="minimizer candidate")
    except SpecError:
        return None


def weight_names(nodes: tuple[Node, ...]) -> set[str]:
    """The graph inputs that `nodes` hold as weights (every input past an op's data arity)."""
    names: set[str] = set()
    for n in nodes:
        names.update(n.inputs[get_op(n.op).arity :])
    return names


def data_inputs(spec: GraphSpec) -> list[TensorSpec]:
    """The spec's data inputs: its graph inputs that no node holds as a weight."""
    weights = weight_names(spec.nodes)
    return [t for t in spec.inputs if t.name not in weights]


def _live_data_inputs(spec: GraphSpec, nodes: tuple[Node, ...], old_inputs: dict[str, TensorSpec], live: set[str],
                      data_shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, TensorSpec], dict[str, Meta]]:
    """The reached data inputs (weights are re-derived per node), in `data_shapes`' shapes, and
    their metas; `requires_grad` only where the spec still runs backward."""
    weights = weight_names(nodes)
    inputs: dict[str, TensorSpec] = {}
    metas: dict[str, Meta] = {}
    for t in old_inputs.values():
        if t.name in live and t.name not in weights:
            shape = tuple(data_shapes.get(t.name, t.shape))
            inputs[t.name] = replace(t, shape=shape, requires_grad=t.requires_grad and spec.backward)
            metas[t.name] = Meta(shape, t.dtype)
    return inputs, metas


def _retype_node(spec: GraphSpec, n: Node, old_inputs: dict[str, TensorSpec], inputs: dict[str, TensorSpec],
                 metas: dict[str, Meta], autocast: str | None) -> Node | None:
    """Node `n` re-typed by `divfuzz.generators.node_typing` from its data inputs' metas, its weights
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
        weights = node_weights(op, data, n.kwargs, autocast)
    except INFER_ERRORS:
        return None
    # Old weights by role suffix, so that a weight keeps its name, dtype and init.
    old_weight_names = dict(zip((w.suffix for w in _old_weights(spec, n, old_inputs)), n.inputs[op.arity :]))
    names = []
    for w in weights:
        name = old_weight_names.get(w.weight.suffix) or f"{n.name}_{w.weight.suffix}"
        old = old_inputs.get(name)
        kept = w if old is None else replace(w, dtype=old.dtype)
        # A weight whose gradient an edit dropped (`gradients`) stays without one.
        inputs[name] = kept.input(name, backward=spec.backward and (old is None or old.requires_grad))
        metas[name] = Meta(tuple(w.weight.shape), kept.dtype)
        names.append(name)
    try:
        out = node_output(op, data, n.kwargs, autocast, tuple(metas[name].dtype for name in names))
    except INFER_ERRORS:
        return None
    metas[n.name] = Meta(tuple(out.shape), out.dtype)
    return replace(n, inputs=tuple(data_names) + tuple(names), shape=tuple(out.shape), dtype=out.dtype)


def _in_original_order(inputs: dict[str, TensorSpec], old_inputs: dict[str, TensorSpec]) -> tuple[TensorSpec, ...]:
    """Inputs in their original order, new ones after."""
    order = [t.name for t in old_inputs.values()]
    return tuple(sorted(inputs.values(), key=lambda t: order.index(t.name) if t.name in order else len(order)))


def _old_weights(spec: GraphSpec, node: Node, old_inputs: dict[str, TensorSpec]) -> tuple[WeightSpec, ...]:
    op = get_op(node.op)
    try:
        data = tuple(Meta(*spec.meta(d)) if d not in old_inputs else Meta(old_inputs[d].shape, old_inputs[d].dtype) for d in node.inputs[: op.arity])
        return op.weights(data, node.kwargs)
    except INFER_ERRORS:
        return ()


# ---- edits -----------------------------------------------------------------------------------


def outputs_needed_by(spec: GraphSpec, output: str) -> tuple[str, ...]:
    """The spec's outputs that the value judged as `output` is made of, in spec order: a forward
    output itself; for `grad:<input>`, every output that input reaches (the gradient sums what
    flows back from each of them); for `mutated:<input>`, every output that reaches a node
    writing into that input. Empty when `output` names nothing the spec has ("-", a crash's)."""
    if output in spec.outputs:
        return (output,)
    if output.startswith("grad:"):
        source = output.removeprefix("grad:")
        return tuple(o for o in spec.outputs if source in reachable((o,), spec.nodes))
    if output.startswith(MUTATED_PREFIX):
        target = output.removeprefix(MUTATED_PREFIX)
        roots = alias_roots(spec)
        writers = {n.name for n in spec.nodes if n.inputs and writes_in_place(n) and roots.get(n.inputs[0]) == target}
        return tuple(o for o in spec.outputs if writers & reachable((o,), spec.nodes))
    return ()


def pruned_to_output(spec: GraphSpec, output: str, *, keep_backward: bool,
                     other_gradients: bool = True) -> GraphSpec | None:
    """`spec` cut down to what the value judged as `output` needs (`outputs_needed_by`): the other
    outputs, every node those outputs do not depend on and every input nothing left uses go.
    `keep_backward=False` compiles it forward only (`requires_grad` dropped everywhere); for a
    `grad:<input>` output, `other_gradients=False` drops every other input's gradient. None when
    nothing is left to keep, or the result is no valid spec."""
    outputs = outputs_needed_by(spec, output)
    if not outputs:
        return None
    gradients = None
    if output.startswith("grad:") and spec.backward and keep_backward and not other_gradients:
        gradients = frozenset({output.removeprefix("grad:")})
    return rebuild_spec(replace(spec, backward=spec.backward and keep_backward), outputs=outputs, gradients=gradients)



def rewire(nodes: tuple[Node, ...], outputs: tuple[str, ...], old: str, new: str) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """`nodes` and `outputs` with every use of the value `old` replaced by `new` (outputs kept distinct)."""
    nodes = tuple(replace(n, inputs=tuple(new if i == old else i for i in n.inputs)) for n in nodes)
    outs: list[str] = []
    for o in outputs:
        o = new if o == old else o
        if o not in outs:
            outs.append(o)
    return nodes, tuple(outs)


def keep_output_names(before: tuple[str, ...], nodes: tuple[Node, ...],
                      outputs: tuple[str, ...]) -> tuple[tuple[Node, ...], tuple[str, ...]]:
    """`nodes` and `outputs` after an edit that rewired outputs `before` to stand-ins, with each
    stand-in node renamed to the output it stands for: a finding is about an output by name
    (the minimizer keeps the output a bucket's reason names), and dropping the op after it (a
    gelu after the interpolate that changed the dtype) must leave that name in place.

    Renames only where the outputs line up one for one, the old name is gone from the graph, and
    the stand-in is a node (not a graph input) that was not an output itself; else unchanged."""
    if len(before) != len(outputs):
        return nodes, outputs
    node_names = {n.name for n in nodes}
    renames = {new: old for old, new in zip(before, outputs)
               if old != new and old not in node_names and new in node_names and new not in before}
    if not renames:
        return nodes, outputs
    nodes = tuple(replace(n, name=renames.get(n.name, n.name), inputs=tuple(renames.get(i, i) for i in n.inputs))
                  for n in nodes)
    return nodes, tuple(renames.get(o, o) for o in outputs)


def same_shape_inputs(spec: GraphSpec, node: Node) -> list[str]:
    """The data inputs of `node` of its own output shape: what could stand in for it."""
    op = get_op(node.op)
    return [i for i in node.inputs[: op.arity] if spec.meta(i)[0] == node.shape]


def remove_nodes(spec: GraphSpec, names: set[str]) -> GraphSpec | None:
    """Drop nodes, rewiring each one's consumers to its first same-shape data input."""
    nodes, outputs = spec.nodes, spec.outputs
    for n in spec.nodes:
        if n.name not in names:
            continue
        target = n.name
        while target in names:  # its stand-in, followed through a chain of removed nodes to a kept value
            same = same_shape_inputs(spec, spec.node(target))
            if not same:
                return None
            target = same[0]
        nodes, outputs = rewire(nodes, outputs, n.name, target)
    nodes = tuple(n for n in nodes if n.name not in names)
    if not any(o in {n.name for n in nodes} for o in outputs):
        return None  # only inputs left as outputs: nothing to compile
    outputs = tuple(o for o in outputs if o in {n.name for n in nodes})
    nodes, outputs = keep_output_names(spec.outputs, nodes, outputs)
    return rebuild_spec(spec, nodes=nodes, outputs=outputs)


def bypass_node(spec: GraphSpec, node: Node, source: str) -> GraphSpec | None:
    """Replace `node` by its data input `source` (of the same shape) wherever it is used."""
    nodes, outputs = rewire(spec.nodes, spec.outputs, node.name, source)
    nodes = tuple(m for m in nodes if m.name != node.name)
    kept = {m.name for m in nodes}
    if not any(o in kept for o in outputs):
        return None
    nodes, outputs = keep_output_names(spec.outputs, nodes, tuple(o for o in outputs if o in kept))
    return rebuild_spec(spec, nodes=nodes, outputs=outputs)


def cut_to_input(spec: GraphSpec, node: Node, name: str) -> GraphSpec | None:
    """Replace `node` by a new data input `name` of its shape and dtype (what fed it no longer matters)."""
    t = TensorSpec(name, tuple(node.shape), node.dtype, requires_grad=spec.backward, init="data")
    nodes, outputs = rewire(spec.nodes, spec.outputs, node.name, name)
    nodes = tuple(m for m in nodes if m.name != node.name)
    return rebuild_spec(spec, nodes=nodes, outputs=outputs, extra_inputs=(t,))


def with_params(spec: GraphSpec, index: int, params: dict) -> GraphSpec | None:
    """Node `index` with `params` instead of its own (its shape, dtype and weights re-derived)."""
    node = replace(spec.nodes[index], params=tuple(sorted(params.items())))
    return rebuild_spec(spec, nodes=spec.nodes[:index] + (node,) + spec.nodes[index + 1 :])


def fresh_name(used: set[str], prefix: str) -> str:
    """`prefix` followed by the smallest number that makes a name not in `used` (then added to it)."""
    i = 0
    while f"{prefix}{i}" in used:
        i += 1
    used.add(f"{prefix}{i}")
    return f"{prefix}{i}"
