"""`divfuzz minimize --pending`: finish the analyses a campaign left pending in its store, in a
pool of analysis workers, filed as the campaign files them (`bucket_folders.Filing.file_analysis`),
in the order a campaign's pool takes them (`schedule.most_severe_first`, every severity here).

Invariants: it holds the store's campaign lock throughout (no campaign runs on the store
meanwhile); a stored case's device, config and options are untrusted data, checked like
command-line input before any worker runs them; an analysis not finished within the budget stays
pending.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob, AnalysisPool
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.sizing import campaign_slot_devices, resolve_workers
from divfuzz.fuzzer.store import CampaignLock, Store, resolve_store
from divfuzz.generators.validate import load_spec
from divfuzz.records.config import CompileConfig
from divfuzz.records.deadline import Deadline
from divfuzz.records.errors import ConfigError, InternalError


@dataclass(frozen=True)
class PendingOutcome:
    filed: tuple  # (raw key, root-cause key, bucket id) of each analysis filed
    left: int  # still pending (the budget ran out)


def finish_pending(out_dir: Path, *, budget_s: float, workers: int | str = 1, timeout_s: float = 300.0,
                   minimize_budget_s: float = 120.0, log: Callable[[str], None] | None = None,
                   cli_backend: str | None = None) -> PendingOutcome:
    """`divfuzz minimize --pending`: finish the analyses a campaign left pending in `out_dir`'s
    store, in a pool of `workers` analysis workers, within `budget_s` (each analysis gets at most
    `minimize_budget_s`), filed as the campaign files them (`Filing.file_analysis`). Takes the store's
    campaign lock (no campaign may run on it meanwhile). The stored case's device and config are
    data: checked like command-line input before any worker runs them."""
    # lazy: heavy: the compile site and the triage import torch._dynamo; only `minimize --pending` needs them
    from divfuzz.fuzzer.engine.compile import check_stored_backend, validate_inductor_overrides
    # lazy: heavy: as above
    from divfuzz.fuzzer.triage.analysis import BucketAnalyzer

    path = resolve_store(out_dir, purpose="for --pending")
    lock = CampaignLock(path)
    lock.acquire()
    store = Store(path, create=False, read_only=False)  # files analyses: a writing command
    try:
        groups: dict[tuple, list[AnalysisJob]] = {}
        for p in store.pending_analyses():
            case = store.case(p.case_id)
            where = f"case {p.case_id} in {path}"
            config = CompileConfig.from_dict(case.config, where=f"the stored config of {where}")
            check_stored_backend(config.backend, cli_backend, source=where)  # an import path only when named by --backend
            validate_inductor_overrides(dict(config.inductor), where=f"the stored config of {where}")
            run = next(r for r in store.runs() if r["id"] == case.run_id)
            options = run["options"]
            oracle = options.get("oracle", "numeric")
            if oracle not in ("numeric", "perf") or not isinstance(options.get("strict", False), bool):
                raise ConfigError(f"{where}: run {case.run_id}'s options {options!r} are not a divfuzz campaign's")
            if case.device != "cpu" and not (case.device == "cuda" or case.device.startswith("cuda:") and case.device[5:].isdigit()):
                raise ConfigError(f"{where}: device {case.device!r} is not cpu, cuda or cuda:N")
            group = (case.device, json.dumps(case.config, sort_keys=True), options.get("strict", False), oracle,
                     options.get("perf_margin"))
            groups.setdefault(group, []).append(AnalysisJob(p.raw_key, p.case_id, load_spec(case.spec_json, source=where)))
        budget = schedule.AnalysisBudget(Deadline.after(budget_s), minimize_budget_s, campaign=False)
        filed: list = []
        filing = Filing(store, out_dir, timeout_s=timeout_s)
        for (device, config_json, strict, oracle, perf_margin), jobs in groups.items():
            config = CompileConfig.from_dict(json.loads(config_json))
            count = resolve_workers(workers, device)[0] if workers == "auto" else workers  # auto: sized as `fuzz` sizes its slots
            places = campaign_slot_devices(device, max(1, min(count, len(jobs))))
            analyzer = BucketAnalyzer(device=places[0].worker_device, config=config, strict=strict, budget_s=minimize_budget_s,
                                      timeout_s=timeout_s, oracle=oracle, perf_margin=perf_margin, log=None,
                                      span_factor=schedule.ANALYSIS_SPAN_FACTOR)

            def file_finished(pool: AnalysisPool, device=device, config=config) -> None:
                for done in pool.take_results():
                    result = filing.file_analysis(done.job, done.key, done.analysis, device=device, config=config)
                    filed.append((done.job.raw_key, done.key, result.bucket_id))
                    if log is not None:
                        log(f"bucket {result.bucket_id}: {done.job.raw_key} -> {done.key}")

            pool = AnalysisPool(places, analyzer, budget=budget,
                                choose=functools.partial(schedule.most_severe_first, store, campaign=False))
            pool.start()
            for job in jobs:
                pool.submit(job)
            pool.close()
            try:
                while not pool.done:
                    pool.wait(0.5)
                    file_finished(pool)
            except KeyboardInterrupt:
                pool.abort()
                pool.wait(30)
                raise
            file_finished(pool)  # what finished before its last thread ended (divfuzz's own error stops the pool)
            if pool.error is not None:
                error = pool.error[0]
                raise InternalError(f"divfuzz's own error while finishing pending analyses: {error}") from error
        return PendingOutcome(tuple(filed), store.pending_count())
    finally:
        store.close()
        lock.release()
