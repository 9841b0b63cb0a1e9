"""The policy that turns a verdict (divfuzz.records.verdict) into a finding, a bucket kind, or not, and the
score a campaign's search climbs. Pure functions of frozen data; torch-free.
"""

from __future__ import annotations

import math

from divfuzz.records.outcomes import COMPILER_FAILURES, FINDING_KIND_ORDER, FindingKind, Status
from divfuzz.records.verdict import Finding, FloatComparison, PerfComparison, Verdict
from divfuzz.oracles.perf import is_slower

_FLOAT_KIND = {"bfloat16": FindingKind.BF16_ULP, "float16": FindingKind.FP16_ULP, "float32": FindingKind.FP32_ULP}


def finding_of(verdict: Verdict, *, strict: bool = False, output: str | None = None) -> Finding | None:
    """The most severe finding in a verdict, or None when it is only statistics; with `output`,
    the most severe finding on that output when it has one (the case's bucket follows the output
    its severity reason names: `divfuzz.oracles.severity_policy.case_finding`).

    Buckets open for: errors, crashes and hangs; a compiled output of another dtype or shape;
    any NaN/Inf placement change; a returned tensor of other strides (`stride-mismatch`, the least
    severe numeric kind); a shape sibling that compiled again (`recompile`); any integer flip
    but those of undefined casts (NaN/Inf/out-of-range floats cast to an integer); any bf16/fp16
    mismatch; fp32 mismatches where compiled is further from fp64 than eager beyond the
    same()-like margin, or wrong element by element (every fp32 bit difference when `strict`).
    A perf verdict (one with `perf` phases) opens `slower-fwd` when `divfuzz.oracles.perf.is_slower`
    calls its forward slower, else `slower-bwd` when it calls forward+backward slower.
    How much a finding matters is `divfuzz.oracles.severity_policy.severity_of`'s job, not this one's.
    """
    s = verdict.status
    if s in COMPILER_FAILURES:
        return Finding(COMPILER_FAILURES[s], "-", verdict.error_type or "-", "-", site=verdict.error_site)
    if s != Status.DIVERGED:
        return None
    if verdict.perf:
        return _perf_finding(verdict.perf)
    found: list[Finding] = []
    if getattr(verdict, "recompile", None):
        found.append(Finding(FindingKind.RECOMPILE, "-", "recompile", "-"))
    for o in verdict.outputs:
        if o.mismatch:
            found.append(Finding(FindingKind.TYPE_MISMATCH, "-", "mismatch", o.name))
            continue
        if o.int_cmp and o.int_cmp.flips > o.int_cmp.undefined_flips:  # undefined casts are not findings
            ic = o.int_cmp
            gross = ic.gross_flips > 0 or ic.unknown_flips > 0
            kind = FindingKind.INT_GROSS if gross else FindingKind.INT_BOUNDARY
            found.append(Finding(kind, ic.dtype, "gross" if gross else "boundary", o.name))
        if o.strides:
            found.append(Finding(FindingKind.STRIDE_MISMATCH, _dtype_of(o), "strides", o.name))
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
    on_output = [f for f in found if f.output == output]
    return min(on_output or found, key=lambda f: FINDING_KIND_ORDER.index(f.kind))


def _dtype_of(o) -> str:
    cmp = o.float_cmp or o.int_cmp
    return cmp.dtype if cmp is not None else "-"


def shows_finding(verdict: Verdict, kind: str, output: str, *, strict: bool = False) -> bool:
    """Whether `verdict` has a finding of `kind` on `output` (the most severe on it): a verdict of
    the same spec under another stage or switch shows the bucket's finding only there, however
    its other outputs differ."""
    own = finding_of(verdict, strict=strict, output=output)
    return own is not None and own.output == output and own.kind.value == kind


_PERF_KIND = {"fwd": FindingKind.SLOWER_FWD, "fwd+bwd": FindingKind.SLOWER_BWD}


def _perf_finding(phases: tuple[PerfComparison, ...]) -> Finding | None:
    """The forward first: a slower forward makes the step slower too, so `slower-bwd` means the
    forward is not slower and the step (forward + backward) is: the slowdown lives in the backward."""
    slower = {p.phase: p for p in phases if is_slower(p)}
    for phase in ("fwd", "fwd+bwd"):
        if phase in slower:
            return Finding(_PERF_KIND[phase], slower[phase].dtype, "slower", phase)
    return None


def _fp32_worth_a_bucket(fc: FloatComparison) -> bool:
    """fp32 differs all the time; it gets a bucket when compiled fails same()'s RMSE test or some
    elements are wrong one by one (grossly worse, an integer-valued result off, a new NaN/Inf), or
    when eager is grossly worse (the finding about eager, reported apart)."""
    return (fc.fp32_worse or fc.n_gross_worse > 0 or fc.n_int_wrong > 0 or fc.n_nonfinite_new > 0
            or fc.n_eager_gross_worse > 0)


TARGET_CAP = 24.0


def target_score(verdict: Verdict, finding: Finding | None) -> float:
    """What a campaign's `hypothesis.target` climbs.

    Zero unless the verdict is a finding (fp32 noise that `finding_of` dismisses must not steer the
    search); otherwise 1 plus the finding's size in whole octaves: log2 of the max ULP of its output,
    or of 8 x the max integer step, capped at `TARGET_CAP`. In whole octaves, a case is an
    improvement only when it doubles the divergence. (What bounds the optimiser's time on one graph
    is the campaign's epochs, `divfuzz.fuzzer.campaign.loop.EPOCH_CASES`, not this score.)
    """
    if finding is None:
        return 0.0
    if verdict.perf:  # a perf finding: eighth-octaves of its slowdown (each step about 9 % slower)
        ratio = max(p.ratio for p in verdict.perf if p.phase == finding.output)
        return min(TARGET_CAP, 1.0 + math.floor(8 * math.log2(max(ratio, 1.0))))
    size = 1.0
    for o in verdict.outputs:
        if o.name != finding.output:
            continue
        if o.int_cmp and o.int_cmp.flips:
            size = max(size, 8.0 * o.int_cmp.max_step)
        if o.float_cmp and o.float_cmp.n_diff:
            size = max(size, float(o.float_cmp.max_ulp))
    return min(TARGET_CAP, 1.0 + math.floor(math.log2(size)))

