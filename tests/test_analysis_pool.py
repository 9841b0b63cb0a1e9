"""Bucket analysis in its own pool beside the fuzzing slots (issue 11: minimization never stalls fuzzing).

Real campaigns with a planted backend (`ulp_bump`: every bf16 case is a finding), real workers,
the real SQLite store and the real `divfuzz minimize --pending` command.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import divfuzz.fuzzer.campaign.loop as loop
from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.campaign.sizing import ANALYSIS_MIN_FUZZING_SHARE, size_analysis_workers
from divfuzz.records.config import CompileConfig

ROOT = Path(__file__).resolve().parent.parent


def test_analysis_workers_auto_leaves_fuzzing_at_least_70_percent_of_the_workers():
    for slots in range(1, 65):
        pool = size_analysis_workers(slots).workers
        assert pool >= 1
        if slots >= 3:  # below 3 slots the floor of one analysis worker decides
            assert slots / (slots + pool) >= ANALYSIS_MIN_FUZZING_SHARE, (slots, pool)
            assert slots / (slots + pool + 1) < ANALYSIS_MIN_FUZZING_SHARE, (slots, pool)  # and not fewer than the rule allows
    assert [size_analysis_workers(w).workers for w in (1, 8, 12, 16)] == [1, 3, 5, 6]


def _opts(out: Path, **kw) -> CampaignOptions:
    return CampaignOptions(device="cpu", out_dir=out, seed=3, dtypes=("bfloat16",), minimize=True, minimize_budget_s=60,
                           config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"), **kw)


def _buckets(out: Path):
    store = Store(out / STORE_NAME, create=False)
    try:
        return store.buckets(), store.pending_count(), store.run_stats(store.latest_run_id())["cases"]
    finally:
        store.close()


@pytest.mark.slow
def test_a_pool_campaign_stores_every_case_and_ends_in_the_inline_buckets(tmp_path):
    inline = run_campaign(_opts(tmp_path / "inline", max_cases=4, analysis_workers=0))
    pooled = run_campaign(_opts(tmp_path / "pool", max_cases=4, analysis_workers=1))
    assert pooled.progress.cases == inline.progress.cases == 4
    assert pooled.progress.analyses_filed >= 1
    a, a_pending, a_cases = _buckets(tmp_path / "inline")
    b, b_pending, b_cases = _buckets(tmp_path / "pool")
    assert a_cases == b_cases == 4 and a_pending == b_pending == pooled.pending_analyses
    # Every bucket is a root cause, except noise ones: a campaign never minimizes those (inline neither).
    assert all(("@" in x.key.signature) == (x.severity != "noise") for x in a + b)
    assert {(str(x.key), x.count, x.severity) for x in a} == {(str(x.key), x.count, x.severity) for x in b}
    assert all(x.minimized is not None and (Path(x.folder) / "repro.py").exists() for x in b if x.severity != "noise")
    # The raw buckets' folders were replaced by the minimized ones: one folder per bucket.
    assert sorted(p.name for p in (tmp_path / "pool" / "buckets").iterdir()) == sorted(Path(x.folder).name for x in b)


def _campaign_leaving_analyses_pending(out: Path, monkeypatch) -> loop.CampaignResult:
    # No analysis fits in what is left of the budget (an analysis needs more than the whole
    # budget here): every one stays pending, however slow the host.
    monkeypatch.setattr(schedule, "MIN_ANALYSIS_S", 10_000.0)
    result = run_campaign(_opts(out, budget_s=600.0, max_cases=2, analysis_workers=1))
    monkeypatch.undo()
    return result


def test_a_budget_that_ends_with_analyses_open_stores_every_case_and_leaves_them_pending(tmp_path, monkeypatch):
    result = _campaign_leaving_analyses_pending(tmp_path, monkeypatch)
    buckets, pending, cases = _buckets(tmp_path)
    assert not result.interrupted and cases == result.progress.cases == 2
    assert pending == result.pending_analyses == len(buckets) >= 1  # one open analysis per raw key
    assert all("@" not in b.key.signature and b.minimized is None for b in buckets)  # stored under raw keys
    assert sum(b.count for b in buckets) == result.progress.findings >= 1  # every finding is in a bucket, none lost


@pytest.mark.slow
def test_minimize_pending_files_what_the_campaign_left_open(tmp_path, monkeypatch):
    result = _campaign_leaving_analyses_pending(tmp_path, monkeypatch)
    assert result.pending_analyses >= 1
    done = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "minimize", "--pending", "--store", str(tmp_path), "--budget", "20m",
                           "--backend", "divfuzz.fuzzer.engine.planted:ulp_bump"],  # a stored import path runs only when named
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{result.pending_analyses} pending analyses filed; 0 still pending" in " ".join(done.stdout.split()) or \
        "1 pending analysis filed; 0 still pending" in " ".join(done.stdout.split()), done.stdout
    buckets, pending, cases = _buckets(tmp_path)
    assert pending == 0 and sum(b.count for b in buckets) == result.progress.findings and cases == result.progress.cases
    assert all("@" in b.key.signature and b.minimized is not None for b in buckets)
    assert all((Path(b.folder) / "repro.py").exists() and (Path(b.folder) / "analysis.json").exists() for b in buckets)


@pytest.mark.slow
def test_a_later_campaign_on_the_store_finishes_the_pending_analyses(tmp_path, monkeypatch):
    first = _campaign_leaving_analyses_pending(tmp_path, monkeypatch)
    assert first.pending_analyses >= 1
    second = run_campaign(_opts(tmp_path, max_cases=1, analysis_workers=1))
    assert second.pending_analyses == 0 and second.progress.analyses_filed >= first.pending_analyses
    buckets, pending, _ = _buckets(tmp_path)
    assert pending == 0 and all("@" in b.key.signature for b in buckets)


def test_an_analysis_starts_on_its_raw_buckets_most_severe_case_with_that_cases_verdict(tmp_path):
    # In a 420 s H100 campaign (4 inputs per compile) 5 of 104 bug buckets were never minimized:
    # each analysis ran on the first case stored under its raw key, a by-design difference on
    # normal inputs, while a sibling on other inputs was a bug under the same raw key.
    from dataclasses import replace

    from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob
    from divfuzz.fuzzer.campaign.loop import severest_case_job
    from divfuzz.records.buckets import BucketKey
    from divfuzz.records.outcomes import Status
    from divfuzz.generators.spec import RECIPE_KINDS, InputRecipe
    from divfuzz.records.verdict import Verdict
    from seed_specs import sigmoid_gate

    config = CompileConfig()
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config=config.to_dict(), options={}, versions={})
    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", "gate+linear")
    # The stored verdict carries the severity this test's judge gives it (`error_message`).
    specs = [sigmoid_gate(64, 32).with_recipe(InputRecipe(kind, 0)) for kind in RECIPE_KINDS[:5]]

    def stored(idx, severity, cfg=config):
        verdict = Verdict(Status.DIVERGED, error_message=severity)
        return store.add_case_for_analysis(
            raw_key=raw, severity_for=lambda key: {"severity": severity, "rule": "r", "output": "out", "detail": ""},
            run_id=run_id, slot=0, idx=idx, spec_digest=specs[idx].digest(), spec_json=specs[idx].to_json(indent=None),
            device="cpu", config=cfg.to_dict(), verdict=verdict.to_dict(), score=1.0, wall_s=0.1, finding_kind="bf16-ulp"), verdict

    judge = lambda verdict: {"severity": verdict["error_message"], "rule": "r", "output": "out", "detail": ""}
    (first, first_verdict), _ = stored(0, "by-design"), stored(1, "suspect")
    job = AnalysisJob(raw, first.case_id, specs[0], first_verdict)
    assert first.queued and store.bucket(first.bucket_id).severity == "suspect"
    moved = severest_case_job(store, job, config=config, severity_for=judge)
    assert moved.case_id == first.case_id + 1 and moved.spec == specs[1] and moved.verdict.error_message == "suspect"
    other_config = config.with_inductor(emulate_precision_casts=True)
    stored(2, "bug", other_config)  # a merged shard's case: another config, not what this analysis runs
    (bug, _), _ = stored(3, "bug"), stored(4, "bug")  # the first of the most severe under this config
    moved = severest_case_job(store, job, config=config, severity_for=judge)
    assert moved.case_id == bug.case_id and moved.spec == specs[3] and moved.raw_key == raw
    plain = config.to_dict()
    assert [store.severest_case_id(raw, judge, config=plain, page=n) for n in (1, 2, 500)] == [bug.case_id] * 3  # a page at a time
    # Under the other config only its own case counts; its stored verdict stands only where the job had one.
    assert severest_case_job(store, job, config=other_config, severity_for=judge).case_id == bug.case_id - 1
    assert severest_case_job(store, replace(job, verdict=None), config=config, severity_for=judge).verdict is None
    # The job unchanged when its own case is the severest, or nothing is stored under its raw key.
    assert severest_case_job(store, replace(job, case_id=bug.case_id), config=config, severity_for=judge).case_id == bug.case_id
    other = AnalysisJob(BucketKey("bf16-ulp", "bfloat16", "cpu", "relu"), 99, specs[0])
    assert severest_case_job(store, other, config=config, severity_for=judge) is other
    store.close()
