"""Bucket keys: one small frozen value per root cause, with a readable `str`.

A key is (kind, output dtype, device type, op signature, detail). The detail is the exception
type for error kinds and empty otherwise; the signature is the graph's sorted set of ops (and its autocast and
backward modes) until the minimizer supplies the minimized op pattern and its culprit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from generators.spec import GraphSpec
from oracles.verdict import Finding, FindingKind

_ERROR_KINDS = {FindingKind.CRASH, FindingKind.HANG, FindingKind.COMPILE_ERROR, FindingKind.RUNTIME_ERROR}


@dataclass(frozen=True)
class BucketKey:
    kind: str
    dtype: str
    device_type: str
    signature: str
    detail: str = ""

    def __str__(self) -> str:
        detail = f" {self.detail}" if self.detail else ""
        return f"{self.kind}{detail} · {self.dtype} · {self.device_type} · {self.signature}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BucketKey:
        return cls(**d)


def graph_signature(spec: GraphSpec) -> str:
    """The sorted set of op names, plus autocast and backward when on: graphs made of the same ops
    in the same mode share it (and so share one minimization during a campaign)."""
    ops = "+".join(sorted(set(spec.op_names))) or "(empty)"
    modes = [f"autocast {spec.autocast}"] * bool(spec.autocast) + ["backward"] * spec.backward
    return f"{ops} ({', '.join(modes)})" if modes else ops


def bucket_key(finding: Finding, spec: GraphSpec, device: str, *, signature: str | None = None) -> BucketKey:
    detail = finding.triage if finding.kind in _ERROR_KINDS else ""
    return BucketKey(
        kind=finding.kind.value,
        dtype=finding.dtype,
        device_type=device.split(":")[0],
        signature=signature if signature is not None else graph_signature(spec),
        detail=detail,
    )
