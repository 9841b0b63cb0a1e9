"""Issue 54: an analysis measured by phase (seconds and compiles), the bisector started past the
ladder's clear rungs, drawing stopped early enough for the open bug analyses to start, and
issue 57: a resumed campaign keeps the time it spent."""

from __future__ import annotations

import json
import time

from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.analysis_pool import phases_with_other
from divfuzz.fuzzer.campaign.breakdown import analysis_phase_table, campaign_breakdown
from divfuzz.fuzzer.campaign.campaign_options import CampaignOptions
from divfuzz.fuzzer.campaign.loop import Campaign, run_campaign, spent_before
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.triage.attribute import cleared_through
from divfuzz.fuzzer.triage.phase_clock import PhaseTally
from divfuzz.records.config import CompileConfig


def test_a_tally_gives_each_moment_to_the_innermost_phase_and_counts_compiles_where_they_ran():
    tally = PhaseTally()
    tally.compiled()  # outside every phase
    t0 = time.monotonic()
    with tally.phase("first_pass"):
        time.sleep(0.02)
        with tally.phase("ladder"):
            tally.compiled(2)
            time.sleep(0.03)
        time.sleep(0.01)
    with tally.phase("minimize"):
        tally.compiled(5)
    spent = time.monotonic() - t0
    d = tally.to_dict()
    assert list(d) == ["first_pass", "first_pass/ladder", "minimize", "other"]
    assert d["first_pass/ladder"]["compiles"] == 2 and d["minimize"]["compiles"] == 5 and d["other"]["compiles"] == 1
    assert d["first_pass/ladder"]["s"] >= 0.03 and d["first_pass"]["s"] >= 0.03  # exclusive: 0.02 + 0.01
    assert d["first_pass"]["s"] < 0.03 + 0.02  # the inner phase's time is not counted twice
    assert sum(p["s"] for p in d.values()) <= spent + 0.005


def test_the_phases_with_other_add_up_to_the_analysis_wall():
    phases = {"first_pass/ladder": {"s": 1.25, "compiles": 3}, "minimize": {"s": 4.5, "compiles": 20}}
    out = phases_with_other(phases, 7.0)
    assert abs(sum(p["s"] for p in out.values()) - 7.0) < 1e-6 and out["other"] == {"s": 1.25, "compiles": 0}
    assert phases["minimize"] == {"s": 4.5, "compiles": 20}  # the input is not changed


def test_the_bisector_starts_past_the_rungs_that_ran_clear_only():
    ok, bug = "ok", "bf16-ulp"
    assert cleared_through((("aot_eager", ok), ("aot_eager_decomp_partition", ok), ("inductor", bug)), bug) == "aot_eager_decomp_partition"
    assert cleared_through((("aot_eager", ok), ("aot_eager_decomp_partition", bug), ("inductor", bug)), bug) == "aot_eager"
    assert cleared_through((("aot_eager", bug), ("inductor", bug)), bug) is None
    # another output's finding is clear; a rung that broke is not (the bisector calls it bad)
    assert cleared_through((("aot_eager", f"another {bug}"), ("aot_eager_decomp_partition", "compile-error")), bug) == "aot_eager"
    assert cleared_through((("aot_eager", "runtime-error"),), bug) is None
    assert cleared_through((), bug) is None


def test_drawing_stops_early_enough_that_the_last_round_of_bug_analyses_can_still_start():
    # Issue 54: quick analyses (8 s each) set a reserve too short for `analysis_budget` to start
    # the last bugs once the cases in flight drained: they ended pending.
    measured = schedule.Measured(case_s=3.0, analysis_s=8.0, attribution_s=6.0)
    old = schedule.drawing_reserve(measured, open_bug_analyses=7, places=14, minimize_budget_s=120.0, budget_s=390.0,
                                   minimize=True, start_floor=False)
    new = schedule.drawing_reserve(measured, open_bug_analyses=7, places=14, minimize_budget_s=120.0, budget_s=390.0,
                                   minimize=True)
    work_end = 1000.0
    after_drain = work_end - old + measured.case_s
    assert schedule.analysis_budget(after_drain, work_end, measured, 120.0) is None  # before: it stayed pending
    after_drain = work_end - new + measured.case_s
    assert schedule.analysis_budget(after_drain, work_end, measured, 120.0) is not None
    assert new <= schedule.MAX_RESERVE_SHARE * 390.0


def _breakdown_store(tmp_path, analyses):
    store = Store(tmp_path / STORE_NAME)
    store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    store.close()
    (tmp_path / "divfuzz-run1-timings.json").write_text(json.dumps({"analyses": analyses, "analysis_workers": 1}))
    return campaign_breakdown(tmp_path)


def test_bench_breakdown_shows_each_analysis_phase_and_rule_summing_to_the_analyses_time(tmp_path):
    a = {"wall_s": 10.0, "filed": True, "rule": "bf16-ulp-gross", "phases": phases_with_other(
        {"first_pass/ladder": {"s": 2.0, "compiles": 3}, "minimize": {"s": 5.0, "compiles": 14},
         "ladder": {"s": 1.5, "compiles": 2}, "bisector": {"s": 1.0, "compiles": 6}}, 10.0)}
    b = {"wall_s": 4.0, "filed": True, "rule": "nan-new", "phases": phases_with_other({"minimize": {"s": 3.0, "compiles": 9}}, 4.0)}
    got = _breakdown_store(tmp_path, [a, b])
    assert abs(sum(p["s"] for p in got.analysis_phases.values()) - 14.0) < 1e-6
    assert got.analysis_phases["minimize"] == {"s": 8.0, "compiles": 23} and sorted(got.analysis_compiles) == [9, 25]
    text = "\n".join(analysis_phase_table(got))
    assert "| minimize | 8.0 | 23 |" in text and "| bisector | 1.0 | 6 |" in text and "| all | 14.0 | 34 |" in text
    assert "| bf16-ulp-gross | 1 | 10.0 | 25 |" in text and "median 7.0 s and 17 compiles each" in text


def test_a_resumed_campaign_keeps_the_time_its_earlier_session_spent(tmp_path):
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, seed=1, budget_s=600.0, max_cases=1, dtypes=("float32",),
                           config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:eager_in_disguise"))
    first = run_campaign(opts)
    spent = spent_before(tmp_path, first.run_id)
    assert spent > 0
    store = Store(tmp_path / STORE_NAME, create=False, read_only=False)
    store.finish_run(first.run_id, "interrupted")  # as a Ctrl-C leaves it: the same command resumes it
    store.close()
    again = Campaign(opts)
    try:
        assert again.resumed and again.run_id == first.run_id and again.spent_before == spent
        assert again.deadline.left() <= 600.0 - spent
        assert again.progress.spent_before == spent
    finally:
        again.close()
    # a timings file that is not a number there reads 0 (untrusted), never an error
    (tmp_path / f"divfuzz-run{first.run_id}-timings.json").write_text('{"spent_s": "lots"}')
    assert spent_before(tmp_path, first.run_id) == 0.0
