"""`issue.md`: a bug bucket as a filled-in PyTorch "torch.compile Bug Report" (the fields of
pytorch/pytorch's `.github/ISSUE_TEMPLATE/pt2-bug-report.yml`: "Describe the bug", "Error logs",
"Versions"), ready to paste: a title that says what differs (ops, dtype, device, the numbers),
the description, `issue.py` inline, the culprit and the one switch that removes it, the fp64
verdict in the words the template asks of fuzzer reports (`torch._dynamo.utils.same` with an
fp64 reference; none for a NaN/Inf finding, whose RMSE over the finite elements says nothing),
what the script needs beyond torch's defaults (the fresh-process check, `DefaultsCheck`), the
ablation the template asks for ("the backend, mode or settings that trigger the bug": which rungs
of the stage ladder and which Inductor probes show the finding, read from the analysis that ran,
`ablation_lines`), the versions, the upstream issues divfuzz's known-bug list matches, and last
what `divfuzz recheck` found under other torch builds (`recheck_section`, which that command
rewrites in place: it is always the file's last section, from `RECHECK_HEADING` on).

Pure text from data (the script, the verdict, the culprit as a dict, the versions, the matches);
nothing is run here. Text from a store (error messages, culprit words) goes into code fences or
plain prose, never into code; an Inductor switch is printed only when it is one of divfuzz's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.severity_policy import same_rejects
from divfuzz.records.config import INDUCTOR_SWITCHES
from divfuzz.records.backends import LADDER_RUNGS  # the stage ladder's rungs before the case's own compile, in order
from divfuzz.reports.issue_check import DefaultsCheck, ScriptOutcome

if TYPE_CHECKING:
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict
    from divfuzz.reports.issue_script import IssueScript

NO_MATCH = "no matching upstream issue found in divfuzz's list"
# The last section of issue.md: what `divfuzz recheck` found under other torch builds.
RECHECK_HEADING = "### Other torch builds"
# Rules about where NaN/Inf are: no RMSE (over the finite elements) or fp64 triage describes them.
NAN_INF_RULES = frozenset({"nan-inf-new", "nan-inf-wrong", "nan-inf-moved", "nan-inf-ill-conditioned"})
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


# An outcome label as the attribution records it ("ok", a finding kind, an error status, "another fp16-ulp").
_OUTCOME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,40}( [a-z0-9][a-z0-9_.-]{0,40})?")


def _outcome_words(outcome: object, kind: str) -> str:
    """A ladder rung's or probe's recorded outcome against the case's own (`kind`) as a table cell."""
    if not isinstance(outcome, str) or not _OUTCOME.fullmatch(outcome):
        return "(not readable)"
    if outcome == "ok":
        return "no"
    if outcome.split(" ")[0] == "another":
        return f"no (another output differs: {outcome.split(' ', 1)[1]})"
    if outcome == kind:
        return f"**yes** ({outcome})"
    return f"differs otherwise ({outcome})"


def ablation_lines(culprit: dict | None, *, checked: "DefaultsCheck | None" = None) -> list[str]:
    """The ablation PyTorch's template asks for, as a markdown table: eager (the reference), each
    rung of the stage ladder the analysis ran, the case's own compile, and each Inductor switch it
    probed (set alone), with whether it shows the finding; a rung past the first that shows it is
    not run (the attribution stops there). Read from the culprit as stored (`Culprit.to_dict`:
    `ladder`, `probes`), never re-run; a probe is printed only as one of `INDUCTOR_SWITCHES` with a
    bool or int value, an outcome only as a short label (`_OUTCOME`). With `checked`, a last row:
    issue.py under torch's defaults in a fresh process. [] without a recorded ladder."""
    ladder = culprit.get("ladder") if isinstance(culprit, dict) else None
    if not isinstance(ladder, (list, tuple)) or not ladder:
        return []
    rows = [r for r in ladder if isinstance(r, (list, tuple)) and len(r) == 2]
    if not rows:
        return []
    own = rows[-1]
    kind = own[1] if isinstance(own[1], str) else ""
    shown = {r[0]: r[1] for r in rows[:-1] if r[0] in LADDER_RUNGS}
    lines = ["| run | shows the finding? |", "| --- | --- |", "| eager | no: the reference every run is compared with |"]
    stopped = False
    for rung in LADDER_RUNGS:
        if rung in shown:
            lines.append(f"| `{rung}` | {_outcome_words(shown[rung], kind)} |")
            stopped = stopped or shown[rung] == kind
        else:
            lines.append(f"| `{rung}` | not run{': an earlier rung shows it' if stopped else ''} |")
    lines.append(f"| the case's compile (`torch.compile` as above) | {_outcome_words(own[1], kind)} |")
    for probe in culprit.get("probes") or ():
        if not (isinstance(probe, (list, tuple)) and len(probe) == 2 and isinstance(probe[0], str)):
            continue
        key, _, value = probe[0].partition("=")
        if key not in INDUCTOR_SWITCHES or not (value in ("True", "False") or value.lstrip("-").isdigit()):
            continue
        said = _outcome_words(probe[1], kind)
        lines.append(f"| inductor with `torch._inductor.config.{key} = {value}` | "
                     + ("no: this switch removes it" if said == "no" else said) + " |")
    if checked is not None:
        lines.append(f"| issue.py under torch's defaults, fresh process | "
                     + ("**yes** (exits 1)" if checked.defaults.outcome is ScriptOutcome.FAILS
                        else f"no ({_run_words(checked.defaults)})") + " |")
    return lines


