"""The analysis of a finding: minimize it under its culprit, attribute the result, and file it.

`analyze_finding` shrinks a case while keeping its cheap culprit (stage ladder and probes), then
runs the full attribution (bisector included) on the minimal spec: an `Analysis`.

`BucketAnalyzer.key_for` turns a finding's raw key (the graph's op set and modes) into the key of its root
cause: the minimized op pattern plus the culprit's fields (`divfuzz.fuzzer.engine.bucketing.root_cause_key`). A raw key is analyzed once per campaign (the
answer is cached), so graphs made of the same ops cost one minimization, and different graphs
that shrink to the same op pattern and culprit land in one bucket. `BucketAnalyzer.analyze` is the
same analysis without cache or store, for the campaign's analysis pool
(`divfuzz.fuzzer.campaign.analysis_pool`), which files its answer with `Store.resolve_root_cause`. `write_bucket` writes the
bucket folder with the minimal spec (repro header: culprit, ladder, minimization record), plus
`report.md` and `analysis.json`.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable
from pathlib import Path

from divfuzz.fuzzer.engine.bucketing import root_cause_key
from divfuzz.records.buckets import BucketKey
from divfuzz.fuzzer.triage.attribute import PERF_PROBES, attribute_case, guard_configs
from divfuzz.fuzzer.triage.phase_clock import PhaseTally
from divfuzz.fuzzer.triage.shrink import MinimizeResult, case_predicate, minimize_spec, type_change
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.records.culprit import Culprit
from divfuzz.records.deadline import Deadline, StopReason
from divfuzz.records.errors import MinimizeError
from divfuzz.records.outcomes import ERROR_KINDS
from divfuzz.records.severity import Severity
from divfuzz.generators.spec import GraphSpec
from divfuzz.reports.bug_report import render_bug_report
from divfuzz.reports.issue_check import CHECK_TIMEOUT_S, DefaultsCheck, check_pins, run_rendered_script
from divfuzz.reports.issue_script import candidate_pins, render_issue_script
from divfuzz.reports.bucket_files import ANALYSIS_FILE, REPORT_FILE
from divfuzz.reports.bucket_folder import write_bucket_folder


@dataclass(frozen=True)
class Analysis:
    """A finding minimized and attributed: what a bucket stores and prints."""

    spec: GraphSpec  # the minimal spec (the input spec when minimizing was skipped or failed)
    culprit: Culprit
    minimized: MinimizeResult | None
    verdict: object | None  # the minimal spec's verdict under the case's config, when seen
    note: str = ""  # why minimization was skipped, if it was
    compile_log: str = ""  # what the compiler printed while the analysis ran (the worker's output)
    issue_lines: int | None = None  # the lines of the bug's issue.py (`render_issue_script`), None when it has none
    # The bug's issue.py run in a fresh process under torch's defaults (and the pins it needs), in
    # the analysis's own worker and time (`reports.issue_check.check_pins`); None: not run.
    issue_check: DefaultsCheck | None = field(default=None, compare=False)
    # Seconds and compiles per phase (`PhaseTally.to_dict`: first_pass/ladder, first_pass/probes,
    # minimize, ladder, probes, bisector): for the run's timings file and analysis.json, never a key.
    phases: dict = field(default_factory=dict, compare=False)

    @functools.cached_property
    def reason(self):
        """The minimal spec's severity under its culprit's switch (the one judgement), None without a verdict."""
        if self.verdict is None:
            return None
        return judge(self.verdict, switch=self.culprit.key().switch or None, subsystem=self.culprit.key().subsystem).reason

    def notes(self) -> tuple[str, ...]:
        lines = [f"Culprit: {self.culprit.describe()}"]
        lines += ["  stage ladder: " + ", ".join(f"{r}: {o}" for r, o in self.culprit.ladder)]
        if self.culprit.probes:
            lines += ["  inductor probes: " + ", ".join(f"{p}: {o}" for p, o in self.culprit.probes)]
        if self.culprit.bisect_text():
            lines += [f"  compiler_bisector: {self.culprit.bisect_text()}"]
        if self.minimized is not None:
            lines += [self.minimized.describe()]
        if self.note:
            lines += [self.note]
        if self.why_long():
            lines += [self.why_long()]
        return tuple(lines)

    def why_long(self) -> str:
        """Why the bug's issue.py runs over `ISSUE_MAX_LINES` lines, in words ("" when it does not):
        what the minimizer kept and what stopped it. The report prints it beside the bucket."""
        if self.issue_lines is None or self.issue_lines <= ISSUE_MAX_LINES:
            return ""
        head = f"issue.py runs {self.issue_lines} lines (over {ISSUE_MAX_LINES})"
        m = self.minimized
        if m is None:
            return f"{head}: {self.note or 'not minimized'}"
        if m.budget_exhausted:
            return f"{head}: the minimizer's budget ran out at {m.ops_after} ops after {m.predicate_calls} compiles"
        return (f"{head}: no smaller graph keeps the finding ({m.ops_after} ops, {len(self.spec.inputs)} inputs, "
                f"{len(self.spec.outputs)} outputs{', backward' if self.spec.backward else ''})")

    @property
    def stopped(self) -> StopReason:
        """Why the analysis stopped, in every phase's one vocabulary (`records.deadline.StopReason`):
        time's up where its deadline cut the minimizer, kept it from starting, or left the culprit
        not attributed; else finished."""
        cut = (self.minimized is not None and self.minimized.stopped is StopReason.TIME_UP) \
            or "time ran out" in self.note or "time ran out" in (self.culprit.bisect_note or "")
        return StopReason.TIME_UP if cut else StopReason.FINISHED

    def to_dict(self) -> dict:
        minimized = self.minimized.to_dict() if self.minimized else {"spec": self.spec.to_dict()}
        extra = {"note": self.note} if self.note else {}
        extra["stopped"] = self.stopped.value
        if self.issue_lines is not None:
            extra["issue_lines"] = self.issue_lines
        if self.why_long():
            extra["why_long"] = self.why_long()
        return {"minimized": minimized | extra, "culprit": self.culprit.to_dict()}


_NO_MINIMIZE = {"hang"}  # each candidate would cost a whole timeout
# A compiler failure's first pass keeps its ladder: the rung that fails is the minimizer's guard.
_FAILURE_KINDS = frozenset(k.value for k in ERROR_KINDS)
# A bug's issue.py is at most this many lines (issue 52); an analysis says why where it is longer.
ISSUE_MAX_LINES = 30
# Under a deadline, a minimization given fewer seconds than this is not started.
MIN_MINIMIZE_S = 5.0


def _kept_of_input(verdict) -> dict:
    """What the minimal spec keeps of the input's finding under the case's own config, judged once
    (`judge`): its severity, rule and output, the mechanism that explained it ("" for none),
    where the compiler raised its error, and a type mismatch's kind of change (`type_change`);
    each None when the input's verdict is unknown."""
    if verdict is None:
        return dict(severity=None, rule=None, mechanism=None, output=None, site=None, type_changed=None)
    judged = judge(verdict)
    reason = judged.reason
    output = reason.output if reason is not None else None
    return dict(severity=reason.severity.value if reason is not None else None, rule=reason.rule if reason is not None else None,
                mechanism=judged.mechanism, output=output, site=verdict.error_site, type_changed=type_change(verdict, output))


