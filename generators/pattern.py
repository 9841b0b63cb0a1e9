"""A stored spec's pattern: the minimized graph's ops and their wiring, the text root causes are
grouped by (`divfuzz.oracles.root_cause_rule`).

The pattern is each node's op, which inputs or earlier nodes it reads (renamed by position), its
categorical parameters (strings, flags and None: a rounding mode, a comparison, `affine`, a cast's
target), the outputs, each input's role (data, or a parameter's initialisation, and whether it
takes a gradient), and whether autocast and backward are on. Tensor sizes, dtypes of inputs and
nodes, numeric parameters (eps, a divisor, a feature count), the input recipe and its seed are left
out: they are the case, not the cause. Torch-free: it reads stored rows only.
"""

from __future__ import annotations

from typing import Any

from divfuzz.generators.spec import GraphSpec
from divfuzz.records.errors import DivfuzzError


def graph_pattern(spec_dict: Any, *, own_names: bool = False) -> str | None:
    """The canonical pattern of a stored spec (see the module docstring), as readable text such as
    `v1 = div(x0; mode=floor) -> v1`, or None when the spec does not load. With `own_names`, the
    same text under the spec's own value names (what a bucket's spec.json, repro.py and severity
    reason call them), for a reader; the canonical names are for grouping."""
    try:
        spec = GraphSpec.from_dict(spec_dict, source="minimized spec")
    except (DivfuzzError, ValueError, KeyError, TypeError, AttributeError):
        return None
    names: dict[str, str] = {}
    for i, t in enumerate(spec.inputs):
        names[t.name] = t.name if own_names else f"x{i}"
    lines = []
    for j, n in enumerate(spec.nodes, start=1):
        names[n.name] = n.name if own_names else f"v{j}"
        args = ", ".join(names.get(a, "?") for a in n.inputs)
        params = ", ".join(f"{k}={v}" for k, v in sorted(n.params) if v is None or isinstance(v, (str, bool)))
        lines.append(f"{names[n.name]} = {n.op}({args}{'; ' + params if params else ''})")
    roles = [f"{names[t.name]}:{t.init}{'+grad' if t.requires_grad else ''}" for t in spec.inputs
             if t.init != "data" or t.requires_grad]
    modes = ["autocast"] * bool(spec.autocast) + ["backward"] * spec.backward
    tail = " -> " + ", ".join(names.get(o, "?") for o in spec.outputs)
    extra = (f" [{', '.join(roles + modes)}]" if roles or modes else "")
    return "; ".join(lines) + tail + extra


def minimized_pattern(bucket) -> str | None:
    """The pattern of a bucket that was minimized and attributed, else None (it stays alone)."""
    m = bucket.minimized
    if not isinstance(m, dict) or "ops_before" not in m or not (bucket.culprit or {}).get("summary"):
        return None
    return graph_pattern(m.get("spec"))
