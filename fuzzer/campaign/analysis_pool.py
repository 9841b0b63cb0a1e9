"""Bucket analysis beside the fuzzing slots: a bounded pool of isolated workers.

A finding whose raw key has no known root cause is stored at once under its raw key with a
pending-analysis row (`Store.add_case_for_analysis`), and its analysis job comes here. Each pool
thread feeds its own `Worker` (pinned to a device like a slot), minimizes and attributes the job's
case (`BucketAnalyzer.analyze`) and hands back an `AnalysisResult`; its owner takes the results
(`take_results`) and files them (`divfuzz.fuzzer.campaign.bucket_folders.Filing.file_analysis`). The
pool gets jobs and returns results: it calls nothing above it. Invariants:
- the slots never wait for an analysis; the pool is bounded (its thread count) and its queue is
  the store's pending rows, so nothing is lost when the pool stops early (a result not yet filed
  stays pending too);
- the next job is the one `choose` picks from the queue when a thread is free (a campaign: bug
  first, then suspect by case count, `schedule.most_severe_first`); a job it passes over stays
  queued, and pending in the store when the pool ends;
- a job starts only while its `budget` (`schedule.AnalysisBudget`) gives it time; otherwise it
  stays pending in the store (`divfuzz minimize --pending`, or a resumed campaign, finishes it);
- `adopt` adds a worker started elsewhere (a fuzzing slot's, once drawing stops): no start-up;
- an aborted worker's job gives no result (its store row stays pending); divfuzz's own error in a
  job stops the pool and is kept (`error`), never put into a bucket.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from divfuzz.fuzzer.campaign.schedule import AnalysisBudget
from divfuzz.fuzzer.campaign.sizing import SlotDevice
from divfuzz.fuzzer.engine.worker import Worker
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey
from divfuzz.records.deadline import Deadline


@dataclass(frozen=True)
class AnalysisJob:
    """One open analysis: the raw key and the stored case whose spec is minimized, with that
    case's own verdict when this run ran it under the analysis's config (the stage ladder's last
    rung is then not compiled again: `analyze_finding`'s `case_verdict`)."""

    raw_key: BucketKey
    case_id: int
    spec: GraphSpec
    verdict: object | None = None  # divfuzz.records.verdict.Verdict


@dataclass(frozen=True)
class AnalysisResult:
    """A finished analysis, for its owner to file: the job, the root-cause key its analysis gave,
    and the analysis (`divfuzz.fuzzer.triage.analysis.Analysis`)."""

    job: AnalysisJob
    key: BucketKey
    analysis: object


@dataclass(frozen=True)
class AnalysisTiming:
    """One analysis the pool ran: when (time.time() timestamps, for the timings file), its
    minimization budget, its wall (time.monotonic()), whether it gave a result to file (an
    aborted one does not), its raw key's finding kind and severity rule, and its seconds and
    compiles per phase (`divfuzz.fuzzer.triage.phase_clock.PhaseTally.to_dict`, plus "other":
    the wall outside every phase), whose seconds add up to `wall_s`."""

    raw_key: str
    started: float
    ended: float
    budget_s: float
    minimize_s: float | None  # the minimizer's own wall (None: not minimized)
    filed: bool
    wall_s: float
    kind: str = ""
    rule: str = ""
    phases: dict = field(default_factory=dict)

    @property
    def compiles(self) -> int:
        return sum(p["compiles"] for p in self.phases.values())


def phases_with_other(phases: dict, wall_s: float) -> dict:
    """`phases` plus "other": the wall not inside any of them (never negative), so that the
    seconds add up to `wall_s` (to the millisecond)."""
    out = {name: dict(p) for name, p in phases.items()}
    inside = sum(p["s"] for p in out.values())
    other = out.setdefault("other", {"s": 0.0, "compiles": 0})
    other["s"] = round(other["s"] + max(0.0, wall_s - inside), 3)
    return out


def first_come(queued: list[AnalysisJob]) -> AnalysisJob | None:
    """The default choice: the oldest queued job."""
    return queued[0] if queued else None


class AnalysisPool:
    def __init__(self, places: list[SlotDevice], analyzer, *, budget: AnalysisBudget, worker_env: dict | None = None,
                 worker_factory: Callable[..., Worker] = Worker,
                 choose: Callable[[list[AnalysisJob]], AnalysisJob | None] = first_come):
        self.places = places
        self.analyzer = analyzer
        self.budget = budget
        self._results: list[AnalysisResult] = []
        self._error: tuple[BaseException, str] | None = None
        self.worker_env = dict(worker_env or {})
        self.worker_factory = worker_factory
        self.choose = choose
        self.workers: list[Worker] = []
        self.timings: list[AnalysisTiming] = []
        self._started: dict[int, float] = {}  # running jobs: thread ident -> time.monotonic() at start
        self._queue: list[AnalysisJob] = []
        self._running = 0
        self._closed = False  # no more jobs will come: threads end once the queue is empty
        self._aborted = False
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for place in self.places:
            self._add(self.worker_factory(place.worker_device, extra_env={**self.worker_env, **place.env}))

    def adopt(self, worker: Worker) -> bool:
        """Serve jobs with `worker`, started elsewhere for the same device and config (a fuzzing
        slot's, once it stops drawing). False (and the worker stopped) when the pool has ended."""
        with self._cond:
            if self._aborted:
                adopted = False
            else:
                adopted = True
                self._add(worker)
        if not adopted:
            worker.stop()
        return adopted

    def _add(self, worker: Worker) -> None:
        self.workers.append(worker)
        thread = threading.Thread(target=self._serve, args=(worker,), name=f"divfuzz-analysis-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def longest_running_s(self) -> float | None:
        """Seconds the oldest running analysis has run so far (None: none runs)."""
        with self._cond:
            started = min(self._started.values(), default=None)
        return None if started is None else time.monotonic() - started

    @property
    def size(self) -> int:
        """Workers serving jobs (the pool's own and the adopted ones)."""
        return len(self._threads)

    def submit(self, job: AnalysisJob) -> None:
        with self._cond:
            self._queue.append(job)
            self._cond.notify()

    @property
    def open_jobs(self) -> int:
        """Jobs queued or running (each is a pending row in the store until it is filed)."""
        with self._cond:
            return len(self._queue) + self._running

    def close(self) -> None:
        """No more jobs: each thread ends when the queue is empty (or when time is up)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def abort(self) -> None:
        """Stop now (interrupt, failure, the budget's grace is over): kill the workers; the jobs
        queued or running stay pending in the store."""
        with self._cond:
            self._aborted = True
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        for w in self.workers:
            w.abort()

    def take_results(self) -> list[AnalysisResult]:
        """The analyses finished since the last call, oldest first, for the owner to file."""
        with self._cond:
            results, self._results = self._results, []
        return results

    @property
    def error(self) -> tuple[BaseException, str] | None:
        """divfuzz's own first error in a job, with its traceback (the pool stopped then); None: none."""
        with self._cond:
            return self._error

    def _attribution_s(self) -> float | None:
        """Mean seconds of each finished analysis beyond its minimization (None: none finished)."""
        with self._cond:
            spent = [t.wall_s - t.minimize_s for t in self.timings if t.filed and t.minimize_s is not None]
        return sum(spent) / len(spent) if spent else None

    def poke(self) -> None:
        """Something `choose` reads changed (a case raised a pending bucket's severity): look again."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` (in all) for every thread to end; True when all have."""
        deadline = Deadline.after(timeout_s)
        for t in list(self._threads):
            t.join(deadline.left())
        return not any(t.is_alive() for t in self._threads)

    @property
    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def _next_job(self) -> tuple[AnalysisJob, float] | None:
        with self._cond:
            while True:
                if self._aborted:
                    return None
                job = self.choose(list(self._queue)) if self._queue else None
                if job is not None:
                    break
                if self._closed:  # nothing left that may run: what is queued stays pending in the store
                    return None
                self._cond.wait(0.5)
            budget = self.budget.for_next(self._attribution_s())
            if budget is None:  # no time left: what is queued stays pending in the store
                return None
            self._running += 1
            self._queue.remove(job)
            self._started[threading.get_ident()] = time.monotonic()
            return job, budget

    def _serve(self, worker: Worker) -> None:
        try:
            while True:
                nxt = self._next_job()
                if nxt is None:
                    return
                job, budget = nxt
                started, clock, filed, minimized, phases = time.time(), time.monotonic(), False, None, {}
                try:
                    key, analysis = self.analyzer.analyze(job.spec, job.raw_key, worker, budget_s=budget, case_verdict=job.verdict)
                    minimized = getattr(getattr(analysis, "minimized", None), "wall_s", None)
                    phases = getattr(analysis, "phases", None) or {}
                    filed = not worker.aborted  # an aborted analysis is not an answer: its row stays pending
                finally:
                    with self._cond:
                        wall = time.monotonic() - clock
                        self.timings.append(AnalysisTiming(str(job.raw_key), started, time.time(), budget, minimized, filed,
                                                           wall, job.raw_key.kind, job.raw_key.rule,
                                                           phases_with_other(phases, wall)))
                        if filed:
                            self._results.append(AnalysisResult(job, key, analysis))
                        self._running -= 1
                        self._started.pop(threading.get_ident(), None)
                        self._cond.notify_all()
        except Exception as e:  # divfuzz's own (the store, the minimizer, a worker's internal error): the pool stops
            with self._cond:
                if self._error is None:
                    self._error = (e, traceback.format_exc())
            self.abort()
        finally:
            worker.stop()
