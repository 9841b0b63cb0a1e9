"""Which bucket a finding goes in: its `BucketKey` (divfuzz.records.buckets), built from fields.

A raw key names the graph's sorted op set and modes, the finding, and the severity rule its case
was rated by (so every case of a bucket shares one severity, `key_severity`). A compiler error
raised at a known site (`divfuzz.fuzzer.engine.error_site`) is keyed by that site instead of its
ops: graphs of any ops that trip one assertion share one bucket, and so one analysis in a
campaign. A root-cause key (`root_cause_key`) replaces the ops by the minimized graph's and adds
the culprit, keeping everything else. The graph's program features (layouts, dynamic shapes,
mode) are key fields too, the minimal graph's in a root-cause key: a finding that stays once the
minimizer made an input contiguous is keyed without that layout.
"""

from __future__ import annotations

from dataclasses import replace

from divfuzz.generators.layouts import CONTIGUOUS
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.outcomes import ERROR_KINDS
from divfuzz.records.severity import SeverityReason
from divfuzz.oracles.mechanisms import mechanism_severity
from divfuzz.records.verdict import Against, Explanation, Finding


def ordered_ops(spec: GraphSpec) -> tuple[str, ...]:
    """The graph's ops in order, each once: a minimized graph's pattern in a root-cause key."""
    return tuple(dict.fromkeys(spec.op_names))


def bucket_key(finding: Finding, spec: GraphSpec, device: str, *, reason: SeverityReason | None,
               against: Against | None = None, explanation: Explanation | None = None) -> BucketKey:
    """A finding's raw key. `reason` is its case's severity (its rule goes in the key);
    `against` (an `--against` case) puts "A vs B" in front of the detail: an A-vs-B bucket never
    shares a key with an eager-vs-compiled one; `explanation` (the verdict's) names the mechanism
    when it explains the reason's rule (`divfuzz.oracles.mechanisms.mechanism_severity`)."""
    mechanism = ""
    if explanation is not None and reason is not None and mechanism_severity(explanation.mechanism, reason.rule) is not None:
        mechanism = explanation.mechanism  # as `severity_policy.explaining_mechanism` reads it
    detail = finding.triage if finding.kind in ERROR_KINDS else ""
    if against is not None:
        detail = f"{against.backend} vs {against.against}" + (f": {detail}" if detail else "")
    by_site = finding.kind in ERROR_KINDS and bool(finding.site)
    return BucketKey(
        kind=finding.kind.value,
        dtype=finding.dtype,
        device_type=device.split(":")[0],
        ops=() if by_site else tuple(sorted(set(spec.op_names))),
        autocast="" if by_site else (spec.autocast or ""),
        backward=False if by_site else bool(spec.backward),
        detail=detail,
        site=(finding.site or "") if finding.kind in ERROR_KINDS else "",
        rule=reason.rule if reason is not None else "",
        mechanism=mechanism,
        **({} if by_site else graph_features(spec)),
    )


def graph_features(spec: GraphSpec) -> dict[str, str]:
    """The key fields of a graph's program features: its inputs' layouts other than contiguous
    (sorted, joined by "+"), its dynamic kind and its mode ("" each when it has none)."""
    layouts = sorted({t.layout for t in spec.inputs if t.layout != CONTIGUOUS})
    return {"layout": "+".join(layouts), "dynamic": spec.dynamic, "mode": spec.mode}


def root_cause_key(raw_key: BucketKey, minimal: GraphSpec, culprit: CulpritKey) -> BucketKey:
    """The key a raw key is filed under once analysed: the minimal graph's ops in order and modes,
    and the culprit; the finding, its rule, mechanism and site kept."""
    return replace(raw_key, ops=ordered_ops(minimal), autocast=minimal.autocast or "", backward=bool(minimal.backward),
                   culprit=culprit, **({} if not raw_key.ops and raw_key.site else graph_features(minimal)))
