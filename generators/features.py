"""Which program features a spec has beyond a pure graph of fresh contiguous inputs, compiled
once, statically, in the default mode: the dimensions a report counts cases and buckets by
(`## Program features`) and a campaign draws in a share of its graphs.

- `layout`: some input is not contiguous (`TensorSpec.layout`);
- `mutation`: some node updates a value in place (`OpDef.mutates`);
- `view`: some node is a view of its input (`OpDef.view`);
- `dynamic`: the graph compiles for dynamic shapes (`GraphSpec.dynamic`);
- `mode`: the graph compiles under another `torch.compile` mode (`GraphSpec.mode`).

A pure function of the spec: the same spec has the same features everywhere.
"""

from __future__ import annotations

from divfuzz.generators.layouts import CONTIGUOUS
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec

FEATURES = ("layout", "mutation", "view", "dynamic", "mode")


def program_features(spec: GraphSpec) -> frozenset[str]:
    """The features of `FEATURES` that `spec` has."""
    found = set()
    if any(t.layout != CONTIGUOUS for t in spec.inputs):
        found.add("layout")
    ops = [get_op(n.op) for n in spec.nodes]
    if any(op.mutates for op in ops):
        found.add("mutation")
    if any(op.view for op in ops):
        found.add("view")
    if spec.dynamic:
        found.add("dynamic")
    if getattr(spec, "mode", ""):
        found.add("mode")
    return frozenset(found)
