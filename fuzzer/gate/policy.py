"""The gate's policy: one spec's observed verdict summary against its baseline entry.

Judged by severity (the severity policy's judgement, `divfuzz.oracles.severity_policy`, which every baseline
entry records; `divfuzz.fuzzer.gate.baseline` refuses an entry without one). A spec FAILs when its verdict
is more severe than the baseline's by the one severity order (clean < noise < by-design < suspect
< bug), or shows a new kind of failure: a new or different error status, more NaN/Inf mismatches,
integer flips far from a rounding boundary where there were none, a `bug` rule the baseline did
not have. A bound that moves (max ULP, differing fraction, flips) while the severity stays the same
passes and is reported as moved (`moved_bounds`): reduction order, autotuning and the CPU model
within one capability move bounds (the H100's `pointwise-reduction-float32-bwd`: max 16 -> 120
fp32 ULP under load; 0.8% -> 7% differing elements from one AVX512 EPYC to another, at most one
ULP). Raw bounds never fail a spec.

Each problem starts with the id of the rule that failed it (`severity-worse: ...`), so that JSON,
JUnit and markdown say which rule failed a spec. Bounds that tightened are improvements.
"""

from __future__ import annotations

import math
from typing import Any

from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import NO_OUTPUT_STATUSES, Status
from divfuzz.records.severity import Severity

# On CUDA, Inductor benchmarks a reduction's candidate kernel configs when it first runs and keeps
# the fastest; configs reduce in different orders, so which one wins (on timing, under whatever
# else loads the GPU, then cached on disk) moves the bits. Seen on the H100 (torch 2.11): the seed
# LayerNorm spec replayed 12/262144 differing bf16 elements (compiled-closer, noise) on a fresh
# host, 5 times, and 20/262144 (fp64 triage "same", suspect) after the GPU tests had run there.
# The gate must be a function of the compiler, not of the host's load: on CUDA it compiles in
# Inductor's deterministic mode, which skips exactly those benchmarks. Every compared compile
# (campaigns too) already keeps one config per reduction, the one that mode picks
# (`divfuzz.records.config.REPRODUCIBLE`); the gate's mode also skips the rest of its timed
# picks (mix-order split sizes, padding), as its baselines were written with it.
DETERMINISTIC_DEVICE_TYPES = ("cuda",)


def gate_compile_config(config: CompileConfig, device_type: str) -> CompileConfig:
    """The config the gate replays with: `config`, plus Inductor's `deterministic` switch on a
    device that autotunes numerics-changing kernel configs, unless the user set that switch."""
    if device_type not in DETERMINISTIC_DEVICE_TYPES or "deterministic" in dict(config.inductor):
        return config
    return config.with_inductor(deterministic=True)


# A bound is listed under moved_bounds when it grows by more than this fraction (`--margin`).
DEFAULT_MARGIN = 0.1

# Rule ids, as they lead each problem.
NEW_ERROR = "new-error"
NAN_INF_PLACEMENT = "nan-inf-placement"
INT_GROSS_NEW = "int-gross-new"
SEVERITY_WORSE = "severity-worse"
NEW_BUG_KIND = "new-bug-kind"
NOW_DIFFERS = "now-differs"  # an output of a spec the baseline expects clean differs (with severity-worse)
PERF_SLOWER = "perf-slower"  # --oracle perf: compiled slower than eager, rated a bug
RULES = (NEW_ERROR, NAN_INF_PLACEMENT, INT_GROSS_NEW, SEVERITY_WORSE, NEW_BUG_KIND, NOW_DIFFERS, PERF_SLOWER)


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


def describe_severity(sev: dict[str, Any] | None) -> str:
    """`suspect (closer-many-ulps on v11)`, or `clean` for no severity."""
    if not sev:
        return "clean"
    return f"{sev['severity']} ({sev['rule']} on {sev['output']})"


def _rank(sev: dict[str, Any] | None) -> int:
    """0 for a bug ... 3 for noise, 4 for clean: the one severity order, with clean below noise."""
    return Severity(sev["severity"]).rank if sev else len(Severity)


