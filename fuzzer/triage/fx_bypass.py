"""Bypass reduction for aten FX graphs: the step torch's `fx_minifier` does not take.

`fx_minifier` shrinks a graph by cutting nodes into inputs (their eager values become new
placeholders) and by dropping suffixes. It never removes a node from the *middle* of a chain, so
everything between the op where eager and compiled start to differ and the op that amplifies
it (a conv, a batch norm, a hand-written GELU, then `log2 -> ceil -> uint8`) stays. This pass
tries, node by node from the output back, to replace a node by one of its own inputs of the same
shape, dtype and device, and keeps the change while the caller's predicate still fails.

Invariants:
- a kept candidate always satisfies `fails(graph, inputs)`;
- a candidate never casts a float to an integer dtype that cannot hold it (NaN, Inf, out of range:
  undefined behaviour, so eager and compiled may disagree for no reason worth reporting) unless
  the graph it came from already did;
- placeholders a bypass leaves unused are dropped together with their inputs;
- `getitem` is bookkeeping on a tuple-returning op, not an op: `count_ops` does not count it.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Sequence

from divfuzz.records.deadline import Deadline


def count_ops(gm) -> int:
    """Computing nodes of the graph (`call_function` other than tuple indexing)."""
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem)


def node_values(gm, inputs: Sequence) -> dict[str, object]:
    """Every node's eager value, by node name."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    import torch.fx

    values: dict[str, object] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            values[n.name] = out = super().run_node(n)
            return out

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


def _fits(v, dtype) -> bool:
    """Every value of float tensor `v` converts to integer `dtype` without undefined behaviour:
    finite, and truncating into the dtype's range."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    info = torch.iinfo(dtype)
    v = v.double()
    # Bounds as Python floats: int64's `info.min - 1` does not fit any integer scalar torch takes
    # (it raised "can't convert negative int to unsigned" for an argmax model).
    return bool(torch.isfinite(v).all()) and bool(((v > float(info.min) - 1.0) & (v < float(info.max) + 1.0)).all())


def casts_out_of_range(gm, values: dict[str, object]) -> bool:
    """Does some node turn a float tensor into an integer tensor that cannot hold all its values
    (NaN, Inf, or out of range: undefined behaviour in C++ and CUDA)?"""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    for n in gm.graph.nodes:
        out = values.get(n.name)
        if n.op != "call_function" or not isinstance(out, torch.Tensor):
            continue
        if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
            continue
        for a in n.all_input_nodes:
            v = values.get(a.name)
            # Only a conversion (same shape in and out) is a cast; argmax/argsort read floats but
            # never convert them, whatever their values.
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.shape == out.shape and not _fits(v, out.dtype):
                return True
    return False


def _same_kind(a, b) -> bool:
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.device == b.device
    )


def _replacements(node, values) -> list[str]:
    """Names of the nodes that could stand in for `node`: its tensor inputs of the same kind, and
    for `getitem` of a tuple-returning op (batch norm), that op's tensor inputs."""
    sources = list(node.all_input_nodes)
    if node.target is operator.getitem:
        sources = [s for t in sources for s in t.all_input_nodes]
    mine = values.get(node.name)
    return [s.name for s in sources if _same_kind(values.get(s.name), mine)]


def _bypassed(gm, inputs: Sequence, node_name: str, source_name: str):
    """A copy of `gm` with `node_name` replaced by `source_name`, dead code and unused inputs gone."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch.fx

    graph = copy.deepcopy(gm.graph)
    nodes = {n.name: n for n in graph.nodes}
    nodes[node_name].replace_all_uses_with(nodes[source_name])
    graph.eliminate_dead_code()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    kept = []
    for i, p in enumerate(placeholders):
        if p.users:
            kept.append(inputs[i])
        else:
            graph.erase_node(p)
    graph.lint()
    return torch.fx.GraphModule(gm, graph), kept


def bypass_reduce(gm, inputs: Sequence, fails: Callable, deadline: Deadline) -> tuple[object, list, int]:
    """Bypass nodes while `fails` holds, until `deadline`; returns (graph, inputs, predicate calls)."""
    inputs = list(inputs)
    calls = 0
    progress = True
    while progress and not deadline.expired():
        progress = False
        values = node_values(gm, inputs)
        allowed_out_of_range = casts_out_of_range(gm, values)
        for node in reversed([n for n in gm.graph.nodes if n.op == "call_function"]):
            for source in _replacements(node, values):
                if deadline.expired():
                    return gm, inputs, calls
                candidate, kept = _bypassed(gm, inputs, node.name, source)
                if not allowed_out_of_range and casts_out_of_range(candidate, node_values(candidate, kept)):
                    continue
                calls += 1
                if fails(candidate, kept):
                    gm, inputs, progress = candidate, kept, True
                    break
            if progress:
                break
    return gm, inputs, calls
