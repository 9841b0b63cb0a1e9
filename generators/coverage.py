"""What a campaign has drawn, per op, per op pair and per dtype: the counts that steer generation
towards what was drawn least, and the per-op coverage table a report prints.

Torch-free (a report reads it without loading torch): it imports the IR and the registry only.

- `DrawCounts` is one slot's running tally. The campaign loop feeds each spec's `novelty` (how
  little of it the slot has drawn: ops, (producer, consumer) op pairs, data dtype) to
  `hypothesis.target`, then notes the spec (run or skipped on resume alike). Hypothesis's target
  phase then climbs towards the ops, pairs and dtypes drawn least. Steering goes through `target`
  and not through the strategy's weights because a strategy must make the same draws for the same
  choices (Hypothesis raises FlakyStrategyDefinition when outside state changes them). Each slot
  keeps its own tally, so its cases stay a function of the campaign seed and the slot (threads
  sharing one tally would make them depend on timing).
- `op_coverage` summarises stored cases: per op, the cases that hold it (by data dtype) and the
  distinct buckets of those cases, by severity.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from divfuzz.generators.registry import all_ops
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.errors import SpecError

# The producer of a graph input, in op pairs.
INPUT = "input"


def data_dtype(spec: GraphSpec) -> str:
    """The dtype a case is drawn in: its data inputs' dtype, or "autocast:<dtype>" under autocast."""
    if spec.autocast:
        return f"autocast:{spec.autocast}"
    data = [t.dtype for t in spec.inputs if t.init == "data"]
    return data[0] if data else "-"


def op_pairs(spec: GraphSpec) -> set[tuple[str, str]]:
    """Each (producer op, consumer op) over the graph's data edges; a graph input's producer is `INPUT`."""
    producer = {n.name: n.op for n in spec.nodes}
    data_inputs = {t.name for t in spec.inputs if t.init == "data"}
    pairs = set()
    for n in spec.nodes:
        for name in n.inputs:
            if name in producer:
                pairs.add((producer[name], n.op))
            elif name in data_inputs:
                pairs.add((INPUT, n.op))
    return pairs


@dataclass
class DrawCounts:
    """One slot's tally of drawn cases: per op (cases holding it), per op pair, per data dtype.

    Mutable by design and owned by one thread (a campaign slot); `note` is the only writer.
    """

    cases: int = 0
    ops: Counter = field(default_factory=Counter)
    pairs: Counter = field(default_factory=Counter)
    dtypes: Counter = field(default_factory=Counter)

    def novelty(self, spec: GraphSpec) -> float:
        """How new `spec` is to this tally: the sum of 1 / (1 + times drawn) over its ops, its op
        pairs and its dtype (an op, pair or dtype never drawn adds 1). What `target` climbs."""
        return (
            sum(1.0 / (1 + self.ops[op]) for op in set(spec.op_names))
            + sum(1.0 / (1 + self.pairs[pair]) for pair in op_pairs(spec))
            + 1.0 / (1 + self.dtypes[data_dtype(spec)])
        )

    def note(self, spec: GraphSpec) -> None:
        self.cases += 1
        self.ops.update(set(spec.op_names))
        self.pairs.update(op_pairs(spec))
        self.dtypes[data_dtype(spec)] += 1


@dataclass(frozen=True)
class OpCoverage:
    """One op's line in the coverage table: cases holding it, by data dtype, and the distinct
    buckets those cases landed in, by the bucket's severity ("none" when it has none yet)."""

    op: str
    family: str
    cases: int
    by_dtype: tuple[tuple[str, int], ...]
    buckets: tuple[tuple[str, int], ...]

    @property
    def bucket_count(self) -> int:
        return sum(n for _, n in self.buckets)


def op_coverage(
    cases: Iterable[tuple],
    bucket_severity: Mapping[int, str | None] | None = None,
    *,
    grouped: bool = False,
) -> tuple[OpCoverage, ...]:
    """The per-op coverage table of `cases`, (spec or its stored JSON, bucket id or None) each.

    Every registered op has a row (an op never drawn reads 0 cases: the table shows the holes),
    in registry order; ops a stored spec names that the registry does not know are counted
    under their own row at the end. A spec that does not parse is skipped (the store's JSON is
    untrusted; the report does not stop for one bad row). `bucket_severity` maps a bucket id to
    its severity's name. With `grouped`, each case is (spec, bucket id, its bucket's severity) and
    each bucket's cases come together (a store's cases read in bucket order): distinct buckets are
    counted as they pass, so memory grows with the ops, never with the buckets.
    """
    severity_of = bucket_severity or {}
    registry = all_ops()
    drawn: Counter = Counter()
    dtypes: dict[str, Counter] = {}
    buckets: dict[str, set[int]] = {}
    by_severity: dict[str, Counter] = {}
    last_bucket: dict[str, int] = {}  # grouped: the bucket an op was last counted in
    for case in cases:
        spec, bucket_id = case[0], case[1]
        if isinstance(spec, str):
            try:
                spec = GraphSpec.from_json(spec, source="stored case")
            except SpecError:
                continue
        dtype = data_dtype(spec)
        for op in set(spec.op_names):
            drawn[op] += 1
            dtypes.setdefault(op, Counter())[dtype] += 1
            if bucket_id is None:
                continue
            if not grouped:
                buckets.setdefault(op, set()).add(bucket_id)
            elif last_bucket.get(op) != bucket_id:
                last_bucket[op] = bucket_id
                by_severity.setdefault(op, Counter())[str(case[2] or "none")] += 1
    for op, ids in buckets.items():
        by_severity[op] = Counter(str(severity_of.get(b) or "none") for b in ids)
    names = list(registry) + sorted(op for op in drawn if op not in registry)
    rows = []
    for op in names:
        rows.append(
            OpCoverage(
                op=op,
                family=registry[op].family if op in registry else "unregistered",
                cases=drawn[op],
                by_dtype=tuple(sorted(dtypes.get(op, Counter()).items())),
                buckets=tuple(sorted(by_severity.get(op, Counter()).items())),
            )
        )
    return tuple(rows)