def _run_words(run) -> str:
    """A `ScriptRun` in a table cell or a sentence: its exit code and last line, in code."""
    if run.returncode is None:
        return "did not finish" if "finish" in run.last_line else "did not start"
    return f"exits {run.returncode}" + (f": `{_code_text(run.last_line[:120])}`" if run.last_line and run.returncode else "")


def _code_text(text: str) -> str:
    """Text shown in an inline code span: no backtick or pipe can end the span or the table cell."""
    return text.replace("`", "'").replace("|", "/").replace("\n", " ")


def defaults_words(checked: "DefaultsCheck") -> str:
    """What the fresh-process check says of issue.py, for issue.md: that it reproduces under
    torch's defaults, or 'reproduces only with' the pins it keeps, or that it did not fail."""
    how = "run once before this report was written, in a fresh process with its own Inductor cache and torch's default thread count"
    if checked.defaults.outcome is ScriptOutcome.FAILS:
        return f"**Torch's defaults.** The script sets nothing beyond torch's defaults; {how}, it exits 1."
    if checked.needs_pins:
        pins = ", ".join(f"`{_code_text(p)}`" for p in checked.kept)
        return (f"**Reproduces only with** {pins}: {how}, the script {_run_words(checked.defaults)} without "
                f"{'it' if len(checked.kept) == 1 else 'them'} and exits 1 with {'it' if len(checked.kept) == 1 else 'them'} "
                "(each kept line says so).")
    settings = ", ".join(f"`{_code_text(p)}`" for p in checked.kept)
    return (f"**Not reproduced in a fresh process.** {how.capitalize()}, the script {_run_words(checked.defaults)} under "
            "torch's defaults" + (f", and {_run_words(checked.written)} with {settings} (kept, as the case ran)" if settings else "")
            + ": the finding may depend on state the script does not carry (the campaign's process, its caches).")


def recheck_section(rows: Iterable[tuple[str, str, str]]) -> list[str]:
    """issue.md's last section: per other torch build `divfuzz recheck` ran the folder's issue.py
    under, (torch version, what it gave: "still fails", "passes", "errors", the interpreter's
    words), one line each; [] when none was run. The values are the store's, checked there."""
    rows = list(rows)
    if not rows:
        return []
    return ["", RECHECK_HEADING, "", *(f"- {_code_text(what)} in torch {_code_text(version)} ({_code_text(detail)})"
                                       if detail else f"- {_code_text(what)} in torch {_code_text(version)}"
                                       for version, what, detail in rows)]


# issue.md's section before the recheck section: the recheck section is looked for only past it, so
# that an error log holding the heading's words is never taken for it.
_LAST_OWN_HEADING = "\n### Matching upstream issues\n"


def with_recheck_section(text: str, rows: Iterable[tuple[str, str, str]]) -> str:
    """issue.md's `text` with its last section (`RECHECK_HEADING`, after the upstream matches)
    replaced by `recheck_section(rows)`, or given one where it had none."""
    start = text.rfind(_LAST_OWN_HEADING)
    at = text.find("\n" + RECHECK_HEADING + "\n", start) if start >= 0 else -1
    head = (text[:at] if at >= 0 else text).rstrip("\n")
    return "\n".join([head, *recheck_section(rows)]) + "\n"


def recheck_tag(rows: Iterable[tuple[str, str, str]]) -> str:
    """The first screen's words for a bug's rechecks (`divfuzz recheck`): the latest run per torch
    version, e.g. "passes in 2.14.1" or "still fails in 2.14.1, passes in 2.15.0.dev"; '' for none."""
    latest = {version: what for version, what, _ in rows}
    return ", ".join(f"{what} in {version}" for version, what in latest.items())


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
    if reason.rule in NAN_INF_RULES:
        placed = (f" NaN/Inf placement differs from eager's at {_elements(out.float_cmp.nan_inf_mismatch)} of "
                  f"{out.float_cmp.numel}." if out is not None and out.float_cmp is not None else "")
        return f"Not an accuracy comparison: a NaN/Inf finding, judged by where NaN/Inf are.{placed} Per element: {reason.detail}."
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
                          known: Iterable[str] = (), config_desc: str = "", error_log: str | None = None,
                          defaults: "DefaultsCheck | None" = None, rechecks: Iterable[tuple[str, str, str]] = ()) -> str:
    """issue.md's text. `known`: the upstream matches as lines ("pytorch#N (state): title"), best
    first; `error_log`: what running issue.py printed, when it was run (else the verdict's numbers);
    `defaults`: the fresh-process check of the script, when it ran; `rechecks`: `recheck_section`'s rows."""
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
        *([defaults_words(defaults), ""] if defaults is not None else []),
        *(["**Ablation** (from divfuzz's attribution of this finding; each switch set alone on the case's compile):", "",
            *table, ""] if (table := ablation_lines(culprit, checked=defaults)) else []),
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
        *recheck_section(rechecks),
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
                         f"max |difference| {fc.max_abs_diff:g}"
                         + (f"; NaN/Inf placement differs at {_elements(fc.nan_inf_mismatch)}" if fc.nan_inf_mismatch else ""))
        elif o.int_cmp is not None and o.int_cmp.flips:
            ic = o.int_cmp
            lines.append(f"{o.name}: {ic.dtype} {ic.flips}/{ic.numel} elements differ from eager, max step {ic.max_step}")
    lines.append(f"{reason.severity.value} ({reason.rule}): {reason.detail}")
    return "\n".join(lines)


def _elements(count: int) -> str:
    """A count of elements as words: "1 element", "2,048 elements"."""
    return f"{count:,} element{'s' if count != 1 else ''}"