def _finding_output_seen(verdict) -> str | None:
    """The output of the input's finding under the case's own config (`case_finding`: the output
    its severity reason names): what every rung, probe and bisector step of its attribution must
    show a finding on to be blamed (`attribute_case`'s `output`); None for a perf verdict, a
    compiler failure (its output is "-") or a verdict not known."""
    if verdict is None or getattr(verdict, "perf", ()):
        return None
    finding = judge(verdict).finding
    return finding.output if finding is not None and finding.output != "-" else None


def analyze_finding(
    spec: GraphSpec,
    *,
    worker,
    device: str,
    config,
    kind: str,
    budget_s: float = 120.0,
    timeout_s: float = 120.0,
    strict: bool = False,
    log: Callable[[str], None] | None = None,
    oracle: str = "numeric",
    perf_margin: float | None = None,
    deadline: Deadline = Deadline.never(),
    case_verdict=None,
    seeded_bisect: bool = True,
    cheap_first_pass: bool = True,
) -> Analysis:
    """Minimize a case that shows a finding of `kind`, keeping its culprit, and attribute the result.

    1. a cheap culprit on the input (stage ladder and Inductor probes up to the first switch that
       removes it, which alone names a culprit without the bisector; no bisector);
    2. `minimize_spec` with a predicate that keeps the finding under the case's own `config`
       (its kind, severity, rule, mechanism, output and error site: what the bucket's replay and
       repro.py compile with) and that culprit (`attribute.guard_configs`: a decomposition bug
       must still show on `aot_eager_decomp_partition`, an Inductor bug that a switch removes is
       checked with and without the switch);
    3. the full attribution (with `compiler_bisector`) of the minimal spec.
    A (spec, config) pair is compiled once per analysis: every verdict is kept (`seen`), and a rung,
    probe or guard run already (the input's when nothing shrank, the minimizer's last candidate's)
    is read from there. `case_verdict`, the finding's own run of `spec` under `config` (a
    campaign's case), is the first of them.

    `deadline` bounds the whole analysis, every run in it included: the first
    pass (its ladder and probes) stops at half the minimization budget, and a ladder cut there
    leaves the minimizer the case's own config as its guard (the finding and its severity kept,
    no stage claimed); the minimizer gets what is left once the final attribution has the time
    the first pass took (the same rungs and probes, on a graph no larger), and none when under
    `MIN_MINIMIZE_S` is left; a candidate's run stops at the minimizer's own deadline; the final
    ladder, probes and bisector stop at the analysis's deadline
    (`attribute_case`). A case whose every compile is slow (a 30 s compile that ends in an
    assertion), or one of whose rungs hangs, is filed with the culprit its time allowed, instead
    of holding a worker past the campaign's end.

    The analysis's `phases` say where its time and compiles went (`PhaseTally`): every run of a
    spec under a config counts as one compile of the phase it ran in, the bisector's as it
    reports them. `seeded_bisect` is `attribute_case`'s (the bisector starts past the ladder's
    clear rungs). `cheap_first_pass` makes a numeric finding's first pass `attribute_case`'s
    `knobs_only` (no ladder, only the precision switch that would make it by-design), so the
    minimizer keeps the finding under the case's own config and the ladder runs on the minimal
    graph only; a compiler failure or a perf finding keeps the whole first pass (its stage guard).
    """
    seen: dict = {} if case_verdict is None else {(spec.digest(), config): case_verdict}
    tally = PhaseTally()

    def record(s, cfg, verdict):
        tally.compiled()
        seen[(s.digest(), cfg)] = verdict

    common = dict(worker=worker, device=device, strict=strict, timeout_s=timeout_s, on_verdict=record, oracle=oracle,
                  perf_margin=perf_margin, known=seen, deadline=deadline)
    minimized, note = None, ""
    current = spec
    if kind not in _NO_MINIMIZE:
        t_rough = time.monotonic()
        # The first pass's probes only pick the minimizer's guard: they get half the minimization budget at most.
        rough_deadline = deadline.share(budget_s / 2) if deadline.bounded else deadline
        with tally.phase("first_pass"):
            knobs_only = cheap_first_pass and oracle == "numeric" and kind not in _FAILURE_KINDS
            rough = attribute_case(spec, config=config, kind=kind, bisect=False, first_fix_only=True, tally=tally,
                                   knobs_only=knobs_only,
                                   output=_finding_output_seen(seen.get((spec.digest(), config))), **(common | {"deadline": rough_deadline}))
        rough_s = time.monotonic() - t_rough
        if _by_design(seen.get((spec.digest(), config)), rough):
            # A documented precision knob removes it: named by the cheap culprit, never minimized in a campaign.
            return Analysis(spec, rough, None, seen.get((spec.digest(), config)), f"not minimized: by-design ({rough.summary})",
                            phases=tally.to_dict())
        must_fail, must_pass = guard_configs(rough, config)
        # The minimizer checks its budget between candidates, and a candidate's run is stopped
        # at its end (the predicate's deadline): a candidate as slow as the input (a 137 s
        # compile) does not hold the analysis past it, and a smaller one (its backward dropped)
        # may still be fast.
        budget = min(budget_s, deadline.left() - rough_s)
        # What the minimal spec keeps is what the input showed under the case's own config (the
        # bucket's finding, as its replay and repro.py see it); the culprit's rung (`must_fail`,
        # e.g. aot_eager_decomp_partition) must still show the kind. Keeping the rule under the
        # rung alone shrank a case into a graph that diverged there and not under Inductor: its
        # folder's replay read `finding: none` (issue 35).
        own = seen.get((spec.digest(), config))
        predicate = case_predicate(
            worker, device=device, config=config, kind=kind, timeout_s=timeout_s, strict=strict,
            culprit_config=must_fail, must_pass_with=must_pass, on_verdict=record, **_kept_of_input(own),
            oracle=oracle, perf_margin=perf_margin, known=seen,
            deadline=deadline.share(max(budget, 0.0)) if deadline.bounded else deadline,
        )
        if budget < MIN_MINIMIZE_S:
            note = "not minimized: the analysis's time ran out after the culprit's first pass on the input"
        elif own is None:
            # A ladder cut before the input ran under its guard (no case verdict given: `minimize
            # --pending`, `--against`): without that run the severity and error site it must keep
            # are unknown, and a bug could shrink into noise.
            note = "not minimized: the analysis's time ran out before the input ran under its config"
        else:
            try:
                # The first step keeps only what the finding's output needs (issue 52).
                with tally.phase("minimize"):
                    minimized = minimize_spec(spec, predicate, budget_s=budget, log=log, output=_kept_of_input(own)["output"])
                current = minimized.spec
            except MinimizeError as e:
                note = f"not minimized: {e}"
    else:
        note = f"not minimized: a {kind} finding costs a whole timeout per candidate"
    # Judged by what the input showed under its own config (known by now unless its run was cut):
    # the minimal spec keeps that rule on that output, so each rung is asked for it.
    culprit = attribute_case(current, config=config, kind=kind, bisect=kind not in _NO_MINIMIZE, tally=tally,
                             seeded_bisect=seeded_bisect, output=_finding_output_seen(seen.get((spec.digest(), config))), **common)
    analysis = Analysis(current, culprit, minimized, seen.get((current.digest(), config)), note, phases=tally.to_dict())
    analysis = replace(analysis, issue_lines=_issue_lines(analysis, device=device, config=config))
    return replace(analysis, issue_check=_issue_check(analysis, device=device, config=config, deadline=deadline))