def compare_with_baseline(
    observed: dict[str, Any], expected: dict[str, Any] | None, *, detail: str | None = None
) -> tuple[list[str], list[str]]:
    """(problems, improvements) of one spec's observed summary against its baseline entry (None:
    the spec is expected clean).

    A pure function. Problems fail the gate, each led by its rule id; improvements are reported
    (a known divergence gone or smaller, an error gone, a severity lowered). A moved bound is not
    a problem; `moved_bounds` lists those. `detail` is the severity rule's sentence for the
    observed verdict, quoted when the severity rules fail it.
    """
    problems: list[str] = []
    improvements: list[str] = []
    exp = expected if expected is not None else {"status": Status.OK.value, "error_type": None, "outputs": {}, "severity": None}
    obs_status, exp_status = observed["status"], exp["status"]
    errors = {s.value for s in NO_OUTPUT_STATUSES} | {Status.NONDETERMINISTIC.value}
    if obs_status in errors:
        if (obs_status, observed.get("error_type")) != (exp_status, exp.get("error_type")):
            problems.append(f"{NEW_ERROR}: {describe_summary(observed)} (baseline: {describe_summary(exp)})")
        return problems, improvements
    if exp_status in errors:
        improvements.append(f"the baseline's {describe_summary(exp)} is gone")
    problems += _severity_problems(observed.get("severity"), exp.get("severity"), improvements, detail)
    for name, o in observed["outputs"].items():
        e = exp["outputs"].get(name)
        if e is None or e["kind"] != o["kind"]:
            if not exp["outputs"]:
                problems.append(f"{NOW_DIFFERS}: {name}: {_describe(o)}; the baseline expects it equal to eager")
            _new_kind_problems(name, o, None, problems)
            continue
        _new_kind_problems(name, o, e, problems)
        if o["kind"] == "float" and o["nan_inf_mismatch"] < e["nan_inf_mismatch"]:
            improvements.append(f"{name}: NaN/Inf mismatches {e['nan_inf_mismatch']} -> {o['nan_inf_mismatch']}")
        for label, key, _ in _BOUNDS[o["kind"]]:
            if o[key] < e[key]:
                improvements.append(f"{name}: {label} {_fmt(e[key])} -> {_fmt(o[key])}")
    for name, e in exp["outputs"].items():
        if name not in observed["outputs"]:
            improvements.append(f"{name}: now equal to eager (baseline: {_describe(e)})")
    return problems, improvements


_BOUNDS = {
    "float": (("max ULP", "max_ulp", True), ("differing fraction", "diff_fraction", False)),
    "int": (("integer flips", "flips", True), ("max step", "max_step", True)),
}


def _new_kind_problems(name: str, o: dict[str, Any], e: dict[str, Any] | None, problems: list[str]) -> None:
    """New kinds of failure on one output, whatever the rule set: NaN/Inf placement that moved
    further, integer flips far from a rounding boundary where the baseline has none."""
    if o["kind"] == "float":
        before = e["nan_inf_mismatch"] if e else 0
        if o["nan_inf_mismatch"] > before:
            problems.append(f"{NAN_INF_PLACEMENT}: {name}: NaN/Inf placement changed: {o['nan_inf_mismatch']} mismatches (baseline {before})")
    elif o["gross_flips"] > 0 and (e or {}).get("gross_flips", 0) == 0:
        problems.append(f"{INT_GROSS_NEW}: {name}: {o['gross_flips']} flips far from a rounding boundary (baseline: none)")


def _severity_problems(obs: dict[str, Any] | None, exp: dict[str, Any] | None, improvements: list[str],
                       detail: str | None) -> list[str]:
    tail = f": {detail}" if detail else ""
    if _rank(obs) < _rank(exp):
        return [f"{SEVERITY_WORSE}: the verdict is now {describe_severity(obs)}, the baseline's is {describe_severity(exp)}"
                + tail]
    if obs and exp and obs["severity"] == Severity.BUG.value == exp["severity"] and obs["rule"] != exp["rule"]:
        return [f"{NEW_BUG_KIND}: a new kind of bug, {describe_severity(obs)}; the baseline's bug is {exp['rule']}"
                + tail]
    if _rank(obs) > _rank(exp):
        improvements.append(f"severity {describe_severity(exp)} -> {describe_severity(obs)}")
    return []


def moved_bounds(observed: dict[str, Any], expected: dict[str, Any] | None, *, margin: float = DEFAULT_MARGIN) -> list[str]:
    """Bounds that grew by more than `margin` (relative) at the baseline's severity: reported, never
    judged. Also an output that now differs where the baseline has other differing outputs. At
    another severity nothing is listed: the severity rules report that change themselves."""
    if not expected or observed["status"] != Status.DIVERGED.value:
        return []
    if _rank(observed.get("severity")) != _rank(expected.get("severity")):
        return []
    moved = []
    for name, o in observed["outputs"].items():
        e = expected["outputs"].get(name)
        if e is None or e["kind"] != o["kind"]:
            moved.append(f"{name}: now differs ({_describe(o)}) at the baseline's severity")
            continue
        for label, key, integer in _BOUNDS[o["kind"]]:
            if o[key] > _allowed(e[key], margin, integer=integer):
                moved.append(f"{name}: {label} {_fmt(e[key])} -> {_fmt(o[key])} at the same severity")
    return moved


def problem_rule(problem: str) -> str:
    """The rule id a problem line starts with (`gate` for the gate's own: a budget, a changed spec)."""
    head = problem.split(":", 1)[0]
    return head if head in RULES else "gate"


def _fmt(v: float) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
