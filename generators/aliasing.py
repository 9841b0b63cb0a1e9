"""Which values of a graph share storage, and which graph inputs it writes into.

A view (`OpDef.view`) shares its first input's storage, an in-place op (`OpDef.mutates`, its
`clone` param unset) writes into its first input and returns it: each value has a root, the
graph input or node whose storage it lives in (`alias_roots`). A graph input whose root some
in-place op writes into is a mutated input (`mutated_inputs`): its value after the call is what a
caller sees, and the engine judges it as an output named `mutated:<input>` (`MUTATED_PREFIX`).

The rules a graph with in-place ops keeps, so that it runs eagerly (`aliasing_problem`, which
`validate_spec` enforces and the strategies draw within):
- a backward graph writes only into copies (`clone`): autograd refuses an in-place op on a leaf
  that requires grad, and on a value an earlier op saved for its backward;
- nothing writes into an input whose elements overlap in memory (`layouts.OVERLAPPING`: an
  expanded input), nor into a view of one;
- an in-place op's other input shares its target's storage only as the target itself
  (`x.add_(x)`): another view of it overlaps partly, an error in eager.
Pure functions of the spec; no torch.
"""

from __future__ import annotations

from divfuzz.generators.layouts import OVERLAPPING
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec, Node

MUTATED_PREFIX = "mutated:"


def writes_in_place(node: Node) -> bool:
    """Whether `node` writes into its first data input (an in-place op not on a copy)."""
    return get_op(node.op).mutates and not node.kwargs.get("clone", False)


def shares_storage(node: Node) -> bool:
    """Whether `node`'s value lives in its first data input's storage (a view, or an in-place op
    not on a copy)."""
    return get_op(node.op).view or writes_in_place(node)


def alias_roots(spec: GraphSpec) -> dict[str, str]:
    """Each graph input's and node's root: the graph input or node whose storage it lives in."""
    roots = {t.name: t.name for t in spec.inputs}
    for n in spec.nodes:
        roots[n.name] = roots.get(n.inputs[0], n.inputs[0]) if n.inputs and shares_storage(n) else n.name
    return roots


def mutated_roots(spec: GraphSpec) -> set[str]:
    """The roots some in-place op writes into."""
    roots = alias_roots(spec)
    return {roots.get(n.inputs[0], n.inputs[0]) for n in spec.nodes if n.inputs and writes_in_place(n)}


def mutated_inputs(spec: GraphSpec) -> tuple[str, ...]:
    """The graph inputs (in spec order) the graph writes into."""
    written = mutated_roots(spec)
    return tuple(t.name for t in spec.inputs if t.name in written)


def mutated_output(name: str) -> str:
    """The output name under which input `name`'s value after the call is judged."""
    return MUTATED_PREFIX + name


def aliasing_problem(spec: GraphSpec) -> str | None:
    """What makes `spec`'s in-place ops fail eagerly (see the module docstring), or None."""
    roots = alias_roots(spec)
    layouts = {t.name: t.layout for t in spec.inputs}
    for n in spec.nodes:
        if not get_op(n.op).mutates:
            continue
        if spec.backward and not n.kwargs.get("clone", False):
            return f"node {n.name!r} ({n.op}) writes in place in a backward graph (set its clone param)"
        if not writes_in_place(n):
            continue
        target = roots.get(n.inputs[0], n.inputs[0])
        if layouts.get(target) in OVERLAPPING:
            return f"node {n.name!r} ({n.op}) writes into input {target!r}, whose {layouts[target]} elements overlap"
        if any(roots.get(i, i) == target and i != n.inputs[0] for i in n.inputs[1:]):
            return f"node {n.name!r} ({n.op}) reads another view of the storage it writes into"
    return None
