"""Checking that a loaded spec is a graph the registry can build: names, arity, shapes.

`validate_spec` raises `UnknownOpError` or `InvalidGraphError` naming the bad node; it never
runs torch. Every spec drawn by `generators.strategies` passes it (a property test checks).
"""

from __future__ import annotations

from generators.errors import InvalidGraphError
from generators.registry import Meta, get_op
from generators.spec import GraphSpec


def validate_spec(spec: GraphSpec, *, source: str = "spec") -> GraphSpec:
    metas: dict[str, Meta] = {}
    for t in spec.inputs:
        if t.name in metas:
            raise InvalidGraphError(f"{source}: input name {t.name!r} is used twice")
        metas[t.name] = Meta(tuple(t.shape), t.dtype)
    for n in spec.nodes:
        where = f"{source}: node {n.name!r} ({n.op})"
        op = get_op(n.op)
        if n.name in metas:
            raise InvalidGraphError(f"{where}: name is used twice")
        missing = [i for i in n.inputs if i not in metas]
        if missing:
            raise InvalidGraphError(f"{where}: inputs {missing} are not defined before it")
        data = tuple(metas[i] for i in n.inputs[: op.arity])
        if len(data) != op.arity or not op.accepts(data):
            raise InvalidGraphError(f"{where}: does not accept inputs {[(m.shape, m.dtype) for m in data]}")
        try:
            expected = op.infer(data, n.kwargs)
            weights = op.weights(data, n.kwargs)
        except (KeyError, TypeError) as e:
            raise InvalidGraphError(f"{where}: bad params {n.kwargs!r} ({e})") from None
        if len(n.inputs) != op.arity + len(weights):
            raise InvalidGraphError(
                f"{where}: expected {op.arity} data inputs and {len(weights)} weights, got {len(n.inputs)} inputs"
            )
        for w, name in zip(weights, n.inputs[op.arity :]):
            if metas[name].shape != w.shape:
                raise InvalidGraphError(f"{where}: weight {name!r} has shape {metas[name].shape}, expected {w.shape}")
        if tuple(n.shape) != expected.shape:
            raise InvalidGraphError(f"{where}: shape {tuple(n.shape)} but its inputs give {expected.shape}")
        metas[n.name] = Meta(expected.shape, n.dtype)
    for o in spec.outputs:
        if o not in metas:
            raise InvalidGraphError(f"{source}: output {o!r} is not a node or input")
    if not spec.outputs:
        raise InvalidGraphError(f"{source}: a graph needs at least one output")
    return spec


def load_spec(text: str, *, source: str = "spec") -> GraphSpec:
    """Parse and validate a spec from JSON text: the one safe way to read a spec file."""
    return validate_spec(GraphSpec.from_json(text, source=source), source=source)