# An issue.py check runs one to a few fresh processes (torch's import, one compile): where less
# than this is left of the analysis's time, the folder's script keeps every pin, unchecked.
ISSUE_CHECK_MIN_S = 30.0


def _issue_check(analysis: Analysis, *, device: str, config, deadline: Deadline) -> DefaultsCheck | None:
    """The bug's issue.py run under torch's defaults, and with the pins it needs, in fresh
    processes (`check_pins`), within what is left of the analysis's `deadline`; None for no bug,
    no verdict, a hang (a timeout per run), or too little time left."""
    if analysis.verdict is None or deadline.left() < ISSUE_CHECK_MIN_S:
        return None
    reason = analysis.reason
    if reason is None or reason.severity is not Severity.BUG or reason.rule == "hang":
        return None
    if render_issue_script(analysis.spec, device=device, config=config, reason=reason, verdict=analysis.verdict) is None:
        return None

    def run(pins: tuple[str, ...]):
        rendered = render_issue_script(analysis.spec, device=device, config=config, reason=reason, verdict=analysis.verdict,
                                       pins=pins, pin_note="needed")
        return run_rendered_script(rendered.text, rendered.files, rule=reason.rule,
                                   timeout_s=max(1.0, min(CHECK_TIMEOUT_S, deadline.left())))

    return check_pins(candidate_pins(config, device, getattr(analysis.verdict, "threads", None)), run)


