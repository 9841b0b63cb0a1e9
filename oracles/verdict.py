"""A case's verdict, and the policy that turns a verdict into a finding (a bucket kind) or not.

`Verdict` is frozen data with a JSON form; `finding_of` is a pure function of it. Nothing
downstream parses error text: the exception type is carried as data.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from oracles.compare import FloatComparison, IntComparison


class Status(str, enum.Enum):
    OK = "ok"  # ran on both sides; every output bitwise equal
    DIVERGED = "diverged"  # ran on both sides; some output differs
    NONDETERMINISTIC = "nondeterministic"  # two eager runs differ bitwise: no comparison is meaningful
    EAGER_ERROR = "eager-error"  # the graph fails eagerly: a divfuzz generator bug, counted
    COMPILE_ERROR = "compile-error"  # torch.compile raised while compiling
    RUNTIME_ERROR = "runtime-error"  # the compiled callable raised while running
    CRASH = "crash"  # the worker process died (segfault, abort, CUDA fault, killed)
    HANG = "hang"  # the case exceeded its timeout


class FindingKind(str, enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    COMPILE_ERROR = "compile-error"
    RUNTIME_ERROR = "runtime-error"
    NAN_INF = "nan-inf"
    INT_GROSS = "int-gross"
    INT_BOUNDARY = "int-boundary"
    BF16_ULP = "bf16-ulp"
    FP16_ULP = "fp16-ulp"
    FP32_ULP = "fp32-ulp"


# Most severe first: a case lands in the bucket of its most severe finding.
SEVERITY = tuple(FindingKind)
_FLOAT_KIND = {"bfloat16": FindingKind.BF16_ULP, "float16": FindingKind.FP16_ULP, "float32": FindingKind.FP32_ULP}


@dataclass(frozen=True)
class OutputVerdict:
    name: str  # the output's node name, or "grad:<input>" for a gradient
    float_cmp: FloatComparison | None = None
    int_cmp: IntComparison | None = None

    @property
    def differs(self) -> bool:
        if self.float_cmp is not None:
            return self.float_cmp.n_diff > 0 or self.float_cmp.nan_inf_mismatch > 0
        return self.int_cmp is not None and self.int_cmp.flips > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "float": self.float_cmp.to_dict() if self.float_cmp else None,
            "int": self.int_cmp.to_dict() if self.int_cmp else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutputVerdict:
        return cls(
            name=d["name"],
            float_cmp=FloatComparison.from_dict(d["float"]) if d.get("float") else None,
            int_cmp=IntComparison.from_dict(d["int"]) if d.get("int") else None,
        )


@dataclass(frozen=True)
class Verdict:
    status: Status
    outputs: tuple[OutputVerdict, ...] = ()
    error_type: str | None = None  # e.g. "BackendCompilerFailed(PlantedCompileError)"
    error_message: str | None = None
    timings: tuple[tuple[str, float], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "outputs": [o.to_dict() for o in self.outputs],
            "error_type": self.error_type,
            "error_message": self.error_message,
            "timings": dict(self.timings),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            status=Status(d["status"]),
            outputs=tuple(OutputVerdict.from_dict(o) for o in d.get("outputs", ())),
            error_type=d.get("error_type"),
            error_message=d.get("error_message"),
            timings=tuple(sorted((d.get("timings") or {}).items())),
        )


@dataclass(frozen=True)
class Finding:
    """What a verdict is worth a bucket for: its kind, the dtype it shows in, and its triage."""

    kind: FindingKind
    dtype: str  # the output dtype, or "-" for errors
    triage: str  # fp64 triage for float kinds, "boundary"/"gross" for ints, the error type for errors
    output: str  # which output shows it most


def finding_of(verdict: Verdict, *, strict: bool = False) -> Finding | None:
    """The most severe finding in a verdict, or None when it is only statistics.

    Buckets open for: errors, crashes and hangs; any NaN/Inf placement change; any integer flip
    but those of undefined casts (NaN/Inf/out-of-range floats cast to an integer); any bf16/fp16
    mismatch; fp32 mismatches where compiled is further from fp64 than eager beyond the
    same()-like margin, or wrong element by element (every fp32 bit difference when `strict`).
    How much a finding matters is `oracles.severity.severity_of`'s job, not this one's.
    """
    s = verdict.status
    errors = {
        Status.CRASH: FindingKind.CRASH,
        Status.HANG: FindingKind.HANG,
        Status.COMPILE_ERROR: FindingKind.COMPILE_ERROR,
        Status.RUNTIME_ERROR: FindingKind.RUNTIME_ERROR,
    }
    if s in errors:
        return Finding(errors[s], "-", verdict.error_type or "-", "-")
    if s != Status.DIVERGED:
        return None
    found: list[Finding] = []
    for o in verdict.outputs:
        if o.int_cmp and o.int_cmp.flips > o.int_cmp.undefined_flips:  # undefined casts are not findings
            ic = o.int_cmp
            gross = ic.gross_flips > 0 or ic.unknown_flips > 0
            kind = FindingKind.INT_GROSS if gross else FindingKind.INT_BOUNDARY
            found.append(Finding(kind, ic.dtype, "gross" if gross else "boundary", o.name))
        fc = o.float_cmp
        if fc is None:
            continue
        if fc.nan_inf_mismatch:
            found.append(Finding(FindingKind.NAN_INF, fc.dtype, fc.triage, o.name))
        if fc.n_diff:
            kind = _FLOAT_KIND.get(fc.dtype)
            if kind is None:
                continue
            if kind is FindingKind.FP32_ULP and not strict and not _fp32_worth_a_bucket(fc):
                continue
            found.append(Finding(kind, fc.dtype, fc.triage, o.name))
    if not found:
        return None
    return min(found, key=lambda f: SEVERITY.index(f.kind))


def _fp32_worth_a_bucket(fc: FloatComparison) -> bool:
    """fp32 differs all the time; it gets a bucket when compiled fails same()'s RMSE test or some
    elements are wrong one by one (grossly worse, an integer-valued result off, a new NaN/Inf)."""
    return fc.fp32_worse or fc.n_gross_worse > 0 or fc.n_int_wrong > 0 or fc.n_nonfinite_new > 0


TARGET_CAP = 24.0


def target_score(verdict: Verdict, finding: Finding | None) -> float:
    """What a campaign's `hypothesis.target` climbs.

    Zero unless the verdict is a finding (fp32 noise that `finding_of` dismisses must not steer the
    search); otherwise 1 plus the finding's size in whole octaves: log2 of the max ULP of its output,
    or of 8 x the max integer step, capped at `TARGET_CAP`. In whole octaves, a case is an
    improvement only when it doubles the divergence. (What bounds the optimiser's time on one graph
    is the campaign's epochs, `fuzzer.campaign.EPOCH_CASES`, not this score.)
    """
    if finding is None:
        return 0.0
    size = 1.0
    for o in verdict.outputs:
        if o.name != finding.output:
            continue
        if o.int_cmp and o.int_cmp.flips:
            size = max(size, 8.0 * o.int_cmp.max_step)
        if o.float_cmp and o.float_cmp.n_diff:
            size = max(size, float(o.float_cmp.max_ulp))
    return min(TARGET_CAP, 1.0 + math.floor(math.log2(size)))
