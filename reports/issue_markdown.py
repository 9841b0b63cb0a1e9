"""`issue.md`: a bug bucket as a filled-in PyTorch "torch.compile Bug Report" (the fields of
pytorch/pytorch's `.github/ISSUE_TEMPLATE/pt2-bug-report.yml`: "Describe the bug", "Error logs",
"Versions"), ready to paste: a title that says what differs (ops, dtype, device, the numbers),
the description, `issue.py` inline, the culprit and the one switch that removes it, the fp64
verdict in the words the template asks of fuzzer reports (`torch._dynamo.utils.same` with an
fp64 reference), the versions, and the upstream issues divfuzz's known-bug list matches.

Pure text from data (the script, the verdict, the culprit as a dict, the versions, the matches);
nothing is run here. Text from a store (error messages, culprit words) goes into code fences or
plain prose, never into code; an Inductor switch is printed only when it is one of divfuzz's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.severity_policy import same_rejects
from divfuzz.records.config import INDUCTOR_SWITCHES

if TYPE_CHECKING:
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict
    from divfuzz.reports.issue_script import IssueScript

NO_MATCH = "no matching upstream issue found in divfuzz's list"
# The template's own link, shown so that a reader can check the fields.
TEMPLATE = "https://github.com/pytorch/pytorch/blob/main/.github/ISSUE_TEMPLATE/pt2-bug-report.yml"


def removing_switch(culprit: dict | None) -> str | None:
    """`torch._inductor.config.KEY = VALUE` for the first Inductor switch the culprit's probes show
    removes the finding (outcome "ok"), or None. Only keys of `INDUCTOR_SWITCHES`, only bool or
    int values."""
    if not isinstance(culprit, dict):
        return None
    fixes = [f for f in culprit.get("fixes") or () if isinstance(f, str)]
    for probe in culprit.get("probes") or ():
        if not (isinstance(probe, (list, tuple)) and len(probe) == 2 and probe[1] == "ok" and isinstance(probe[0], str)):
            continue
        key, _, value = probe[0].partition("=")
        if key not in INDUCTOR_SWITCHES or key not in fixes:
            continue
        if value in ("True", "False") or value.lstrip("-").isdigit():
            return f"torch._inductor.config.{key} = {value}"
    return None


@dataclass(frozen=True)
class Subject:
    """What a finding is about, as issue.md names it: its ops in order, its input dtypes, the
    autocast dtype, whether a backward pass runs (from a spec, or from a user module's graph)."""

    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    autocast: str | None = None
    backward: bool = False

    @classmethod
    def of(cls, spec: "GraphSpec | Subject") -> "Subject":
        if isinstance(spec, Subject):
            return spec
        return cls(spec.op_names, tuple(t.dtype for t in spec.inputs), spec.autocast, spec.backward)


def _op_words(spec: "GraphSpec | Subject") -> str:
    return " -> ".join(dict.fromkeys(Subject.of(spec).ops)) or "(no op)"


def _input_dtypes(spec: "GraphSpec | Subject") -> str:
    subject = Subject.of(spec)
    return "/".join(dict.fromkeys(subject.dtypes)) + (f" under {subject.autocast} autocast" if subject.autocast else "")


def title_of(spec: "GraphSpec | Subject", *, device: str, reason: "SeverityReason", verdict: "Verdict | None") -> str:
    """What differs, in one line: the ops, the dtype, the device and the numbers."""
    where = f"`{_op_words(spec)}` on {_input_dtypes(spec)} ({device.split(':')[0].upper()})"
    out = next((o for o in (verdict.outputs if verdict is not None else ()) if o.name == reason.output), None)
    fc, ic = (out.float_cmp, out.int_cmp) if out is not None else (None, None)
    if reason.rule in ("compile-error", "runtime-error", "crash", "hang"):
        what = {"compile-error": "fails to compile", "runtime-error": "fails at run time", "crash": "crashes the process",
                "hang": "hangs"}[reason.rule]
        err = f": {verdict.error_type}" if verdict is not None and verdict.error_type else ""
        return f"torch.compile {what} for {where}{err}"
    if reason.rule == "output-type-mismatch":
        return f"torch.compile changes an output's type for {where}: {out.mismatch if out else 'dtype or shape differs'}"
    if reason.rule == "nan-inf-new" and fc:
        return f"torch.compile gives NaN/Inf for {where} where eager and fp64 are finite ({fc.n_nonfinite_new} of {fc.numel} {fc.dtype} elements)"
    if reason.rule == "int-valued-wrong" and fc:
        return (f"torch.compile gives a wrong integer-valued result for {where}: {fc.n_int_wrong} of {fc.numel} {fc.dtype} elements "
                f"differ from eager and fp64 (max difference {fc.max_abs_diff:g})")
    if reason.rule == "float-gross-worse" and fc:
        return (f"torch.compile is far less accurate than eager for {where}: {fc.n_gross_worse} of {fc.numel} {fc.dtype} elements "
                f"up to {fc.max_excess_ulps:.3g} ULPs further from fp64 (eager's worst error {fc.eager_max_err_ulps:.3g} ULPs)")
    if reason.rule == "many-ulps-worse" and fc:
        return (f"torch.compile is less accurate than eager for {where}: {fc.n_diff} of {fc.numel} {fc.dtype} elements differ "
                f"by up to {fc.max_ulp} ULPs, compiled further from fp64")
    if reason.rule == "rmse-worse" and fc:
        return (f"torch.compile is less accurate than eager for {where}: RMSE vs fp64 {fc.rmse_compiled:.3g} against eager's "
                f"{fc.rmse_eager:.3g} ({fc.n_diff} of {fc.numel} {fc.dtype} elements differ)")
    if reason.rule == "int-gross" and ic:
        return (f"torch.compile gives a different {ic.dtype} result for {where}: {ic.flips} of {ic.numel} elements differ "
                f"(max step {ic.max_step}), far from any rounding boundary")
    return f"torch.compile differs from eager for {where}: {reason.detail}"


def fp64_verdict(reason: "SeverityReason", verdict: "Verdict | None") -> str:
    """The fp64 verdict in maintainers' words: what `torch._dynamo.utils.same(eager, compiled,
    fp64_ref=ref)` looks at (each side's RMSE against the fp64 reference), then per element."""
    if reason.rule in ("compile-error", "runtime-error", "crash", "hang"):
        return "Not a numerical comparison: eager runs, the compiled model does not."
    if reason.rule == "output-type-mismatch":
        return "Not a numerical comparison: the compiled output has another dtype or shape than eager's, before any value is compared."
    out = next((o for o in (verdict.outputs if verdict is not None else ()) if o.name == reason.output), None)
    if out is not None and out.float_cmp is not None:
        fc = out.float_cmp
        same = ("`same()` with this fp64 reference would reject it" if same_rejects(fc)
                else "`same()`'s RMSE test alone would accept it, which is why the script checks "
                + ("the summed error over the differing elements" if reason.rule == "many-ulps-worse" else "per element"))
        ratio = f" ({fc.rmse_compiled / fc.rmse_eager:.3g}x eager's)" if fc.rmse_eager else ""
        line = (f"Against a float64 reference, as `torch._dynamo.utils.same(eager, compiled, fp64_ref=ref)` judges: "
                f"RMSE vs fp64 is {fc.rmse_eager:.3g} for eager and {fc.rmse_compiled:.3g} for compiled{ratio}; {same}. "
                f"Per element: {reason.detail}.")
        return line
    if out is not None and out.int_cmp is not None:
        ic = out.int_cmp
        return (f"Integers are compared exactly (as `torch._dynamo.utils.same` compares them), with the integer the same "
                f"graph computes in float64 as the referee: "
                f"of {ic.flips} differing elements, eager matches fp64 on {ic.eager_correct}, compiled on {ic.compiled_correct}, "
                f"neither on {ic.neither_correct}. {reason.detail}.")
    return reason.detail


def _versions_lines(versions: dict | None, device: str) -> list[str]:
    v = dict(versions or {})
    lines = [f"- torch: {v.get('torch', 'unknown')}", f"- Triton: {v.get('triton') or 'not installed'}",
             f"- CUDA: {v.get('cuda') or 'none (CPU build)'}"]
    if device.startswith("cuda"):
        cap = v.get("gpu_capability")
        lines.append(f"- GPU: {v.get('gpu', 'unknown')}" + (f" (compute capability {cap})" if cap else ""))
    else:
        lines.append(f"- CPU capability: {v.get('cpu_capability', 'unknown')}")
    if v.get("python"):
        lines.append(f"- Python: {v['python']}")
    return lines


def _fence(text: str, lang: str = "") -> list[str]:
    """`text` in a code fence longer than any backtick run inside it."""
    ticks = "`" * max(3, _longest_backticks(text) + 1)
    return [ticks + lang, text.rstrip("\n"), ticks]


def _longest_backticks(text: str) -> int:
    best = n = 0
    for ch in text:
        n = n + 1 if ch == "`" else 0
        best = max(best, n)
    return best


def render_issue_markdown(spec: "GraphSpec | Subject", script: "IssueScript", *, device: str, reason: "SeverityReason",
                          verdict: "Verdict | None", culprit: dict | None = None, versions: dict | None = None,
                          known: Iterable[str] = (), config_desc: str = "", error_log: str | None = None) -> str:
    """issue.md's text. `known`: the upstream matches as lines ("pytorch#N (state): title"), best
    first; `error_log`: what running issue.py printed, when it was run (else the verdict's numbers)."""
    title = title_of(spec, device=device, reason=reason, verdict=verdict)
    switch = removing_switch(culprit)
    summary = culprit.get("summary") if isinstance(culprit, dict) else None
    lines = [
        f"# {title}",
        "",
        f"<!-- PyTorch's \"torch.compile Bug Report\" template ({TEMPLATE}); labels: oncall: pt2, topic: fuzzer -->",
        "",
        "### 🐛 Describe the bug",
        "",
        f"`torch.compile` ({config_desc or 'inductor'}, {device}) gives another result than eager for "
        f"`{_op_words(spec)}` on {_input_dtypes(spec)} inputs{' with a backward pass' if Subject.of(spec).backward else ''}. "
        f"The script below fails while this holds: {script.check}.",
        "",
        f"**fp64 verdict.** {fp64_verdict(reason, verdict)}",
        "",
        "**Culprit.** " + (f"{summary}." if summary else "not attributed (the bucket was not analysed).")
        + (f" The one switch that removes it: `{switch}`." if switch else " No single Inductor switch removes it."),
        "",
        f"Reproducer (plain torch; exits 1 while the bug is there; inputs {script.inputs_how}"
        + ("; the input file is attached beside it" if script.files else "") + "):",
        "",
        *_fence(script.text, "python"),
        "",
        "Found by fuzzing torch.compile against eager with a float64 referee: default tolerances are not used; "
        "each side is compared with the float64 result, and no indices of max/min are compared.",
        "",
        "### Error logs",
        "",
        *_fence(error_log if error_log is not None else _verdict_log(reason, verdict)),
        "",
        "### Versions",
        "",
        *_versions_lines(versions, device),
        "",
        "### Matching upstream issues",
        "",
        *([f"- {k}" for k in known] or [NO_MATCH]),
    ]
    return "\n".join(lines) + "\n"


def _verdict_log(reason: "SeverityReason", verdict: "Verdict | None") -> str:
    """The measured numbers, where issue.py was not run: the error, or each output's comparison."""
    if verdict is None:
        return reason.detail
    if verdict.error_type:
        return f"{verdict.error_type}: {verdict.error_message or ''}".strip()
    lines = []
    for o in verdict.outputs:
        if o.mismatch:
            lines.append(f"{o.name}: {o.mismatch}")
        elif o.float_cmp is not None and (o.float_cmp.n_diff or o.float_cmp.nan_inf_mismatch):
            fc = o.float_cmp
            lines.append(f"{o.name}: {fc.dtype} {fc.n_diff}/{fc.numel} elements differ from eager, max {fc.max_ulp} ULP, "
                         f"max |difference| {fc.max_abs_diff:g}; NaN/Inf placement differs at {fc.nan_inf_mismatch}")
        elif o.int_cmp is not None and o.int_cmp.flips:
            ic = o.int_cmp
            lines.append(f"{o.name}: {ic.dtype} {ic.flips}/{ic.numel} elements differ from eager, max step {ic.max_step}")
    lines.append(f"{reason.severity.value} ({reason.rule}): {reason.detail}")
    return "\n".join(lines)