def _issue_lines(analysis: Analysis, *, device: str, config) -> int | None:
    """The lines of the issue.py a bug's minimal spec gets, None for no bug or no verdict."""
    if analysis.verdict is None:
        return None
    script = render_issue_script(analysis.spec, device=device, config=config, reason=analysis.reason, verdict=analysis.verdict)
    return script.lines if script is not None else None


def _by_design(verdict, rough: Culprit) -> bool:
    """The case's own verdict rated by-design once the cheap culprit is known (`divfuzz.oracles.severity_policy`)."""
    if verdict is None:
        return False
    return judge(verdict, switch=rough.key().switch or None).severity is Severity.BY_DESIGN


def perf_knob(culprit: Culprit) -> tuple | None:
    """The scheduling switch that removes a perf finding, as (key, value), or None."""
    values = {k: v for k, v, _ in PERF_PROBES}
    return next(((k, values[k]) for k in culprit.fixes if k in values), None)


class BucketAnalyzer:
    def __init__(self, *, device: str, config, strict: bool, budget_s: float, timeout_s: float, log=None, store=None,
                 oracle: str = "numeric", perf_margin: float | None = None, span_factor: float | None = None,
                 seeded_bisect: bool = True):
        self.device = device
        self.config = config
        self.strict = strict
        self.budget_s = budget_s
        self.timeout_s = timeout_s
        self.log = log
        self.store = store  # remembers raw key -> root-cause key across runs (resume)
        self.oracle = oracle
        self.perf_margin = perf_margin
        self.span_factor = span_factor  # a campaign's: an analysis ends within span_factor x its minimization budget
        self.seeded_bisect = seeded_bisect  # `attribute_case`'s: False only for the benchmark's leg without the change
        self._cache: dict[BucketKey, tuple[BucketKey, Analysis]] = {}
        self._lock = threading.Lock()
        self.analyses = 0

    def key_for(self, spec: GraphSpec, raw_key: BucketKey, worker, *, budget_s: float | None = None) -> tuple[BucketKey, Analysis | None]:
        """The root-cause key of a finding whose raw key is `raw_key` (analyzing it when new).

        The analysis is None when the answer comes from the store (an earlier run analyzed it).
        """
        with self._lock:
            hit = self._cache.get(raw_key)
        if hit is not None:
            return hit
        known = self.store.root_cause_of(raw_key) if self.store is not None else None
        if known is not None:
            return known, None
        key, analysis = self.analyze(spec, raw_key, worker, budget_s=budget_s)
        if worker.aborted:  # cut short by an interrupt: remember nothing
            return key, analysis
        with self._lock:
            self._cache[raw_key] = (key, analysis)
        if self.store is not None:
            self.store.remember_root_cause(raw_key, key)
        return key, analysis

    def analyze(self, spec: GraphSpec, raw_key: BucketKey, worker, *, budget_s: float | None = None,
                case_verdict=None) -> tuple[BucketKey, Analysis]:
        """Minimize and attribute `spec` (a case of `raw_key`) in `worker`: its root-cause key and
        the analysis, with no cache and no store (the analysis pool files the answer itself,
        `Store.resolve_root_cause`). Counted in `analyses` unless the worker was aborted under it.
        With `span_factor`, the whole analysis ends within that many times its minimization
        budget (`analyze_finding`'s deadline)."""
        budget = self.budget_s if budget_s is None else budget_s
        mark = worker.output_mark()  # None: a fleet's worker keeps its output on its node
        analysis = analyze_finding(
            spec,
            worker=worker,
            device=self.device,
            config=self.config,
            kind=raw_key.kind,
            budget_s=budget,
            timeout_s=min(self.timeout_s, 300.0),
            strict=self.strict,
            log=self.log,
            oracle=self.oracle,
            perf_margin=self.perf_margin,
            deadline=Deadline.never() if self.span_factor is None else Deadline.after(self.span_factor * budget),
            case_verdict=case_verdict,
            seeded_bisect=self.seeded_bisect, cheap_first_pass=self.seeded_bisect,
        )
        if mark is not None:
            analysis = replace(analysis, compile_log=worker.output_since(mark))
        if not worker.aborted:
            with self._lock:
                self.analyses += 1
        return root_cause_key(raw_key, analysis.spec, analysis.culprit.key()), analysis


