"""Which bucket a finding goes in: its `BucketKey` (divfuzz.records.buckets) from the finding and its graph.

The signature is the graph's sorted set of ops (and its autocast and backward modes) until the
minimizer supplies the minimized op pattern and its culprit. A compiler error raised at a known
site (`divfuzz.fuzzer.engine.error_site`) is keyed by that site instead: graphs of any ops that
trip one assertion share one bucket, and so one analysis in a campaign.
"""

from __future__ import annotations

from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey
from divfuzz.records.outcomes import ERROR_KINDS
from divfuzz.records.verdict import Against, Finding
from divfuzz.oracles.severity_policy import severity_of


def graph_signature(spec: GraphSpec) -> str:
    """The sorted set of op names, plus autocast and backward when on: graphs made of the same ops
    in the same mode share it (and so share one minimization during a campaign)."""
    ops = "+".join(sorted(set(spec.op_names))) or "(empty)"
    modes = [f"autocast {spec.autocast}"] * bool(spec.autocast) + ["backward"] * spec.backward
    return f"{ops} ({', '.join(modes)})" if modes else ops


def raw_signature(finding: Finding, spec: GraphSpec) -> str:
    """A finding's signature before analysis: a compiler error's site ("raised: <site>"), else the graph's ops."""
    if finding.kind in ERROR_KINDS and finding.site:
        return f"raised: {finding.site}"
    return graph_signature(spec)


def bucket_key(finding: Finding, spec: GraphSpec, device: str, *, signature: str | None = None,
               against: Against | None = None) -> BucketKey:
    """`signature` (an analysis's minimized pattern and culprit) replaces the raw one (`raw_signature`).
    `against` (an `--against` case) puts "A vs B" in front of the detail: an A-vs-B bucket never
    shares a key with an eager-vs-compiled one."""
    detail = finding.triage if finding.kind in ERROR_KINDS else ""
    if against is not None:
        detail = f"{against.backend} vs {against.against}" + (f": {detail}" if detail else "")
    return BucketKey(
        kind=finding.kind.value,
        dtype=finding.dtype,
        device_type=device.split(":")[0],
        signature=signature if signature is not None else raw_signature(finding, spec),
        detail=detail,
    )


def severity_under(verdict, key: BucketKey) -> dict | None:
    """A case's severity reason (as stored) under the bucket key it is stored under: the key's
    culprit counts (`divfuzz.oracles.severity_policy.severity_of`). One rule for a campaign storing a case, an
    analysis re-keying it, and `merge` moving it."""
    reason = severity_of(verdict, culprit=key.signature)
    return reason.to_dict() if reason is not None else None
