"""Which program features a spec has beyond a pure graph of fresh contiguous inputs, compiled
once, statically, in the default mode: the dimensions a report counts cases and buckets by
(`## Program features`) and a campaign draws in a share of its graphs.

- `layout`: some input is not contiguous (`TensorSpec.layout`);
- `mutation`: some node updates a value in place (`OpDef.mutates`);
- `view`: some node is a view of its input (`OpDef.view`);
- `dynamic`: the graph compiles for dynamic shapes (`GraphSpec.dynamic`);
- `mode`: the graph compiles under another `torch.compile` mode (`GraphSpec.mode`).

A pure function of the spec: the same spec has the same features everywhere. Torch-free: a
report counts them (`feature_coverage`) without loading torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from divfuzz.generators.layouts import CONTIGUOUS
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.errors import SpecError

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


@dataclass(frozen=True)
class FeatureCoverage:
    """One row of a report's `## Program features`: the cases that have the feature and the
    distinct buckets they landed in, by severity (most severe first, as the store names them)."""

    feature: str
    cases: int
    buckets: tuple[tuple[str, int], ...]


def feature_coverage(cases: Iterable[tuple]) -> tuple[FeatureCoverage, ...]:
    """A row per feature of `FEATURES`, in that order, over `cases`: (spec or its stored JSON,
    bucket id or None, its bucket's severity) each, a bucket's cases together (a store's cases read
    in bucket order: `Store.iter_case_specs`), so distinct buckets are counted as they pass and
    memory stays one row per feature. A stored spec that does not parse is skipped."""
    drawn: Counter = Counter()
    by_severity: dict[str, Counter] = {f: Counter() for f in FEATURES}
    last_bucket: dict[str, int] = {}
    for spec, bucket_id, severity, *_ in cases:
        if isinstance(spec, str):
            try:
                spec = GraphSpec.from_json(spec, source="stored case")
                found = program_features(spec)
            except (SpecError, KeyError, ValueError):  # a spec of ops this registry lacks counts for nothing
                continue
        else:
            found = program_features(spec)
        for feature in found:
            drawn[feature] += 1
            if bucket_id is not None and last_bucket.get(feature) != bucket_id:
                last_bucket[feature] = bucket_id
                by_severity[feature][str(severity or "none")] += 1
    order = ("bug", "suspect", "by-design", "noise", "eager-worse", "none")
    return tuple(FeatureCoverage(f, drawn[f], tuple(sorted(by_severity[f].items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0]))))
                 for f in FEATURES)
