"""The campaign loop: Hypothesis draws graphs, workers judge them, the store keeps everything.

Each worker slot runs Hypothesis engines of `EPOCH_CASES` cases one after another (seeded from
the campaign seed, the slot and the epoch) in a thread that feeds one worker process;
`hypothesis.target` steers them towards larger findings (`target_score`). Invariants:
- same seed, same workers, same torch: the same cases in the same order (a campaign replays);
- each drawn spec runs with its input siblings (`inputs_per_compile - 1` copies under other
  recipes, `divfuzz.generators.input_siblings`) and, where it compiles for dynamic shapes, its
  shape siblings (`divfuzz.generators.shape_siblings`) through one compile, each a case stored at
  `idx * members_per_draw + j`; a group is stored before the next draw runs, and a resumed
  campaign skips stored cases (it re-draws them, checks the spec digests and feeds the stored
  scores to `target`);
- a case's path is one step after another (`divfuzz.fuzzer.campaign.case_steps`: run in the worker,
  judge, analyse in the slot, store, write a new bucket's folder, queue its analysis), called in
  order from `Campaign._run_case` (a group: `_run_group`); its severity is judged once;
- nothing the compiler under test does stops the campaign: it becomes a verdict;
- with minimization on, a new raw key's analysis (minimize + attribute) runs in the analysis pool
  (`divfuzz.fuzzer.campaign.analysis_pool`) beside the slots, never in them: the case is stored at once
  under its raw key, and the pool re-keys the raw bucket to its root cause when done, bug buckets
  first, never noise, by-design or eager-worse ones; a slot that stops drawing hands its worker to the pool.
  Analyses still open when the budget's work ends stay pending in the store, and a resumed
  campaign (or `divfuzz minimize --pending`: `divfuzz.fuzzer.campaign.pending`) finishes them. `analysis_workers=0` analyses inline
  in the slot instead; both end in the same buckets (`Store.resolve_root_cause`). On a fleet the pool's
  workers live on the nodes, on the Dask threads the slots leave free (`cluster.plan_analysis`), and
  the slots analyse inline only where no thread is free;
- `--budget` is kept (`divfuzz.fuzzer.campaign.schedule`): it counts from the command's start, drawing
  stops early enough for the cases in flight and the open bug analyses, and whatever is still in
  flight at `work_end` is dropped, as for an interrupt; it is the whole campaign's: a resumed run
  gets what its earlier sessions left (`spent_s` in its timings file, `spent_before`);
- a campaign bounded by `--max-cases` alone takes no other run's pending analyses: nothing would
  bound them (its own, a resume's, it finishes; the others stay pending for `minimize --pending`);
- anything divfuzz's own code raises (a slot thread, the store, the minimizer, a worker's
  internal error) stops it: the run is recorded `failed`, the traceback goes to a log file in
  `out_dir`, and `run` raises InternalError; it never becomes a bucket;
- one live campaign per store (`CampaignLock`).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed, settings, target

from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob, AnalysisPool
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.campaign_options import CampaignOptions, check_inputs_per_compile
from divfuzz.fuzzer.campaign.case_steps import (
    CaseAt,
    CaseRun,
    Judged,
    Ran,
    Stored,
    analyse_in_slot,
    judge,
    queue_analysis,
    run_group_in_worker,
    run_in_worker,
    store_case,
    write_new_bucket_folder,
)
from divfuzz.fuzzer.campaign.sizing import SlotDevice, campaign_slot_devices, size_analysis_workers
from divfuzz.records.deadline import Deadline, StopReason, wall_clock_of
from divfuzz.records.errors import ConfigError, DivfuzzError, InternalError, UnsafePathError
from divfuzz.fuzzer.store import STORE_NAME, CampaignLock, Store
from divfuzz.fuzzer.engine.environment import environment_versions
from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.engine.compile_cache import private_compile_cache, refuse_a_cache_inside
from divfuzz.fuzzer.engine.worker import Worker
from divfuzz.generators.coverage import DrawCounts
from divfuzz.generators.input_siblings import input_siblings
from divfuzz.generators.shape_siblings import shape_siblings
from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import load_spec
from divfuzz.records.outcomes import ends_group
from divfuzz.records.severity import Severity
from divfuzz.records.safe_paths import check_plain, read_text, write_atomic, write_text_plain
from divfuzz.reports.terminal import one_line, terminal_safe


# Cases per Hypothesis engine. Hypothesis bounds each pass of its target optimiser (a quarter of
# what is left of half its budget) only when max_examples >= 1000; with one engine of 10**9 examples
# a single pass could run for hours, hill-climbing one graph. Epochs of 1000 keep passes to a few
# hundred cases and let generation take over again.
EPOCH_CASES = 1000

# A slot whose last this many draws all repeated specs it had run stops: its options leave no
# graph it has not run (a narrow `--ops`/`--dtypes`/`--max-ops`), and it would otherwise draw
# repeats until the budget, or forever under `--max-cases` alone (a repeat is not a case).
REPEATS_BEFORE_EXHAUSTED = EPOCH_CASES


def compiled_a_graph(verdict) -> bool:
    """Whether a case ran a compile of its graph (its verdict has a "compile" span; a compile that
    failed cost one too): not an input sibling, which ran through its drawn spec's compile, nor a
    case whose eager failed first. The breakdown (`divfuzz.fuzzer.campaign.breakdown`) counts the
    stored cases the same way."""
    return any(name == "compile" for name, _ in verdict.timings)


class _StopCampaign(BaseException):
    """Raised inside a Hypothesis body to end that slot's loop (not a test failure)."""


