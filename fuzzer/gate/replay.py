"""The CI gate's run: replay a corpus of specs in a worker, hold each verdict to its baseline
(`divfuzz.fuzzer.gate.baseline`, `divfuzz.fuzzer.gate.policy`), optionally fuzz after, and write what failed.

Invariants:
- `GateResult.to_dict()` minus its `timings` field is a pure function of (corpus, baseline, torch,
  device, compile config, margin): three runs give identical JSON. Timings live only under
  `timings`, apart, because users want them but they can never be identical.
- Bad input (a corrupt spec or baseline, a missing baseline, an unknown backend) raises a
  `DivfuzzError` naming the file; what the compiler does is data and decides pass or fail.
- A baseline written for another machine key is refused unless the caller accepts any
  (`--baseline-any`); then the mismatch is a note in every report.
- The result carries the baseline's machine and this run's (`divfuzz.fuzzer.gate.machine`), as data;
  the reports show them side by side whenever a bound moved.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker, WorkerTarget
from divfuzz.fuzzer.gate.baseline import (
    Baseline,
    check_baseline_key,
    default_baseline_path,
    load_baseline,
    machine_key,
    summarize_verdict,
)
from divfuzz.fuzzer.gate.corpus import CorpusSpec, load_corpus
from divfuzz.fuzzer.gate.failure_repros import write_failure_repros
from divfuzz.fuzzer.gate.gate_fuzz import gate_fuzz
from divfuzz.fuzzer.gate.machine import machine_rows
from divfuzz.fuzzer.gate.policy import (
    DEFAULT_MARGIN,
    NEW_ERROR,
    PERF_SLOWER,
    compare_with_baseline,
    describe_summary,
    moved_bounds,
    problem_rule,
)
from divfuzz.fuzzer.finding.judgement import Judgement, judge
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import BaselineError, InternalError, SpecError
from divfuzz.records.outcomes import COMPILER_FAILURES, NO_OUTPUT_STATUSES, Status
from divfuzz.records.severity import Severity
from divfuzz.records.verdict import PerfComparison, Verdict

RESULT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GateOptions:
    device: str
    corpus_dir: Path
    baseline_path: Path | None = None
    config: CompileConfig = field(default_factory=CompileConfig)
    margin: float = DEFAULT_MARGIN
    timeout_s: float = 300.0
    budget_s: float | None = None
    fuzz_budget_s: float | None = None
    fuzz_cases: int | None = None
    seed: int = 0
    repro_dir: Path | None = None
    only: tuple[str, ...] = ()  # spec names to replay (empty: all)
    baseline_any: bool = False  # compare with a baseline written for another machine key (noted)
    workers: int = 1  # isolated worker processes replaying the corpus side by side
    oracle: str = "numeric"  # "perf": time eager vs compiled (`divfuzz.fuzzer.engine.execute_perf`), no baseline
    perf_margin: float | None = None  # the perf oracle's noise margin (None: the device's default)


@dataclass
class SpecResult:
    name: str
    digest: str
    observed: dict[str, Any] | None  # None when not run (the budget ran out)
    expected: dict[str, Any] | None
    problems: list[str]
    improvements: list[str]
    bucket: str | None  # the identity of the bucket key this verdict would land in, if any
    wall_s: float = 0.0
    severity: dict | None = None  # divfuzz.oracles.severity_policy.SeverityReason of the verdict, if it diverges
    moved: list[str] = field(default_factory=list)  # bounds that grew at the baseline's severity (not failures)
    judged_by: str = "severity"  # "severity" (against the baseline) or "perf"
    perf: list[dict] = field(default_factory=list)  # the perf oracle's phases (ratio, interval, medians)

    @property
    def passed(self) -> bool:
        return not self.problems

    def _verdict_text(self) -> str:
        if self.observed is None:
            return "not run"
        if self.perf:  # each phase's medians, ratio and interval
            return "; ".join(PerfComparison.from_dict(p).describe() for p in self.perf)
        return describe_summary(self.observed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "digest": self.digest,
            "result": "pass" if self.passed else "fail",
            "verdict": self._verdict_text(),
            "observed": self.observed,
            "expected": self.expected,
            "in_baseline": self.expected is not None,
            "judged_by": self.judged_by,
            "problems": self.problems,
            "failed_rules": sorted({problem_rule(p) for p in self.problems}),
            "improvements": self.improvements,
            "moved_bounds": self.moved,
            **({"perf": self.perf} if self.judged_by == "perf" else {}),
            "bucket": self.bucket,
            "severity": self.severity,
        }


@dataclass
class GateResult:
    device: str
    torch_version: str
    config: CompileConfig
    baseline_path: Path | None
    margin: float
    specs: list[SpecResult]
    notes: list[str]
    fuzz: dict[str, Any] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] | None = None  # this run's (divfuzz.fuzzer.gate.machine.describe_machine)
    baseline_machine: dict[str, Any] | None = None  # the machine that wrote the baseline

    @property
    def passed(self) -> bool:
        fuzz_ok = not self.fuzz or not self.fuzz["failing"]
        return all(s.passed for s in self.specs) and fuzz_ok

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self, *, with_timings: bool = True) -> dict[str, Any]:
        d = {
            "schema_version": RESULT_SCHEMA_VERSION,
            "result": "pass" if self.passed else "fail",
            "exit_code": self.exit_code,
            "device": self.device,
            "torch": self.torch_version,
            "config": self.config.to_dict(),
            "baseline": str(self.baseline_path) if self.baseline_path else None,
            "margin": self.margin,
            "counts": {
                "specs": len(self.specs),
                "passed": sum(s.passed for s in self.specs),
                "failed": sum(not s.passed for s in self.specs),
                "improved": sum(bool(s.improvements) and s.passed for s in self.specs),
            },
            "notes": self.notes,
            "machine": {
                "baseline": self.baseline_machine,
                "current": self.machine,
                "rows": machine_rows(self.baseline_machine, self.machine) if self.machine else [],
            },
            "moved_bounds": sum(len(s.moved) for s in self.specs),
            "specs": [s.to_dict() for s in self.specs],
            "fuzz": self.fuzz,
        }
        if with_timings:
            d["timings"] = self.timings
        return d


def _bucket_of(judged: Judgement) -> str | None:
    """The identity of the raw bucket the judged verdict would land in (`BucketKey.identity`), if any."""
    return judged.key.identity() if judged.key is not None else None


@dataclass(frozen=True)
class Replay:
    """What `replay_corpus` gives: each spec's verdict (None when the budget ran out first), its
    wall time, the slowest worker start-up, and the machine the workers ran on."""

    verdicts: dict[str, Verdict | None]
    walls: dict[str, float]
    startup_s: float
    machine: dict[str, Any]


MACHINE_CALL_TIMEOUT_S = 120.0


def replay_corpus(
    specs: list[CorpusSpec],
    *,
    device: str,
    config: CompileConfig,
    timeout_s: float,
    budget_s: float | None,
    workers: int = 1,
    oracle: str = "numeric",
    perf_margin: float | None = None,
    on_case=lambda entry, verdict, wall_s: None,
) -> Replay:
    """Replay `specs`, each in a worker process.

    With `workers` > 1 the specs are shared out to that many isolated worker processes. A spec's
    verdict does not depend on which worker ran it or in what order (each case resets Dynamo and
    compiles afresh), so the result is the same as with one worker; only the order of `on_case`
    calls varies. The first worker describes the machine before its first case.
    """
    queue = list(reversed(specs))
    verdicts: dict[str, Verdict | None] = {}
    walls: dict[str, float] = {}
    startups: list[float] = []
    machine: dict[str, Any] = {}
    lock = threading.Lock()
    t_start = time.perf_counter()
    stopping = threading.Event()  # an interrupt, or another slot's own failure: no spec more, no result more
    slot_workers: list[Worker] = []

    def next_spec() -> CorpusSpec | None:
        with lock:
            while queue and not stopping.is_set():
                entry = queue.pop()
                if budget_s is not None and time.perf_counter() - t_start > budget_s:
                    verdicts[entry.name] = None
                    continue
                return entry
            return None

    def slot(index: int) -> None:
        worker = Worker(device)
        with lock:
            slot_workers.append(worker)
        try:
            worker.start()
            if index == 0:
                machine.update(_describe_machine(worker, device))
            while (entry := next_spec()) is not None:
                t0 = time.perf_counter()
                request = CaseRequest(entry.spec, device, config, oracle=oracle, perf_margin=perf_margin)
                verdict = worker.run(request, timeout_s)
                wall = round(time.perf_counter() - t0, 3)
                with lock:
                    if stopping.is_set():  # the verdict of a killed worker is no result
                        return
                    verdicts[entry.name], walls[entry.name] = verdict, wall
                    on_case(entry, verdict, wall)
        finally:
            worker.stop()
            with lock:
                startups.append(worker.startup_s)

    n = max(1, min(workers, len(specs)))
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="divfuzz-gate") as pool:
        futures = [pool.submit(slot, i) for i in range(n)]
        try:
            for future in futures:
                future.result()  # a slot's own failure (not a compiler's) stops the gate loudly
        except BaseException:  # that, or SIGINT/SIGTERM (divfuzz.fuzzer.cli.interrupts): every slot stops now
            stopping.set()
            with lock:
                for worker in slot_workers:
                    worker.abort()
            raise
    return Replay(verdicts, walls, round(max(startups, default=0.0), 3), machine)


def _describe_machine(worker: Worker, device: str) -> dict[str, Any]:
    """The worker's machine (`divfuzz.fuzzer.gate.machine.describe_machine`); its failure is divfuzz's own."""
    outcome = worker.call(WorkerTarget.DESCRIBE_MACHINE, {"device": device}, MACHINE_CALL_TIMEOUT_S)
    if outcome.error is not None:
        raise InternalError(f"divfuzz could not describe this machine in its worker: {outcome.error}")
    return outcome.value


def update_baseline(opts: GateOptions, *, log=print) -> Baseline:
    """Replay the corpus and write what it gives as the baseline (plus fuzz buckets, with --fuzz)."""
    specs = load_corpus(opts.corpus_dir)
    path = opts.baseline_path or default_baseline_path(opts.corpus_dir, opts.device)
    replay = replay_corpus(
        specs,
        device=opts.device,
        config=opts.config,
        timeout_s=opts.timeout_s,
        budget_s=None,
        workers=opts.workers,
        on_case=lambda e, v, w: log(f"{e.name}: {describe_summary(summarize_verdict(v))} ({w:.1f} s)"),
    )
    _refuse_unrecordable(replay.verdicts, path)
    entries = {}
    for s in specs:
        entry = summarize_verdict(replay.verdicts[s.name])
        entry["digest"] = s.spec.digest()
        entries[s.name] = entry
    known: list[str] = []
    if opts.fuzz_budget_s or opts.fuzz_cases:
        fuzz = gate_fuzz(**fuzz_options(opts), known=(), corpus_buckets=set())
        known = sorted({f["identity"] for f in fuzz["findings"]})
    key = machine_key(opts.device)
    baseline = Baseline(
        path=path,
        device_type=key["device_type"],
        torch=key["torch"],
        arch=key["arch"],
        config=opts.config.to_dict(),
        specs=entries,
        known_buckets=tuple(known),
        machine=replay.machine,
    )
    baseline.write()
    return baseline


# What a baseline may not hold as a spec's expected state: the worker died or ran out of time
# (a crash or a hang is never "expected", and a hang's timing depends on the machine's load), or
# eager itself failed (a divfuzz generator bug, not the compiler's). divfuzz's own failures in a
# worker raise InternalError before this point and stop the command.
UNRECORDABLE = (Status.CRASH, Status.HANG, Status.EAGER_ERROR)


def _refuse_unrecordable(verdicts: dict[str, Verdict | None], path: Path) -> None:
    """BaselineError naming each spec whose verdict must not become the expected state; the
    baseline file is then not written (left byte-identical)."""
    bad = sorted((name, v.status.value, v.error_type) for name, v in verdicts.items()
                 if v is not None and v.status in UNRECORDABLE)
    if bad:
        listed = "; ".join(f"{name}: {status}" + (f" ({err})" if err else "") for name, status, err in bad)
        raise BaselineError(
            f"{path}: not written: a baseline cannot record a crash, a hang or an eager error as the expected state "
            f"({listed}). Fix or remove these specs, or raise --timeout, and run --update-baseline again"
        )


def run_gate(opts: GateOptions, *, log=lambda msg: None) -> GateResult:
    """Replay the corpus, hold each spec to the baseline, then (optionally) fuzz briefly."""
    # lazy: heavy: torch, imported when the replay starts, not when the CLI loads the gate
    import torch

    t0 = time.perf_counter()
    specs = _selected_specs(opts)
    perf = opts.oracle == "perf"
    if perf:  # judged by the perf oracle's severity alone: no baseline is read
        path, baseline = None, None
        notes = [f"--oracle perf: each spec fails when compiled is slower than eager as a bug by the severity policy "
                 f"(noise margin {opts.perf_margin if opts.perf_margin is not None else 'the device default'}); no baseline is read"]
    else:
        path = opts.baseline_path or default_baseline_path(opts.corpus_dir, opts.device)
        baseline = load_baseline(path, device=opts.device, corpus_dir=opts.corpus_dir)
        notes = _baseline_notes(baseline, specs, opts)
    replay = replay_corpus(
        specs,
        device=opts.device,
        config=opts.config,
        timeout_s=opts.timeout_s,
        budget_s=opts.budget_s,
        workers=opts.workers,
        oracle=opts.oracle,
        perf_margin=opts.perf_margin,
        on_case=lambda e, v, w: log(f"{e.name}: {_one_line(v)} ({w:.1f} s)"),
    )
    verdicts, walls = replay.verdicts, replay.walls
    if perf:
        results = [_judge_perf_spec(s, verdicts[s.name], walls.get(s.name, 0.0), opts) for s in specs]
    else:
        results = [_judge_spec(s, verdicts[s.name], baseline.specs.get(s.name), walls.get(s.name, 0.0), opts) for s in specs]
    t_replay = time.perf_counter() - t0

    fuzz = None
    if opts.fuzz_budget_s or opts.fuzz_cases:
        corpus_buckets = {r.bucket for r in results if r.bucket and r.expected and r.expected["status"] != "ok"}
        fuzz = gate_fuzz(**fuzz_options(opts), known=baseline.known_buckets, corpus_buckets=corpus_buckets)
    result = GateResult(
        device=opts.device,
        torch_version=torch.__version__,
        config=opts.config,
        baseline_path=path,
        margin=opts.margin,
        specs=results,
        notes=notes,
        fuzz=fuzz,
        timings={
            "total_s": round(time.perf_counter() - t0, 3),
            "replay_s": round(t_replay, 3),
            "worker_startup_s": replay.startup_s,
            "per_spec_s": walls,
        },
        machine=replay.machine,
        baseline_machine=baseline.machine if baseline else None,
    )
    if opts.repro_dir is not None:
        write_failure_repros(result.specs, specs, repro_dir=opts.repro_dir, device=opts.device, config=opts.config,
                             oracle=opts.oracle, perf_margin=opts.perf_margin, timeout_s=opts.timeout_s)
    return result


def _one_line(verdict: Verdict) -> str:
    if verdict.perf:
        return "; ".join(p.describe() for p in verdict.perf)
    return describe_summary(summarize_verdict(verdict))


def _judge_perf_spec(s: CorpusSpec, verdict: Verdict | None, wall_s: float, opts: GateOptions) -> SpecResult:
    """One spec under the perf oracle: it FAILs when the severity policy rates the verdict a bug
    (a phase slower beyond the noise, or the compiler failed); a slowdown rated suspect or
    by-design (the compiled wrapper's fixed cost on a tiny graph) passes, its reason reported."""
    digest = s.spec.digest()
    if verdict is None:
        return SpecResult(s.name, digest, None, None, [f"not run: the gate's budget of {opts.budget_s:g} s ran out"], [], None,
                          judged_by="perf")
    observed = {"status": verdict.status.value, "error_type": verdict.error_type, "outputs": {}}
    judged = judge(verdict, spec=s.spec, device=opts.device)  # judged once: the JSON's severity and its bucket
    reason = judged.reason
    severity = reason.to_dict() if reason else None
    phases = [p.to_dict() for p in verdict.perf]
    problems: list[str] = []
    if verdict.status in COMPILER_FAILURES:
        problems.append(f"{NEW_ERROR}: {describe_summary(observed)}: the compiler under test failed")
    elif verdict.status in NO_OUTPUT_STATUSES:
        problems.append(f"{NEW_ERROR}: {describe_summary(observed)}: the spec was not timed")
    elif severity is not None and severity["severity"] == Severity.BUG.value:
        problems.append(f"{PERF_SLOWER}: {severity['detail']}")
    return SpecResult(s.name, digest, observed, None, problems, [], _bucket_of(judged), wall_s,
                      severity, judged_by="perf", perf=phases)


def _selected_specs(opts: GateOptions) -> list[CorpusSpec]:
    """The corpus, or the `--spec` names of it (an unknown name is a SpecError)."""
    specs = load_corpus(opts.corpus_dir)
    if not opts.only:
        return specs
    unknown = sorted(set(opts.only) - {s.name for s in specs})
    if unknown:
        raise SpecError(f"{opts.corpus_dir}: no corpus specs named {', '.join(unknown)}")
    return [s for s in specs if s.name in opts.only]


def _baseline_notes(baseline: Baseline, specs: list[CorpusSpec], opts: GateOptions) -> list[str]:
    """What the reports must say about the baseline: another machine key (only with
    --baseline-any), another compile config, entries with no spec."""
    notes: list[str] = check_baseline_key(baseline, opts.device, accept_any=opts.baseline_any)
    if baseline.config and baseline.config != opts.config.to_dict():
        notes.append(f"the baseline was written with backend {CompileConfig.from_dict(baseline.config).describe()}; this run uses {opts.config.describe()}")
    stale = sorted(set(baseline.specs) - {s.name for s in specs}) if not opts.only else []
    if stale:
        notes.append(f"baseline entries with no corpus spec (ignored): {', '.join(stale)}")
    return notes


def _judge_spec(s: CorpusSpec, verdict: Verdict | None, expected: dict | None, wall_s: float, opts: GateOptions) -> SpecResult:
    """One spec's result: its observed summary held to its baseline entry (or "not run")."""
    digest = s.spec.digest()
    if verdict is None:
        return SpecResult(s.name, digest, None, expected, [f"not run: the gate's budget of {opts.budget_s:g} s ran out"], [], None)
    judged = judge(verdict, spec=s.spec, device=opts.device)  # judged once: its summary, the JSON's severity, its bucket
    reason = judged.reason
    observed = summarize_verdict(verdict, reason)
    severity = reason.to_dict() if reason else None
    problems, improvements = compare_with_baseline(observed, expected, detail=severity["detail"] if severity else None)
    if expected is not None and expected.get("digest") not in (None, digest):
        problems.insert(0, f"the spec changed since the baseline was written (digest {digest}, baseline {expected['digest']}); re-run --update-baseline")
    return SpecResult(s.name, digest, observed, expected, problems, improvements,
                      _bucket_of(judged), wall_s, severity,
                      moved_bounds(observed, expected, margin=opts.margin))


def fuzz_options(opts: GateOptions) -> dict[str, Any]:
    """The part of the gate's options its short campaign takes (`divfuzz.fuzzer.gate.gate_fuzz`)."""
    return {"device": opts.device, "config": opts.config, "seed": opts.seed, "budget_s": opts.fuzz_budget_s,
            "cases": opts.fuzz_cases, "timeout_s": opts.timeout_s, "repro_dir": opts.repro_dir}
