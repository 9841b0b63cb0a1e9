"""One case's path through a campaign, one function per step, called in this order by
`Campaign._run_case` (the slot drew the spec):

    run_in_worker -> judge -> analyse_in_slot -> store_case -> write_new_bucket_folder -> queue_analysis

(`run_group_in_worker` replaces the first step for a drawn spec and its input siblings, which
one compile serves; each member then takes the other steps as a case of its own.)

Each step takes what the steps before it gave and returns a frozen record; none reads or writes
the campaign's progress (the campaign records it from these records). Invariants:
- a case is judged once (`judge`: its severity reason, whose rule goes into its raw key); the
  severity it is counted under is its bucket's as stored (`Filing.store_case` judges a bucket's
  from its key, once, and stores it), never judged again from the verdict;
- a finding the pool analyses (or one no campaign minimizes) is stored at once under its raw key,
  or its root cause when that is known, and queued only after its bucket folder is written (the
  pool's re-keying replaces that folder);
- nothing is stored once the campaign is interrupted (the case or its analysis was cut short).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob, AnalysisPool
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.reports.kill_points import kill_point
from divfuzz.fuzzer.campaign.sizing import SlotDevice
from divfuzz.fuzzer.store import Store
from divfuzz.fuzzer.engine.worker import CaseRequest, CaseWorker
from divfuzz.generators.spec import GraphSpec
from divfuzz.fuzzer.finding.judgement import judge as judge_run
from divfuzz.oracles.findings import target_score
from divfuzz.oracles.severity_policy import key_severity
from divfuzz.records.buckets import BucketKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.deadline import Deadline
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Finding, Verdict


@dataclass(frozen=True)
class CaseAt:
    """Where a case sits in the campaign: its slot, its index in the slot, the slot's device."""

    slot: int
    idx: int
    where: SlotDevice


@dataclass(frozen=True)
class CaseRun:
    """What every case of one campaign run shares, fixed when the run starts."""

    store: Store
    filing: Filing  # the one owner of storing cases, filing analyses and writing bucket folders
    run_id: int
    out_dir: Path
    device: str
    config: CompileConfig
    strict: bool
    timeout_s: float
    profile: bool
    oracle: str
    perf_margin: float | None
    against: CompileConfig | None
    analyzer: object | None  # divfuzz.fuzzer.triage.analysis.BucketAnalyzer with minimization on, else None
    pool: AnalysisPool | None
    inline_analysis: bool  # the slot analyses its own findings (`analysis_workers=0`, or a fleet)
    minimize_budget_s: float
    work_end: Deadline  # the campaign's: when work in flight is dropped (never, without a budget)
    interrupted: threading.Event


@dataclass(frozen=True)
class Ran:
    """A case's verdict from the worker, its wall time (not the worker's start-up), where it ran,
    and its worker round trip (pipe, (de)serialising, what the worker does outside its spans)."""

    verdict: Verdict
    wall_s: float
    at: CaseAt
    ipc_s: float
    output: str = ""  # what the compiler printed in the worker while it ran (a group's: each member's)


@dataclass(frozen=True)
class Judged:
    """A verdict judged: its finding (None when compiled agrees well enough), its severity reason
    (judged once, here), raw bucket key, Hypothesis score, and whether the pool (not the slot)
    analyses it."""

    finding: Finding | None
    reason: SeverityReason | None
    raw_key: BucketKey | None
    score: float
    for_pool: bool


@dataclass(frozen=True)
class Keyed:
    """The key a case is stored under, and the analysis that found it (None: none ran in the slot)."""

    key: BucketKey | None
    analysis: object | None  # divfuzz.fuzzer.triage.analysis.Analysis


@dataclass(frozen=True)
class Stored:
    """A case's committed row: its bucket, the key and severity it is stored under, and whether it
    opened its raw key's pending analysis."""

    case_id: int
    bucket_id: int | None
    is_new: bool
    key: BucketKey | None
    severity: Severity | None
    queued: bool
    store_s: float


def run_in_worker(run: CaseRun, at: CaseAt, spec: GraphSpec, worker: CaseWorker) -> Ran | None:
    """Eager vs compiled vs fp64 in the slot's worker. None when the campaign was interrupted
    meanwhile: its worker was killed under it, not a finding (a resumed run runs it again)."""
    t0 = time.perf_counter()
    startup_before = worker.startup_s
    request = CaseRequest(spec, at.where.worker_device, run.config, profile=run.profile, oracle=run.oracle,
                          perf_margin=run.perf_margin, against=run.against)
    verdict = worker.run(request, run.timeout_s)
    wall = time.perf_counter() - t0 - (worker.startup_s - startup_before)
    if run.interrupted.is_set():
        return None
    ipc = max(0.0, wall - verdict.span_seconds())
    return Ran(verdict, wall, where_it_ran(at, worker), ipc, worker.last_output)


def where_it_ran(at: CaseAt, worker: CaseWorker) -> CaseAt:
    """`at`, on the device the slot's worker is on now: a fleet slot moves when its node is lost
    (`ClusterWorker.where`), and a case records the node it ran on, not the plan's."""
    moved = worker.where
    return replace(at, where=moved) if moved is not None and moved != at.where else at