@dataclass
class Progress:
    started: float = field(default_factory=time.monotonic)  # time.monotonic(): durations; stored as wall_clock_of(started)
    cases: int = 0
    skipped: int = 0  # stored by an earlier, interrupted run and not run again
    repeats: int = 0  # draws of a spec its slot already ran in this run: not run again, not cases
    graphs: int = 0  # cases that compiled their graph (`compiled_a_graph`); their input siblings ran through it
    exhausted_slots: int = 0  # slots stopped after REPEATS_BEFORE_EXHAUSTED repeats in a row
    by_status: Counter = field(default_factory=Counter)
    findings: int = 0
    new_buckets: int = 0
    buckets: set = field(default_factory=set)
    case_wall_s: float = 0.0
    timings: Counter = field(default_factory=Counter)
    bucket_severity: dict = field(default_factory=dict)  # bucket id -> its most severe case's severity in this run
    replays: int = 0  # of `cases` and `skipped`: known specs replayed (`fuzz --replay-known`), not drawn
    pending_analyses: int = 0  # bucket analyses queued or running in the analysis pool
    analyses_filed: int = 0  # analyses the pool finished and filed in this run
    drawing_stopped: float | None = None  # time.time() when the slots stopped drawing (budget or failure): stored
    spent_before: float = 0.0  # seconds a resumed run's earlier sessions spent of its budget (0: a new run)
    # Cases whose worker died under them and that then ran in a fresh worker without dying
    # (`Verdict.worker_deaths`): infrastructure events (a kill from outside, the OOM killer), never
    # findings; each {"slot", "idx", "deaths"}, kept in the run's timings file and said in its summary.
    worker_deaths: list = field(default_factory=list)

    def note_severity(self, bucket_id: int, severity) -> None:
        old = self.bucket_severity.get(bucket_id)
        if old is None or severity.rank < old.rank:
            self.bucket_severity[bucket_id] = severity

    @property
    def by_severity(self) -> Counter:
        """This run's buckets by severity value (bug, suspect, by-design, noise)."""
        return Counter(s.value for s in self.bucket_severity.values())


@dataclass(frozen=True)
class CampaignResult:
    run_id: int
    resumed: bool
    progress: Progress
    store_path: Path
    interrupted: bool
    cut_at_end: bool = False  # work still in flight when the budget's work ended was dropped
    pending_analyses: int = 0  # analyses left open in the store at the end (`minimize --pending`)
    pending_by_severity: dict = field(default_factory=dict)  # those, by their raw bucket's severity
    stop_reason: StopReason = StopReason.FINISHED  # interrupted; time's up (the budget stopped drawing); or finished


def compile_cache_env(versions: dict, device: str, out_dir: Path) -> dict:
    """The workers' `TORCHINDUCTOR_CACHE_DIR`: this user's own folder for this torch version and
    device (`divfuzz.fuzzer.engine.compile_cache.private_compile_cache`), never a folder beside the
    store: a store is data from anyone, and Inductor runs code from its cache (issue 40). It outlives
    a night where /tmp does not (a resume, `--replay-known`, each analysis's recompile of its case,
    the next night's repeats); Triton's cache lives inside it unless TRITON_CACHE_DIR is set; CPU
    kernels are also keyed by their vector ISA, `worker.key_compile_caches_by_cpu_isa`. The user's
    own TORCHINDUCTOR_CACHE_DIR wins: {} then, unless it lies inside the store folder `out_dir`
    (refused: `refuse_a_cache_inside`)."""
    refuse_a_cache_inside(out_dir)
    if user_compile_cache() is not None:
        return {}
    return {"TORCHINDUCTOR_CACHE_DIR": str(private_compile_cache(versions, device))}


def user_compile_cache() -> str | None:
    """The TORCHINDUCTOR_CACHE_DIR the user set, or None. Inductor writes its default into the
    environment the first time it asks for its cache folder (`cache_dir_utils.cache_dir`), so a
    value equal to that default is torch's, not the user's."""
    value = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not value:
        return None
    try:
        # lazy: heavy: torch._inductor, only to name the default cache folder
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # an older torch: take the value as the user's
        return value
    return None if os.path.abspath(value) == os.path.abspath(default_cache_dir()) else value