def write_bucket(
    root: Path,
    *,
    bucket_id: int,
    key: BucketKey,
    analysis: Analysis,
    device: str,
    config,
    fallback_verdict,
    case_id: int | None,
    timeout_s: int,
    versions: dict,
    compile_log: str | None = None,
    severity: dict | None = None,
    check_unchecked: bool = True,
) -> Path:
    """The bucket folder for a minimized case, with `report.md` and `analysis.json` (and, for a
    bug, issue.py and issue.md; `compile_log`, what the compiler printed, as compile.log), every
    file written before the folder is moved into place. issue.py's pins are the analysis's own
    check (`Analysis.issue_check`); without one, checked here when `check_unchecked` (a command
    writing one folder), else kept unchecked (a campaign's filing, which must not stall on it)."""
    verdict = analysis.verdict if analysis.verdict is not None else fallback_verdict
    data = analysis.to_dict()
    # Where the analysis's time went, in its own file only (the report and the key never read it).
    analysis_file = data | ({"phases": analysis.phases} if analysis.phases else {})
    report = render_bug_report(analysis.spec, title=str(key), reason=analysis.reason if analysis.verdict is not None else None,
                               culprit=data["culprit"], versions=versions, device=device, config_desc=config.describe(),
                               verdict=verdict, minimized=data["minimized"])
    # Every file goes into the folder before it is moved into place: a kill never leaves a bucket
    # folder without its analysis.
    return write_bucket_folder(
        root,
        knob=perf_knob(analysis.culprit),
        bucket_id=bucket_id,
        key=key,
        spec=analysis.spec,
        device=device,
        config=config,
        verdict=verdict,
        case_id=case_id,
        notes=analysis.notes(),
        timeout_s=timeout_s,
        culprit=analysis.culprit.to_dict(),
        versions=versions,
        compile_log=analysis.compile_log if compile_log is None else compile_log,
        severity=severity,
        extra_files={ANALYSIS_FILE: json.dumps(analysis_file, indent=2) + "\n", REPORT_FILE: report},
        check_issue=analysis.issue_check if analysis.issue_check is not None else check_unchecked,
    )
