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
from divfuzz.records.deadline import Deadline
from divfuzz.fuzzer.campaign.sizing import ANALYSIS_MIN_FUZZING_SHARE, size_analysis_workers
from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity

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
    return CampaignOptions(**(dict(device="cpu", out_dir=out, seed=3, dtypes=("bfloat16",), minimize=True, minimize_budget_s=60,
                                   config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump")) | kw))


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
    assert all((x.key.culprit is not None) == (x.severity != "noise") for x in a + b)
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
    assert all(b.key.culprit is None and b.minimized is None for b in buckets)  # stored under raw keys
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
    assert all(b.key.culprit is not None and b.minimized is not None for b in buckets)
    assert all((Path(b.folder) / "repro.py").exists() and (Path(b.folder) / "analysis.json").exists() for b in buckets)


@pytest.mark.slow
def test_a_later_campaign_on_the_store_finishes_the_pending_analyses(tmp_path, monkeypatch):
    first = _campaign_leaving_analyses_pending(tmp_path, monkeypatch)
    assert first.pending_analyses >= 1
    # A budget bounds the earlier runs' analyses it takes on (issue 57: --max-cases alone does not).
    second = run_campaign(_opts(tmp_path, budget_s=600.0, max_cases=1, analysis_workers=1))
    assert second.pending_analyses == 0 and second.progress.analyses_filed >= first.pending_analyses
    buckets, pending, _ = _buckets(tmp_path)
    assert pending == 0 and all(b.key.culprit is not None for b in buckets)


@pytest.mark.slow
def test_a_later_campaign_bounded_by_cases_alone_leaves_other_runs_analyses_pending(tmp_path, monkeypatch):
    # Issue 57: `fuzz --max-cases 30` on the main job's store spent 9.5 minutes on the main job's
    # pending analyses, bounded by nothing; they stay pending for `minimize --pending` instead.
    first = _campaign_leaving_analyses_pending(tmp_path, monkeypatch)
    assert first.pending_analyses >= 1
    second = run_campaign(_opts(tmp_path, max_cases=1, analysis_workers=1, seed=first.run_id + 41))
    assert second.progress.analyses_filed <= second.progress.new_buckets
    _, pending, _ = _buckets(tmp_path)
    assert pending >= first.pending_analyses


def _bf16_verdict(*, integer_valued: bool):
    """A bf16 output that differs from eager: by one ULP on one element of 2048 (noise), or, on an
    integer-valued output that eager computes exactly, by 1 on three elements (a bug)."""
    import torch

    from divfuzz.oracles.compare import compare_float
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import OutputVerdict, Verdict

    ref = (torch.arange(2048, dtype=torch.float64) % 7 if integer_valued
           else torch.linspace(-3, 3, 2048, dtype=torch.float64)).reshape(64, 32)
    eager = ref.to(torch.bfloat16)
    compiled = eager.clone()
    if integer_valued:
        compiled.view(-1)[:3] += 1
    else:
        compiled.view(torch.int16).view(-1)[:1] += 1
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=compare_float(eager, compiled, ref)),))


def test_cases_of_one_graph_whose_severities_differ_open_a_raw_bucket_and_an_analysis_each(tmp_path):
    # In a 420 s H100 campaign (4 inputs per compile) 5 of 104 bug buckets were never minimized:
    # each analysis ran on the first case stored under its raw key, a by-design difference on
    # normal inputs, while a sibling on other inputs was a bug under the same raw key. A raw key
    # now carries its case's severity rule: the bug opens a raw bucket (and an analysis) of its
    # own, on the case that shows it, whatever the order the cases are stored in.
    import threading
    from dataclasses import replace

    from divfuzz.fuzzer.campaign.bucket_folders import Filing
    from divfuzz.fuzzer.campaign.case_steps import CaseAt, CaseRun, Keyed, Ran, judge, store_case
    from divfuzz.fuzzer.campaign.schedule import most_severe_first
    from divfuzz.fuzzer.campaign.sizing import SlotDevice
    from divfuzz.generators.spec import RECIPE_KINDS, InputRecipe
    from seed_specs import sigmoid_gate

    config = CompileConfig()
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config=config.to_dict(), options={}, versions={})
    run = CaseRun(store=store, filing=Filing(store, tmp_path, timeout_s=60.0), run_id=run_id, out_dir=tmp_path, device="cpu", config=config, strict=False, timeout_s=60.0,
                  profile=False, oracle="numeric", perf_margin=None, against=None, analyzer=object(), pool=None,
                  inline_analysis=False, minimize_budget_s=60.0, work_end=Deadline.never(), interrupted=threading.Event())
    # One graph under three input recipes: a noise difference first, then a bug, then noise again.
    specs = [sigmoid_gate(64, 32).with_recipe(InputRecipe(kind, 0)) for kind in RECIPE_KINDS[:3]]
    verdicts = [_bf16_verdict(integer_valued=False), _bf16_verdict(integer_valued=True), _bf16_verdict(integer_valued=False)]
    stored = []
    for idx, (spec, verdict) in enumerate(zip(specs, verdicts)):
        judged = judge(run, spec, verdict)
        assert judged.for_pool
        ran = Ran(verdict, 0.1, CaseAt(0, idx, SlotDevice("cpu", "cpu")), 0.0)
        stored.append((judged, store_case(run, spec, ran, judged, Keyed(None, None))))
    (noise, noise_at), (bug, bug_at), (again, again_at) = stored
    assert (noise.reason.severity, bug.reason.severity, again.reason.severity) == (Severity.NOISE, Severity.BUG, Severity.NOISE)
    # The two raw keys differ by the rule alone: same finding, same graph.
    assert noise.raw_key != bug.raw_key and replace(noise.raw_key, rule=bug.raw_key.rule) == bug.raw_key
    assert again.raw_key == noise.raw_key
    assert (noise_at.severity, bug_at.severity, again_at.severity) == (Severity.NOISE, Severity.BUG, Severity.NOISE)
    # Each raw bucket's severity is the one its first case shows, and the later noise case does not change either.
    buckets = {b.id: b for b in store.buckets()}
    assert len(buckets) == 2 and noise_at.bucket_id == again_at.bucket_id != bug_at.bucket_id
    assert (buckets[noise_at.bucket_id].severity, buckets[noise_at.bucket_id].count) == ("noise", 2)
    assert (buckets[bug_at.bucket_id].severity, buckets[bug_at.bucket_id].count) == ("bug", 1)
    assert buckets[noise_at.bucket_id].severity_reason == noise.reason.to_dict()
    assert buckets[bug_at.bucket_id].severity_reason == bug.reason.to_dict()
    assert buckets[bug_at.bucket_id].first_case_id == bug_at.case_id
    # One analysis per raw key, each on the case that opened it: the bug's minimizes the bug, and goes first.
    assert noise_at.queued and bug_at.queued and not again_at.queued
    assert {p.raw_key: p.case_id for p in store.pending_analyses()} == {noise.raw_key: noise_at.case_id, bug.raw_key: bug_at.case_id}
    jobs = [AnalysisJob(j.raw_key, s.case_id, spec, verdict)
            for (j, s), spec, verdict in zip(stored, specs, verdicts) if s.queued]
    first = most_severe_first(store, jobs, campaign=True)
    assert first.raw_key == bug.raw_key and first.case_id == bug_at.case_id and first.spec == specs[1]
    store.close()
