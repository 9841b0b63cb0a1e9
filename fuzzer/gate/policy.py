"""The gate's policy: one spec's observed verdict summary against its baseline entry.

A clean spec must stay bitwise equal; a known divergence may not exceed its bounds (max ULP,
differing fraction, NaN/Inf placement, integer flips and step) by more than a relative margin;
a new error or a changed error fails. Bounds that tightened are reported as improvements.
"""

from __future__ import annotations

import math
from typing import Any

from records.outcomes import NO_OUTPUT_STATUSES, Status

DEFAULT_MARGIN = 0.1


def _allowed(bound: float, margin: float, *, integer: bool) -> float:
    limit = bound * (1.0 + margin)
    return math.floor(limit + 1e-9) if integer else limit


def _describe(o: dict[str, Any]) -> str:
    if o["kind"] == "float":
        s = f"{o['n_diff']}/{o['numel']} {o['dtype']} elements differ, max {o['max_ulp']} ULP, fp64 triage {o['triage']}"
        return s + (f", {o['nan_inf_mismatch']} NaN/Inf mismatches" if o["nan_inf_mismatch"] else "")
    return f"{o['flips']}/{o['numel']} {o['dtype']} flips, max step {o['max_step']}, {o['gross_flips']} far from a boundary"


def describe_summary(summary: dict[str, Any]) -> str:
    """One line for a verdict summary: what a person reads in JUnit and markdown."""
    status = summary["status"]
    if status in {s.value for s in NO_OUTPUT_STATUSES} or status == Status.NONDETERMINISTIC.value:
        return f"{status}" + (f" ({summary['error_type']})" if summary.get("error_type") else "")
    if not summary["outputs"]:
        return "clean (bitwise equal to eager)"
    return "; ".join(f"{name}: {_describe(o)}" for name, o in summary["outputs"].items())


def compare_with_baseline(
    observed: dict[str, Any], expected: dict[str, Any] | None, *, margin: float
) -> tuple[list[str], list[str]]:
    """(problems, improvements) of one spec's observed summary against its baseline entry.

    A pure function. Problems fail the gate: a clean output that now differs, a bound exceeded
    by more than `margin` (relative), more NaN/Inf mismatches, new gross integer flips, a new or
    different error. Improvements are reported: a known divergence gone or smaller, an error gone.
    """
    problems: list[str] = []
    improvements: list[str] = []
    exp = expected if expected is not None else {"status": Status.OK.value, "error_type": None, "outputs": {}}
    obs_status, exp_status = observed["status"], exp["status"]
    errors = {s.value for s in NO_OUTPUT_STATUSES} | {Status.NONDETERMINISTIC.value}
    if obs_status in errors:
        if (obs_status, observed.get("error_type")) != (exp_status, exp.get("error_type")):
            problems.append(f"new error: {describe_summary(observed)} (baseline: {describe_summary(exp)})")
        return problems, improvements
    if exp_status in errors:
        improvements.append(f"the baseline's {describe_summary(exp)} is gone")
    for name, o in observed["outputs"].items():
        e = exp["outputs"].get(name)
        if e is None or e["kind"] != o["kind"]:
            problems.append(f"{name}: {_describe(o)}; the baseline expects it equal to eager")
            continue
        if o["kind"] == "float":
            checks = (("max ULP", "max_ulp", True), ("differing fraction", "diff_fraction", False))
            if o["nan_inf_mismatch"] > e["nan_inf_mismatch"]:
                problems.append(
                    f"{name}: NaN/Inf placement changed: {o['nan_inf_mismatch']} mismatches (baseline {e['nan_inf_mismatch']})"
                )
            elif o["nan_inf_mismatch"] < e["nan_inf_mismatch"]:
                improvements.append(f"{name}: NaN/Inf mismatches {e['nan_inf_mismatch']} -> {o['nan_inf_mismatch']}")
        else:
            checks = (("integer flips", "flips", True), ("max step", "max_step", True))
            if o["gross_flips"] > 0 and e.get("gross_flips", 0) == 0:
                problems.append(f"{name}: {o['gross_flips']} flips far from a rounding boundary (baseline: none)")
        for label, key, integer in checks:
            allowed = _allowed(e[key], margin, integer=integer)
            if o[key] > allowed:
                problems.append(
                    f"{name}: {label} {_fmt(o[key])} exceeds the baseline's {_fmt(e[key])} "
                    f"(allowed {_fmt(allowed)} with margin {margin:g})"
                )
            elif o[key] < e[key]:
                improvements.append(f"{name}: {label} {_fmt(e[key])} -> {_fmt(o[key])}")
    for name, e in exp["outputs"].items():
        if name not in observed["outputs"]:
            improvements.append(f"{name}: now equal to eager (baseline: {_describe(e)})")
    return problems, improvements


def _fmt(v: float) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