def slot_engines(strategy, campaign_seed: int, slot: int, body: Callable[[GraphSpec], None]):
    """Hypothesis engines for one slot, one per epoch of `EPOCH_CASES` cases, without end: `body`
    ends the slot by raising. Deterministic: same seed and slot, same engines."""
    for epoch in itertools.count():

        @settings(
            max_examples=EPOCH_CASES,
            phases=(Phase.generate, Phase.target),
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @seed(campaign_seed * 1009 + slot + 7919 * epoch)
        @given(strategy)
        def engine(spec: GraphSpec) -> None:
            body(spec)

        yield engine


class _SlotFull(BaseException):
    """Ends one slot's drawing in `slots_first_specs` (not an Exception: Hypothesis passes it on)."""


def slots_first_specs(strategy_of: Callable[[int], Any], campaign_seed: int, slots: int, per_slot: int, *,
                      skip: int = 0) -> list[list[GraphSpec]]:
    """The first `per_slot` distinct specs each of `slots` slots draws, in order, past its first
    `skip` draws: what a campaign of that seed would compile first (`slot_engines`, the strategy
    `strategy_of(slot)`). A spec an earlier slot drew is not drawn again. For benchmarks that
    compile the campaign's own graphs outside a campaign."""
    seen: set[str] = set()
    by_slot: list[list[GraphSpec]] = []
    for slot in range(slots):
        got: list[GraphSpec] = []
        drawn = 0

        def body(spec: GraphSpec) -> None:
            nonlocal drawn
            drawn += 1
            if drawn <= skip or spec.digest() in seen:
                return
            seen.add(spec.digest())
            got.append(spec)
            if len(got) >= per_slot:
                raise _SlotFull

        try:
            for engine in slot_engines(strategy_of(slot), campaign_seed, slot, body):
                engine()
        except _SlotFull:
            pass
        by_slot.append(got)
    return by_slot


def spent_before(out_dir: Path, run_id: int) -> float:
    """Seconds of its budget run `run_id` spent in its earlier sessions: `spent_s` of the timings
    file its last session wrote (untrusted: a number that is not finite and >= 0 reads 0, as does
    a missing file, the case of a session killed before it wrote one)."""
    path = out_dir / f"divfuzz-run{run_id}-timings.json"
    try:
        if not check_plain(path, what="timings file"):
            return 0.0
        value = json.loads(read_text(path, what="timings file")).get("spent_s")
    except (OSError, ValueError, RecursionError, AttributeError, UnsafePathError):
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        return 0.0
    return float(value)


def slot_quota(max_cases: int | None, workers: int, slot: int) -> int | None:
    """Cases for one slot: max_cases split evenly, the first slots taking the remainder."""
    if max_cases is None:
        return None
    return max_cases // workers + (1 if slot < max_cases % workers else 0)


class Campaign:
    def __init__(self, opts: CampaignOptions, *, on_progress: Callable[[Progress], None] | None = None, fleet=None):
        self.opts = opts
        self.fleet = fleet  # divfuzz.fuzzer.campaign.cluster.Fleet: the slots' workers live on a Dask cluster; None: here
        self.on_progress = on_progress or (lambda p: None)
        self.progress = Progress()
        self.stop = threading.Event()
        self.interrupted = threading.Event()  # Ctrl-C / SIGTERM: cases in flight are not stored
        self.slot_workers: list[Worker] = []
        self.lock = threading.Lock()
        self.failure: tuple[BaseException, str] | None = None  # divfuzz's own first error, with its traceback
        check_inputs_per_compile(opts)
        if fleet is None:  # before the store and any worker: a cache the user named inside the store folder
            refuse_a_cache_inside(opts.out_dir)
        self.slot_devices = fleet.slot_devices if fleet else campaign_slot_devices(opts.device, opts.workers)  # before the store: a bad device writes nothing
        if fleet is None:  # the workers' template imports torch while the store opens (a fleet's workers start on its nodes)
            warm_template.start_in_background(opts.device)
        opts.out_dir.mkdir(parents=True, exist_ok=True)
        self.store_lock = CampaignLock(opts.out_dir / STORE_NAME)
        self.store_lock.acquire()
        try:
            self.store = Store(opts.out_dir / STORE_NAME)
            self.filing = Filing(self.store, opts.out_dir, timeout_s=opts.timeout_s)
            versions = environment_versions(opts.device)
            self.run_id, self.resumed = self.store.start_run(
                seed=opts.seed,
                device=opts.device,
                config=opts.config.to_dict(),
                options=opts.identity(),
                versions=versions,
            )
            # What a kill left (a `.tmp-*` folder, a bucket without its folder or its first case) is put right before any draw.
            self.filing.finish_interrupted()
            # Every worker here (slots and analyses) gets its share of the cores and this user's own compile cache.
            self.worker_env = {"DIVFUZZ_WORKER_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, opts.workers))),
                               **(compile_cache_env(versions, opts.device, opts.out_dir) if fleet is None else {})}
        except BaseException:
            if getattr(self, "store", None) is not None:
                self.store.close()
            self.store_lock.release()
            raise
        # `deadline`: the budget's end; `work_end`: when every case and analysis still in flight is
        # dropped, leaving the finish (workers, summary, report) its reserve.
        self.spent_before = spent_before(opts.out_dir, self.run_id) if self.resumed else 0.0
        self.progress.spent_before = self.spent_before
        self.deadline = Deadline.after(opts.budget_s - self.spent_before if opts.budget_s else None, start=opts.budget_from)
        self.work_end = self.deadline.earlier_by(schedule.FINISH_RESERVE_S)
        self.cut_at_end = False
        # The finish, for `bench --breakdown`: when every slot had ended, when the analysis pool had
        # (time.time() timestamps: they are stored).
        self.slots_done_at: float | None = None
        self.pool_done_at: float | None = None
        self.case_walls: list[float] = []
        self.threads_per_worker = int(self.worker_env["DIVFUZZ_WORKER_THREADS"])
        self.analyzer = None
        self.pool: AnalysisPool | None = None
        self.inline_analysis = False
        if opts.minimize:  # one bucket per root cause: minimize + attribute each new raw key
            try:
                self._make_analysis_pool()
            except BaseException:
                self.close()
                raise
        self.case_run = self._case_run()

    def _case_run(self) -> CaseRun:
        """What each case's steps read (`divfuzz.fuzzer.campaign.case_steps`), fixed for this run."""
        opts = self.opts
        return CaseRun(store=self.store, filing=self.filing, run_id=self.run_id, out_dir=opts.out_dir, device=opts.device, config=opts.config,
                       strict=opts.strict, timeout_s=opts.timeout_s, profile=opts.profile, oracle=opts.oracle,
                       perf_margin=opts.perf_margin, against=opts.against, analyzer=self.analyzer, pool=self.pool,
                       inline_analysis=self.inline_analysis, minimize_budget_s=opts.minimize_budget_s,
                       work_end=self.work_end, interrupted=self.interrupted)

    def _make_analysis_pool(self) -> None:
        """The analyzer, and the pool of analysis workers (pinned round-robin after the slots, so
        GPUs share the load). An inline campaign still gets one pool worker for the analyses an
        earlier run left pending."""
        # lazy: heavy: the triage imports torch._dynamo; only a run that minimizes needs it
        from divfuzz.fuzzer.triage.analysis import BucketAnalyzer

        opts = self.opts
        # Every worker is pinned and sees its GPU as plain 'cuda' (or runs on the CPU).
        self.analyzer = BucketAnalyzer(device=self.slot_devices[0].worker_device, config=opts.config, strict=opts.strict,
                                       budget_s=opts.minimize_budget_s, timeout_s=opts.timeout_s,
                                       store=self.store, oracle=opts.oracle, perf_margin=opts.perf_margin,
                                       span_factor=schedule.ANALYSIS_SPAN_FACTOR, seeded_bisect=opts.analysis_cuts)
        count = opts.analysis_workers if opts.analysis_workers is not None else size_analysis_workers(opts.workers).workers
        if count < 0:
            raise ConfigError(f"Expected analysis_workers >= 0 but got analysis_workers={count!r}")
        self.pending_at_start = self.store.pending_analyses()
        if not opts.budget_s:  # --max-cases alone: only this run's own (a resume's), which its cases bound
            self.pending_at_start = [p for p in self.pending_at_start if self.store.case(p.case_id).run_id == self.run_id]
        factory = Worker
        if self.fleet is not None:
            # On a fleet the devices are the nodes': the pool's workers are processes on the nodes,
            # on the Dask threads the slots leave free (`Fleet.analysis_plans`): under auto every
            # one (the nodes were sized for them by one host's rule), else at most the count asked.
            # Where none is free, the slots analyse inline (their requests hold every thread).
            wanted = None if opts.analysis_workers is None else max(count, 1 if self.pending_at_start else 0)
            plans = self.fleet.analysis_plans(wanted)
            count = len(plans)
            self.inline_analysis = count == 0
            places = [p.where for p in plans]
            factory = self.fleet.analysis_worker_factory(plans)
        else:
            self.inline_analysis = count == 0
            if count == 0 and self.pending_at_start:
                count = 1
            places = campaign_slot_devices(opts.device, opts.workers + count)[opts.workers:]
        if count:
            self.pool = AnalysisPool(places, self.analyzer, budget=schedule.AnalysisBudget(self.work_end, opts.minimize_budget_s),
                                     worker_env=self.worker_env, worker_factory=factory,
                                     choose=functools.partial(schedule.most_severe_first, self.store, campaign=True))

    def run(self, before_slots: Callable[["Campaign"], None] | None = None) -> CampaignResult:
        """Run the slots to the end; `before_slots(self)` first, in this run (`fuzz --replay-known`)."""
        # Each slot sets its own event when it ends. The main thread waits on those, not on
        # `Thread.join`: in CPython before 3.13 a join interrupted by a signal can leave the
        # thread marked stopped while it still runs (so the store would be closed under it).
        done = [threading.Event() for _ in range(self.opts.workers)]
        threads = [
            threading.Thread(target=self._slot, args=(slot, done[slot]), name=f"divfuzz-slot-{slot}", daemon=True)
            for slot in range(self.opts.workers)
        ]
        interrupted = False
        try:
            self._start_pool()
            if before_slots is not None:
                self._before_slots(before_slots, done)
            for t in threads if self.failure is None else ():
                t.start()
            next_look = 0.0
            while not all(e.is_set() for e in done) and self.failure is None:
                # 0.2 s per look whatever the slot count (waiting 0.2 s on each slot would take 2.4 s with 12)
                waiting = next((e for e in done if not e.is_set()), None)
                if waiting is not None:
                    waiting.wait(0.2)
                self._file_analyses()
                now = time.monotonic()
                if self.work_end.expired():
                    self._cut_at_end(done)
                    break
                if self.work_end.bounded and not self.stop.is_set() and now >= next_look:  # a store query: once a second
                    next_look = now + 1.0
                    if self.work_end.left() <= 1.0 + self._drawing_reserve():  # the next look might come too late
                        self._stop_drawing()
            self.slots_done_at = time.time()
            self._drain_pool(done)
        except KeyboardInterrupt:
            interrupted = True
            self._interrupt(done)
        if self.pool is not None:  # no pool thread may touch the store once the run is closed
            self.pool.abort()
            self.pool.wait(30)
            self._file_analyses()  # what finished before the pool stopped
        self.pool_done_at = time.time()
        if self.failure is not None:
            self._interrupt(done)  # the other slots: their cases in flight are dropped, not stored
            self._record_failure()
        self.store.finish_run(self.run_id, "interrupted" if interrupted else "finished")
        pending = self.store.pending_count()
        by_severity = Counter(sev for sev, _ in self.store.pending_priorities().values())
        with self.lock:
            self.progress.pending_analyses = pending
        reason = (StopReason.INTERRUPTED if interrupted else
                  StopReason.TIME_UP if self.work_end.bounded and self.progress.drawing_stopped is not None else StopReason.FINISHED)
        self._write_timings(pending, by_severity, reason)
        return CampaignResult(self.run_id, self.resumed, self.progress, self.store.path, interrupted, self.cut_at_end,
                              pending, dict(by_severity), reason)

    def _measured(self) -> schedule.Measured:
        """This run's rates so far: a slow case's wall, and its finished analyses' walls."""
        with self.lock:
            case_s = schedule.percentile(self.case_walls, 0.9)
        if self.pool is None:
            return schedule.Measured(case_s=case_s)
        done = [t for t in self.pool.timings if t.filed]
        # The mean of the finished ones; while none has, the longest running (a lower bound). One
        # that runs long does not raise the estimate for those queued: each ends by its own
        # deadline (`schedule.ANALYSIS_SPAN_FACTOR`), which `analysis_budget` keeps before work_end.
        running = self.pool.longest_running_s()
        mean = sum(t.wall_s for t in done) / len(done) if done else None
        attribution = [t.wall_s - t.minimize_s for t in done if t.minimize_s is not None]
        return schedule.Measured(case_s=case_s, analysis_s=mean if mean is not None else (running or None),
                                 attribution_s=sum(attribution) / len(attribution) if attribution else None)

    def _drawing_reserve(self) -> float:
        """Seconds before `work_end` at which the slots stop drawing (`schedule.drawing_reserve`)."""
        opts = self.opts
        open_bugs = 0
        if self.pool is not None:
            open_bugs = sum(sev == "bug" for sev, _ in self.store.pending_priorities().values())
        # Once drawing stops, every slot's worker joins the pool's own.
        places = opts.workers + len(self.pool.places) if self.pool is not None else opts.workers
        return schedule.drawing_reserve(self._measured(), open_bug_analyses=open_bugs, places=places,
                                        minimize_budget_s=opts.minimize_budget_s, budget_s=opts.budget_s,
                                        minimize=self.pool is not None, start_floor=opts.analysis_cuts)

    def _stop_drawing(self) -> None:
        with self.lock:
            if self.progress.drawing_stopped is None:
                self.progress.drawing_stopped = time.time()
        self.stop.set()

    def _cut_at_end(self, done: list[threading.Event]) -> None:
        """`work_end`: drop what is in flight (cases redone on resume, analyses left pending)."""
        self.cut_at_end = True
        self._stop_drawing()
        self._interrupt(done)

    def _start_pool(self) -> None:
        """Start the analysis workers, with the analyses an earlier run left pending first."""
        if self.pool is None:
            return

        self.pool.start()
        for p in self.pending_at_start:  # the store is untrusted data: its spec is loaded as data, checked
            self.pool.submit(AnalysisJob(p.raw_key, p.case_id, load_spec(self.store.case(p.case_id).spec_json,
                                                                         source=f"case {p.case_id} in {self.store.path}")))
        with self.lock:
            self.progress.pending_analyses = len(self.pending_at_start)

    def _drain_pool(self, done: list[threading.Event]) -> None:
        """After the slots (whose workers joined the pool): let the pool finish what it may run,
        until `work_end`; what is still open then stays pending in the store."""
        if self.pool is None or self.failure is not None or self.interrupted.is_set():
            return
        self.pool.close()
        while not self.pool.done and self.failure is None:
            if self.work_end.expired():
                self._cut_at_end(done)
                break
            self.pool.wait(0.2)
            self._file_analyses()

    def _file_analyses(self) -> None:
        """File what the analysis pool finished (`_file_analysis`), in this thread; divfuzz's own
        error in the pool stops the run as a slot's does. Nothing once the run has failed."""
        if self.pool is None:
            return
        if self.pool.error is not None:
            self._fail(*self.pool.error)
        if self.failure is not None:
            return
        for result in self.pool.take_results():
            self._file_analysis(result.job, result.key, result.analysis)

    def _file_analysis(self, job: AnalysisJob, key, analysis) -> None:
        """A pool analysis is done: file it (`Filing.file_analysis`) and update this run's progress."""
        opts = self.opts
        filed = self.filing.file_analysis(job, key, analysis, device=opts.device, config=opts.config)
        with self.lock:
            p = self.progress
            p.pending_analyses = max(0, p.pending_analyses - 1)
            p.analyses_filed += 1
            raw_id = filed.raw_bucket_id
            if raw_id is not None and raw_id in p.buckets and raw_id != filed.bucket_id:
                p.buckets.discard(raw_id)
                p.buckets.add(filed.bucket_id)
                p.new_buckets -= 1  # merged into a root-cause bucket that already existed
            p.bucket_severity.pop(raw_id, None)
            if filed.severity is not None and filed.bucket_id is not None:
                p.bucket_severity[filed.bucket_id] = Severity(filed.severity)
        self.on_progress(self.progress)

    def _write_timings(self, pending: int, pending_by_severity: Counter, reason: StopReason) -> None:
        """`divfuzz-run<N>-timings.json` beside the store: what the store does not hold, for
        `divfuzz bench --breakdown` (the driver's time per stage, each analysis, the schedule)."""
        p = self.progress
        driver = dict(p.timings)
        stats = getattr(self.fleet, "stats", None)
        if stats is not None and stats.requests:  # a fleet's Dask round trips: a slot's wait outside its node's time
            driver["fleet_round_trip"] = stats.round_trip_s
        begun = wall_clock_of(self.opts.budget_from if self.opts.budget_from is not None else p.started)
        data = {
            "run_id": self.run_id, "workers": self.opts.workers, "budget_s": self.opts.budget_s,
            # of the budget, by every session of this run so far (a resume reads it: `spent_before`)
            "spent_s": round(self.spent_before + max(0.0, time.time() - begun), 3), "spent_before_s": round(self.spent_before, 3),
            "budget_from": None if self.opts.budget_from is None else wall_clock_of(self.opts.budget_from),
            "started": wall_clock_of(p.started), "ended": time.time(),
            "deadline": self.deadline.wall_clock(), "work_end": self.work_end.wall_clock(), "drawing_stopped": p.drawing_stopped,
            "slots_done": self.slots_done_at, "pool_done": self.pool_done_at,
            "cut_at_end": self.cut_at_end, "stop_reason": reason.value, "cases": p.cases, "repeats": p.repeats, "driver_timings": driver,
            "analysis_workers": (self.pool.size if self.pool is not None else 0),
            "analysis_workers_own": (len(self.pool.places) if self.pool is not None else 0),  # started for the pool, no slot's
            "analyses": [asdict(t) for t in (self.pool.timings if self.pool is not None else ())],
            "pending": pending, "pending_by_severity": dict(pending_by_severity),
            "worker_starts": warm_template.starts(),
            "worker_deaths_not_repeated": p.worker_deaths,
        }
        path = self.opts.out_dir / f"divfuzz-run{self.run_id}-timings.json"
        try:  # a temporary file of its own, renamed over: nothing planted there is followed or written through
            write_atomic(path, json.dumps(data, indent=1), what="timings file")
        except OSError:  # a full or read-only disk: the run's results are in the store already
            pass
        except UnsafePathError as e:  # a link or a FIFO planted under its name: left as it is, said
            sys.stderr.write(terminal_safe(f"divfuzz: the run's timings were not written: {e}") + "\n")

    def _before_slots(self, fn: Callable[["Campaign"], None], done: list[threading.Event]) -> None:
        """Work before any slot starts: its own errors stop the campaign as a slot's do, and an
        interrupt or a failure finds no slot to wait for."""
        try:
            fn(self)
        except KeyboardInterrupt:
            for e in done:
                e.set()
            raise
        except Exception as e:
            self._fail(e)
            for ev in done:
                ev.set()

    def run_case(self, spec: GraphSpec, worker: Worker, *, slot: int, idx: int) -> None:
        """One case outside the Hypothesis slots (`divfuzz.fuzzer.campaign.replay_known`), judged, analysed
        and stored in this run like any other; already stored at (slot, idx) with this spec: skipped."""
        stored = self.store.stored_case(self.run_id, slot, idx)
        if stored is not None and stored[0] == spec.digest():
            with self.lock:
                self.progress.skipped += 1
            return
        self._run_case(CaseAt(slot, idx, self.slot_devices[0]), spec, worker, steer=False)

    def close(self) -> None:
        """Close the store and give up the store's lock (another campaign may then use it)."""
        self.store.close()
        self.store_lock.release()

    def _fail(self, error: BaseException, trace: str | None = None) -> None:
        """A slot (or the analysis pool, with its `trace`) hit divfuzz's own error: keep the first,
        and stop every slot."""
        with self.lock:
            if self.failure is None:
                details = getattr(error, "details", "")
                trace = traceback.format_exc() if trace is None else trace
                self.failure = (error, trace + (f"\nin the worker:\n{details}" if details else ""))
        self.interrupted.set()
        self.stop.set()

    def _record_failure(self) -> None:
        """Write the traceback to a log in out_dir, mark the run failed, raise one line naming both."""
        error, trace = self.failure
        what = one_line(str(error) if isinstance(error, DivfuzzError) else f"{type(error).__name__}: {error}")
        text = f"divfuzz run {self.run_id} failed at {time.strftime('%Y-%m-%d %H:%M:%S')}: {what}\n\n{trace}"
        log = self.opts.out_dir / f"divfuzz-run{self.run_id}-failure.log"
        try:
            write_text_plain(log, text, what="failure log")
        except (OSError, UnsafePathError):  # a full or read-only disk, or a link planted there: the log goes where it can
            fd, name = tempfile.mkstemp(prefix=f"divfuzz-run{self.run_id}-failure-", suffix=".log")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            log = Path(name)
        recorded = f"run {self.run_id} recorded failed"
        try:
            self.store.fail_run(self.run_id, what, str(log))
        except DivfuzzError as e:
            recorded = f"run {self.run_id} could not be recorded failed ({e})"
        raise InternalError(f"divfuzz stopped on its own error, not a compiler finding: {what}; {recorded}; traceback in {log}")

    def _interrupt(self, done: list[threading.Event]) -> None:
        """Stop now: the cases in flight are dropped (a resumed run runs them again), never stored
        as crashes or hangs. Further interrupts while the slots wind down are absorbed."""
        self.interrupted.set()
        self.stop.set()
        with self.lock:
            workers = list(self.slot_workers)
        for w in workers:
            w.abort()
        if self.pool is not None:  # open analyses stay pending in the store
            self.pool.abort()
        wind_down = Deadline.after(30)
        while not all(e.is_set() for e in done) and not wind_down.expired():
            try:
                for e in done:
                    e.wait(0.2)
            except KeyboardInterrupt:
                continue

    # ---- one slot: Hypothesis engines feeding one worker -----------------------------------------
    def _slot(self, slot: int, done: threading.Event) -> None:
        try:
            self._slot_cases(slot)
        except Exception as e:  # outside a case: starting the worker, drawing specs
            self._fail(e)
        finally:
            done.set()

    def _slot_cases(self, slot: int) -> None:
        opts = self.opts
        quota = slot_quota(opts.max_cases, opts.workers, slot)
        if quota == 0:
            return
        where = self.slot_devices[slot]
        new_worker = functools.partial(self.fleet.worker, slot) if self.fleet else Worker
        worker = new_worker(where.worker_device, extra_env={**self.worker_env, **where.env})
        with self.lock:
            self.slot_workers.append(worker)
        counter = itertools.count()
        used = [0]  # the slot's cases toward its quota: run or stored, not repeats
        per_compile = opts.inputs_per_compile
        last_exit = [time.perf_counter()]
        coverage = DrawCounts()  # this slot's own: its cases stay a function of seed and slot (divfuzz.generators.coverage)
        # The score of each spec this slot ran (or found stored) in this run, by digest. Hypothesis
        # draws the same spec again from other choices (14% of a slot's first 200 draws on the CUDA
        # strategy, seed 11): a repeat on the same slot, so the same device and config, would
        # compile to the same program and give the same verdict, so it is not run again; its
        # engine is fed the first run's score, as a run would have fed it. Within one slot only:
        # the slot's draws stay a function of seed and slot (no other slot's timing), and a
        # resume re-draws the first copy (stored: skipped) before its repeats.
        scores: dict[str, float] = {}
        steer: dict[str, float] = {}  # what each drawn spec fed its engine: its group's best score
        repeats_in_a_row = [0]

        def body(spec: GraphSpec) -> None:
            with self.lock:  # time Hypothesis spent drawing this spec since the last case
                self.progress.timings["generate"] += time.perf_counter() - last_exit[0]
            if self.stop.is_set():
                raise _StopCampaign
            idx = next(counter)  # the draw's place in the slot: repeats too (a resume's stored rows line up)
            digest = spec.digest()
            # The drawn spec, its input siblings, then (compiled for dynamic shapes) its shape
            # siblings: member j is stored at idx * members_per_draw + j.
            group = [spec, *input_siblings(spec, per_compile), *shape_siblings(spec)] if per_compile > 1 else [spec]
            if quota is not None and digest not in scores:
                if used[0] >= quota:
                    raise _StopCampaign
                group = group[: quota - used[0]]
            target(coverage.novelty(spec), label="coverage")  # run, skipped or repeated alike: a resume re-draws the same
            coverage.note(spec)
            if digest in scores:
                repeats_in_a_row[0] += 1
                with self.lock:
                    self.progress.repeats += 1
                    if repeats_in_a_row[0] >= REPEATS_BEFORE_EXHAUSTED:
                        self.progress.exhausted_slots += 1
                        raise _StopCampaign
                target(steer.get(digest, scores[digest]))
                last_exit[0] = time.perf_counter()
                return
            repeats_in_a_row[0] = 0
            try:
                todo, members = self._members_to_run(slot, idx, where, group, scores)
                if todo:
                    ran = self._run_group(todo, worker) if len(todo) > 1 else self._run_one(todo[0], worker)
                    scores.update(ran)
                    members += list(ran)
                used[0] += len(members)  # a member the group never ran (it ended early) is no case: the quota keeps it
                if members:  # the group's best: a graph whose siblings' inputs diverge is worth drawing near
                    steer[digest] = max(scores[d] for d in members)
                    target(steer[digest])
            except Exception as e:  # divfuzz's own: the store, the minimizer, a worker's internal error
                self._fail(e)
                raise _StopCampaign from None  # not a test failure: Hypothesis must not replay it
            last_exit[0] = time.perf_counter()
            if self.work_end.expired():
                self._stop_drawing()

        try:
            for engine in slot_engines(opts.strategy(slot), opts.seed, slot, body):
                engine()
        except _StopCampaign:
            pass
        finally:
            # Drawing is over for this slot: its warm worker minimizes (bug buckets first) beside the pool's.
            if self.pool is None or self.interrupted.is_set() or not self.pool.adopt(worker):
                worker.stop()

    def _members_to_run(self, slot: int, idx: int, where: SlotDevice, group: list[GraphSpec],
                        scores: dict[str, float]) -> tuple[list[tuple[CaseAt, GraphSpec]], list[str]]:
        """The members of draw `idx`'s group still to run, and the digests of those an earlier run
        stored (skipped: their scores join `scores`). A member after a stored one that ended its
        group (`ends_group`) never ran and does not now; a member this slot already ran in this
        run (a sibling equal to an earlier spec) is not run again."""
        todo, stored_members = [], []
        for j, member in enumerate(group):
            at = CaseAt(slot, idx * self.opts.members_per_draw + j, where)
            stored = self.store.stored_case(self.run_id, slot, at.idx)
            if stored is not None and stored[0] == member.digest():
                with self.lock:
                    self.progress.skipped += 1
                scores[member.digest()] = stored[1]
                stored_members.append(member.digest())
                row = self.store.case_at(self.run_id, slot, at.idx)
                if row is not None and ends_group(row.status, first=j == 0):
                    break
            elif member.digest() not in scores:
                todo.append((at, member))
        return todo, stored_members

    # ---- one case, top to bottom: the steps of `divfuzz.fuzzer.campaign.case_steps` -----------------
    def _run_case(self, at: CaseAt, spec: GraphSpec, worker: Worker, *, steer: bool = True) -> float | None:
        """Run one case to its stored row, and return its score; None when nothing was stored:
        once the campaign is interrupted (the case in flight, or its analysis, was cut short; a
        resumed run redoes it). `steer`: feed its score to Hypothesis (only inside a slot's engine)."""
        ran = run_in_worker(self.case_run, at, spec, worker)
        if ran is None:
            return None
        with self.lock:
            self.progress.graphs += compiled_a_graph(ran.verdict)
            self.case_walls.append(ran.wall_s)
        score = self._after_worker(spec, ran, worker)
        if score is not None and steer:
            target(score)
        return score

    def _run_one(self, member: tuple[CaseAt, GraphSpec], worker: Worker) -> dict[str, float]:
        """`_run_case` of a slot's one member to run, unsteered (the slot steers): its score by digest."""
        score = self._run_case(*member, worker, steer=False)
        return {} if score is None else {member[1].digest(): score}

    def _run_group(self, members: list[tuple[CaseAt, GraphSpec]], worker: Worker) -> dict[str, float]:
        """Run a drawn spec and its input siblings through one compile (`run_group_in_worker`), then
        each member that ran to its stored row as a case of its own; return their scores by digest
        (none once the campaign is interrupted). The group's wall counts once among the case walls
        (the drain before the budget's end waits for a whole group). The analyses its members
        open are handed to the pool once every member is stored (each raw key holds one severity
        rule, so the member that opened it shows what its bucket says)."""
        rans = run_group_in_worker(self.case_run, members, worker)
        if rans is None:
            return {}
        with self.lock:
            self.progress.graphs += bool(rans) and compiled_a_graph(rans[0].verdict)
            self.case_walls.append(sum(r.wall_s for r in rans))
        scores = {}
        opened: list[tuple] = []
        for (_, spec), ran in zip(members, rans):
            score = self._after_worker(spec, ran, worker, opened=opened)
            if score is None:
                break
            scores[spec.digest()] = score
        for step in opened:
            queue_analysis(self.case_run, *step)
        return scores

    def _after_worker(self, spec: GraphSpec, ran: Ran, worker: Worker, opened: list | None = None) -> float | None:
        """A case's steps after the worker: judged, analysed in the slot where it is, stored, its
        bucket folder written, its analysis queued (or, given `opened`, its `queue_analysis`
        arguments added there for the caller to queue); its score, None when the campaign was
        interrupted meanwhile (nothing stored)."""
        run = self.case_run
        t_analysis = time.perf_counter()
        judged = judge(run, spec, ran.verdict)
        keyed = analyse_in_slot(run, spec, judged, worker)
        if keyed is None:
            return None
        stored = store_case(run, spec, ran, judged, keyed)
        write_new_bucket_folder(run, spec, ran, keyed, stored)
        self._note_stored(stored)  # before the pool may file its analysis
        if opened is None:
            queue_analysis(run, spec, ran, judged, stored)
        else:
            opened.append((spec, ran, judged, stored))
        self._report_progress(ran, judged, stored, t_analysis=time.perf_counter() - t_analysis - stored.store_s)
        return judged.score

    def _note_stored(self, stored: Stored) -> None:
        """This run's progress learns a stored case's severity and the analysis it opened."""
        with self.lock:
            if stored.severity is not None:
                self.progress.note_severity(stored.bucket_id, stored.severity)
            if stored.queued:
                self.progress.pending_analyses += 1

    def _report_progress(self, ran: Ran, judged: Judged, stored: Stored, *, t_analysis: float) -> None:
        verdict, wall = ran.verdict, ran.wall_s
        with self.lock:
            p = self.progress
            p.cases += 1
            p.by_status[verdict.status.value] += 1
            p.case_wall_s += wall
            for name, seconds in verdict.timings:
                p.timings[name] += seconds
            p.timings["worker_ipc"] += ran.ipc_s
            p.timings["store"] += stored.store_s
            p.timings["minimize_and_files"] += t_analysis
            if verdict.worker_deaths:
                p.worker_deaths.append({"slot": ran.at.slot, "idx": ran.at.idx, "deaths": list(verdict.worker_deaths)})
            if judged.finding:
                p.findings += 1
                p.buckets.add(stored.bucket_id)
            if stored.is_new:
                p.new_buckets += 1
        self.on_progress(self.progress)


def run_campaign(opts: CampaignOptions, on_progress: Callable[[Progress], None] | None = None,
                 before_slots: Callable[[Campaign], None] | None = None, fleet=None) -> CampaignResult:
    campaign = Campaign(opts, on_progress=on_progress, fleet=fleet)
    try:
        return campaign.run(before_slots)
    finally:
        campaign.close()