def run_group_in_worker(run: CaseRun, members: list[tuple[CaseAt, GraphSpec]], worker: CaseWorker) -> list[Ran] | None:
    """A drawn spec and its input siblings (`members`, the first compiled, the rest run through
    its compile: `Worker.run_group`) in the slot's worker: a `Ran` per member that ran, in order,
    each with its own wall (the seconds since the member before it). None when the campaign was
    interrupted meanwhile, as `run_in_worker`."""
    (at, spec), *rest = members
    request = CaseRequest(spec, at.where.worker_device, run.config, profile=run.profile, oracle=run.oracle,
                          perf_margin=run.perf_margin, against=run.against, siblings=tuple(s for _, s in rest))
    got = worker.run_group(request, run.timeout_s)  # its seconds start after any (re)start of the worker
    if run.interrupted.is_set():
        return None
    return [Ran(verdict, seconds, where_it_ran(member_at, worker), max(0.0, seconds - verdict.span_seconds()),
                worker.last_output) for (member_at, _), (verdict, seconds) in zip(members, got)]


def judge(run: CaseRun, spec: GraphSpec, verdict: Verdict) -> Judged:
    """The finding, its severity, raw key and score; a finding goes to the pool when a pool
    analyses this campaign's findings, or when its severity is one no campaign minimizes (noise,
    inline too)."""
    judged = judge_run(verdict, spec=spec, device=run.device, strict=run.strict, findings_only=True)  # judged once
    finding, raw_key = judged.finding, judged.key
    reason = judged.reason if finding else None
    for_pool = raw_key is not None and run.analyzer is not None and (
        not run.inline_analysis or key_severity(raw_key) in schedule.NOT_MINIMIZED)
    return Judged(finding, reason, raw_key, target_score(verdict, finding), for_pool)


def analyse_in_slot(run: CaseRun, spec: GraphSpec, judged: Judged, worker: CaseWorker) -> Keyed | None:
    """With minimization in the slot: the root-cause key of the raw key (minimized and attributed
    once per raw key, within what is left of the budget), filed as the pool files its answers (a
    raw bucket left pending joins it). The raw key unchanged otherwise; None when the campaign
    was interrupted meanwhile (nothing half-done is stored)."""
    if judged.for_pool:
        return Keyed(judged.raw_key, None)
    key, analysis = judged.raw_key, None
    if key is not None and run.analyzer is not None:
        budget = run.minimize_budget_s
        if run.work_end.bounded:  # only what is left of the campaign's budget, its filing included
            budget = max(1.0, min(budget, run.work_end.left() - schedule.ANALYSIS_FILING_S))
        key, analysis = run.analyzer.key_for(spec, judged.raw_key, worker, budget_s=budget)
    if run.interrupted.is_set():
        return None
    if analysis is not None:
        run.filing.file_in_slot(judged.raw_key, key)
    return Keyed(key, analysis)


def store_case(run: CaseRun, spec: GraphSpec, ran: Ran, judged: Judged, keyed: Keyed) -> Stored:
    """One committed row and its bucket's update (`Filing.store_case`). A finding for the pool goes
    in for analysis (under a known root cause, else its raw key, opening its pending analysis);
    any other case under `keyed.key`."""
    t0 = time.perf_counter()
    row = dict(run_id=run.run_id, slot=ran.at.slot, idx=ran.at.idx, spec_digest=spec.digest(), spec_json=spec.to_json(indent=None),
               device=run.device, config=run.config.to_dict(), verdict=ran.verdict.to_dict(), score=judged.score,
               wall_s=ran.wall_s, finding_kind=judged.finding.kind.value if judged.finding else None, ran_on=ran.at.where.name)
    shown = judged.reason.to_dict() if judged.reason is not None else None
    filed = run.filing.store_case(row, key=keyed.key, raw_key=judged.raw_key, triage=judged.finding.triage if judged.finding else "",
                                  severity=shown, for_analysis=judged.for_pool)
    return Stored(filed.case_id, filed.bucket_id, filed.is_new, filed.key, filed.severity, filed.queued, time.perf_counter() - t0)


def write_new_bucket_folder(run: CaseRun, spec: GraphSpec, ran: Ran, keyed: Keyed, stored: Stored) -> None:
    """A new bucket's folder (`Filing.write_folder`): the analysis in the slot's, or the case as drawn."""
    if stored.is_new:
        kill_point("case-stored")
        run.filing.write_folder(bucket_id=stored.bucket_id, case_id=stored.case_id, key=stored.key, spec=spec,
                                verdict=ran.verdict, analysis=keyed.analysis, device=run.device, config=run.config,
                                case_output=ran.output)


def queue_analysis(run: CaseRun, spec: GraphSpec, ran: Ran, judged: Judged, stored: Stored) -> None:
    """Hand the pool the analysis this case opened, with the case's verdict (a run of the spec
    under the analysis's config; not so with `--against`, whose verdict judges two compilers);
    else let the pool re-rank (the raw bucket's severity or count may have risen). Without a pool
    the analysis stays pending in the store."""
    if run.pool is None or not judged.for_pool:
        return
    if stored.queued:
        run.pool.submit(AnalysisJob(judged.raw_key, stored.case_id, spec, ran.verdict if run.against is None else None))
    else:
        run.pool.poke()
