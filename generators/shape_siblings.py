"""More sizes for one dynamic compile: a dynamic spec's siblings with its dynamic dims resized.

A spec that compiles for dynamic shapes (`GraphSpec.dynamic`: "marked" dims, or "all" with
`dynamic=True`) is meant to serve every size of those dims with one compile. Its shape siblings
are the same graph with the dims resized (dim 0 for "all"): they run through the drawn spec's
compiled function (`divfuzz.fuzzer.engine.execute.execute_group`), each judged on its own, and a
sibling that makes Dynamo compile again, or a first size whose results change once the other
sizes ran, is a finding (`Verdict.recompile`, the `after:` outputs).

Invariants:
- a sibling is the spec with only the resized dims of its data inputs (and what the nodes infer
  from them) changed: the same nodes, params, weights, dtypes, layouts and recipe
  (`same_graph_but_sizes`);
- sizes are at least 2 (Dynamo specialises sizes 0 and 1) and differ from the spec's and each
  other's; the siblings are a pure function of the spec (its digest seeds the choice).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.surgery import data_inputs, rebuild_spec

# Siblings per dynamic spec (a campaign's: each costs an eager run, a compiled run and its judgement).
SHAPE_SIBLINGS = 2
# The most elements a resized data input may hold (the strategies' own cap).
MAX_SIBLING_ELEMENTS = 1 << 17


def resized_dims(spec: GraphSpec) -> tuple[int, ...]:
    """The dims shape siblings resize: the marked dims, dim 0 under "all", none for a static spec."""
    if spec.dynamic == "marked":
        return spec.dynamic_dims
    return (0,) if spec.dynamic == "all" else ()


def resized(spec: GraphSpec, sizes: dict[int, int]) -> GraphSpec | None:
    """`spec` with dim d of every data input set to `sizes[d]`, re-typed; None when that is no
    valid graph or changes a weight (then the dims are not free to vary)."""
    data = data_inputs(spec)
    if not data or any(d >= len(t.shape) for t in data for d in sizes):
        return None
    shapes = {t.name: tuple(sizes.get(i, n) for i, n in enumerate(t.shape)) for t in data}
    if any(math.prod(s) > MAX_SIBLING_ELEMENTS for s in shapes.values()):
        return None
    sibling = rebuild_spec(spec, data_shapes=shapes)
    return sibling if sibling is not None and same_graph_but_sizes(spec, sibling) else None


def same_graph_but_sizes(a: GraphSpec, b: GraphSpec) -> bool:
    """Whether `b` is `a` with other sizes of `a`'s resized dims (data inputs, and the nodes
    after them) and nothing else: one dynamic compile serves both."""
    dims = set(resized_dims(a))
    if not dims or len(a.inputs) != len(b.inputs) or len(a.nodes) != len(b.nodes):
        return False
    weights = {i for i in (t.name for t in a.inputs)} - {t.name for t in data_inputs(a)}
    for x, y in zip(a.inputs, b.inputs):
        if replace(x, shape=y.shape) != y or len(x.shape) != len(y.shape):
            return False
        if x.name in weights and x.shape != y.shape:
            return False
        if any(p != q for i, (p, q) in enumerate(zip(x.shape, y.shape)) if i not in dims):
            return False
    return all(replace(m, shape=n.shape) == n for m, n in zip(a.nodes, b.nodes)) and replace(
        a, inputs=b.inputs, nodes=b.nodes) == b


def _candidates(size: int) -> list[int]:
    return sorted({s for s in (size // 2, size * 2, size + 1, size - 1, (3 * size) // 2, size + 3) if s >= 2 and s != size})


def shape_siblings(spec: GraphSpec, count: int = SHAPE_SIBLINGS) -> tuple[GraphSpec, ...]:
    """Up to `count` shape siblings of a dynamic `spec` (none for a static one), in the order they run."""
    dims = resized_dims(spec)
    data = data_inputs(spec)
    if not dims or not data or count < 1:
        return ()
    rng = random.Random(int(spec.digest()[:16], 16))
    options = {d: _candidates(data[0].shape[d]) for d in dims if d < len(data[0].shape)}
    siblings: list[GraphSpec] = []
    seen = {tuple(t.shape for t in data)}
    for _ in range(4 * count):
        if len(siblings) == count or not options:
            break
        sizes = {d: rng.choice(sizes) for d, sizes in options.items() if sizes}
        sibling = resized(spec, sizes) if sizes else None
        key = tuple(t.shape for t in data_inputs(sibling)) if sibling is not None else None
        if sibling is not None and key not in seen:
            seen.add(key)
            siblings.append(sibling)
    return tuple(siblings)


def dynamic_marks(spec: GraphSpec) -> tuple[tuple[int, int], ...]:
    """(input position, dim) for each `torch._dynamo.mark_dynamic` a "marked" spec's inputs take:
    every marked dim of every data input (none for another spec)."""
    if spec.dynamic != "marked":
        return ()
    data = {t.name for t in data_inputs(spec)}
    return tuple((i, d) for i, t in enumerate(spec.inputs) if t.name in data for d in spec.dynamic_dims if d < len(t.shape))
