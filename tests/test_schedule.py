"""How a campaign spends its budget (issue 20 point 4, issue 25 point 3): the pure rules of
`divfuzz.fuzzer.campaign.schedule`, and the order in which the real store's open analyses are taken."""

from __future__ import annotations


from divfuzz.fuzzer.campaign import schedule
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob, AnalysisPool
from divfuzz.fuzzer.campaign.schedule import most_severe_first
from divfuzz.fuzzer.campaign.schedule import Measured, analysis_budget, analysis_rank, drawing_reserve
from divfuzz.fuzzer.store import Store
from divfuzz.records.deadline import Deadline
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.buckets import BucketKey
from divfuzz.records.severity import Severity, SeverityReason
from seed_specs import sigmoid_gate


def test_drawing_stops_early_enough_for_the_open_bug_analyses_at_their_measured_rate():
    measured = Measured(case_s=2.0, analysis_s=30.0)
    common = dict(minimize_budget_s=120.0, budget_s=3600.0, minimize=True)
    assert drawing_reserve(measured, open_bug_analyses=0, places=15, **common) == 2.0  # one slow case in flight
    assert drawing_reserve(measured, open_bug_analyses=15, places=15, **common) == 32.0  # one round of 15 workers
    assert drawing_reserve(measured, open_bug_analyses=16, places=15, **common) == 62.0  # two rounds
    # Without minimization only the cases in flight count; nothing measured yet: the defaults.
    assert drawing_reserve(measured, open_bug_analyses=16, places=15, **(common | {"minimize": False})) == 2.0
    assert drawing_reserve(Measured(), open_bug_analyses=1, places=4, **common) == \
        schedule.DEFAULT_CASE_S + 120.0 + schedule.DEFAULT_ATTRIBUTION_S
    # Drawing keeps at least half of a budget, however many bugs are open.
    assert drawing_reserve(measured, open_bug_analyses=100, places=1, **(common | {"budget_s": 60.0})) == 30.0


def test_an_analysis_starts_only_with_time_for_its_attribution_and_some_minimization():
    measured = Measured(attribution_s=10.0)
    assert analysis_budget(0.0, None, measured, 120.0) == 120.0  # no budget: the per-root-cause one
    assert analysis_budget(0.0, 500.0, measured, 120.0) == 120.0
    # The whole analysis, and its filing, end by work_end (its span ends ANALYSIS_FILING_S before it).
    filing = schedule.ANALYSIS_FILING_S
    assert analysis_budget(0.0, 40.0, measured, 120.0) == (40.0 - filing) / schedule.ANALYSIS_SPAN_FACTOR
    assert analysis_budget(0.0, 200.0, Measured(attribution_s=170.0), 120.0) == 30.0 - filing  # attribution ends in time
    assert analysis_budget(0.0, 10.0 + filing + schedule.MIN_ANALYSIS_S - 0.1, measured, 120.0) is None  # stays pending
    assert analysis_budget(0.0, 10.0 + filing + schedule.MIN_ANALYSIS_S + 0.1, measured, 120.0) is not None
    assert analysis_budget(0.0, 40.0, Measured(), 120.0) == 40.0 - filing - schedule.DEFAULT_ATTRIBUTION_S


def test_bugs_come_first_then_suspects_by_case_count_and_noise_by_design_or_eager_worse_never_in_a_campaign():
    ranks = {name: analysis_rank(sev, count, case_id) for name, sev, count, case_id in [
        ("bug-1", "bug", 1, 9), ("bug-5", "bug", 5, 8), ("suspect-50", "suspect", 50, 1), ("suspect-3", "suspect", 3, 2),
        ("suspect-3-later", "suspect", 3, 7), ("noise", "noise", 500, 0), ("by-design", "by-design", 500, 0),
        ("eager-worse", "eager-worse", 500, 0)]}
    assert ranks["noise"] is None and ranks["by-design"] is None and ranks["eager-worse"] is None
    order = sorted((r, n) for n, r in ranks.items() if r is not None)
    assert [n for _, n in order] == ["bug-5", "bug-1", "suspect-50", "suspect-3", "suspect-3-later"]
    # `minimize --pending` (asked by a user) takes them too, last.
    assert analysis_rank("noise", 500, 0, campaign=False) > analysis_rank("suspect", 1, 99, campaign=False)
    assert analysis_rank("eager-worse", 500, 0, campaign=False) > analysis_rank("noise", 1, 99, campaign=False)


# A severity rule of each severity (`RULE_SEVERITY`): a raw key carries its cases' rule.
_RULE = {Severity.BUG: "int-valued-wrong", Severity.SUSPECT: "many-ulps", Severity.NOISE: "few-ulps"}


def _key(name: str, severity: Severity = Severity.SUSPECT) -> BucketKey:
    return BucketKey(kind="bf16-ulp", dtype="bfloat16", device_type="cpu", ops=(name,), rule=_RULE[severity])


def _store_findings(store: Store, spec: GraphSpec, findings: list[tuple[str, Severity]], slot: int = 0) -> dict[BucketKey, int]:
    """Store one case per (graph, severity) as the campaign's intake does; the case id that opened each raw key."""
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    opened = {}
    for idx, (name, sev) in enumerate(findings):
        key = _key(name, sev)
        reason = SeverityReason(sev, key.rule, "out", "detail").to_dict()
        row = dict(run_id=run_id, slot=slot, idx=idx, spec_digest=spec.digest(), spec_json=spec.to_json(indent=None),
                   device="cpu", config={}, verdict={"status": "diverged"}, score=0.0, wall_s=1.0, finding_kind="bf16-ulp",
                   ran_on="cpu")
        intake = Filing(store, store.path.parent, timeout_s=None).store_case(
            row, key=None, raw_key=key, triage="", severity=reason, for_analysis=True)
        if intake.queued:
            opened[key] = intake.case_id
    return opened


def test_the_real_store_orders_open_analyses_by_the_raw_buckets_severity_and_count_as_they_grow(tmp_path):
    spec = sigmoid_gate(rows=8, dim=8)
    store = Store(tmp_path / "s.sqlite")
    try:
        opened = _store_findings(store, spec, [
            ("a", Severity.SUSPECT), ("noisy", Severity.NOISE), ("b", Severity.SUSPECT), ("b", Severity.SUSPECT),
            ("c", Severity.NOISE)])
        jobs = [AnalysisJob(key, case_id, spec) for key, case_id in opened.items()]
        assert most_severe_first(store, jobs, campaign=True).raw_key == _key("b")  # 2 cases before a's 1
        # Two more cases of a overtake b.
        _store_findings(store, spec, [("a", Severity.SUSPECT), ("a", Severity.SUSPECT)], slot=1)
        assert most_severe_first(store, jobs, campaign=True).raw_key == _key("a")
        # A later case of graph c that is a bug opens a raw key of its own (its rule differs from the
        # noise key's), and that one goes first; noise alone is never chosen, c's noise key included.
        bug = _store_findings(store, spec, [("c", Severity.BUG)], slot=2)
        assert list(bug) == [_key("c", Severity.BUG)]
        assert store.pending_priorities()[_key("c", Severity.NOISE).identity()] == ("noise", 1)
        jobs += [AnalysisJob(key, case_id, spec) for key, case_id in bug.items()]
        assert most_severe_first(store, jobs, campaign=True).raw_key == _key("c", Severity.BUG)
        noise = [j for j in jobs if j.raw_key.rule == _RULE[Severity.NOISE]]
        assert {j.raw_key.ops for j in noise} == {("noisy",), ("c",)}
        assert most_severe_first(store, noise, campaign=True) is None
        assert most_severe_first(store, noise, campaign=False) is not None
    finally:
        store.close()


class _RecordingAnalyzer:
    """Stands in for minimization (minutes per job) to observe only the pool's order."""

    def __init__(self):
        self.order: list[str] = []

    def analyze(self, spec, raw_key, worker, *, budget_s=None, case_verdict=None):
        self.order.append(raw_key.ops[0])
        return raw_key, None


class _IdleWorker:
    aborted = False

    def stop(self):
        pass

    def abort(self):
        pass


def test_a_pool_takes_its_jobs_in_the_order_chosen_when_a_worker_is_free_and_adopts_a_slots_worker(tmp_path):
    spec = sigmoid_gate(rows=8, dim=8)
    store = Store(tmp_path / "s.sqlite")
    try:
        opened = _store_findings(store, spec, [("s1", Severity.SUSPECT), ("n", Severity.NOISE), ("bug", Severity.BUG),
                                               ("s3", Severity.SUSPECT), ("s3", Severity.SUSPECT), ("s3", Severity.SUSPECT)])
        analyzer = _RecordingAnalyzer()
        pool = AnalysisPool([], analyzer, budget=schedule.AnalysisBudget(Deadline.never(), 60.0),
                            choose=lambda queued: most_severe_first(store, queued, campaign=True))
        for key, case_id in opened.items():  # queued before any worker serves
            pool.submit(AnalysisJob(key, case_id, spec))
        assert pool.adopt(_IdleWorker()) and pool.size == 1
        pool.close()
        assert pool.wait(30)
        assert analyzer.order == ["bug", "s3", "s1"]  # the noise one stays queued (pending in the store)
        by_name = {key.ops[0]: key for key in opened}
        assert [t.raw_key for t in pool.timings] == [str(by_name[n]) for n in analyzer.order] and all(t.filed for t in pool.timings)
        # The pool hands its results back, in the order it ran them, and calls nothing to file them.
        assert [r.job.raw_key.ops[0] for r in pool.take_results()] == ["bug", "s3", "s1"] and pool.take_results() == []
        assert pool.error is None
    finally:
        store.close()


class _FailingAnalyzer:
    def analyze(self, spec, raw_key, worker, *, budget_s=None, case_verdict=None):
        raise RuntimeError("divfuzz's own bug")


def test_a_pool_keeps_its_own_error_and_stops_giving_no_result():
    pool = AnalysisPool([], _FailingAnalyzer(), budget=schedule.AnalysisBudget(Deadline.never(), 60.0))
    pool.submit(AnalysisJob(_key("a"), 1, sigmoid_gate(rows=8, dim=8)))
    assert pool.adopt(_IdleWorker())
    assert pool.wait(30)
    error, trace = pool.error
    assert isinstance(error, RuntimeError) and "divfuzz's own bug" in trace
    assert pool.take_results() == [] and not pool.adopt(_IdleWorker())  # stopped: no more workers


def test_the_analysis_budget_follows_the_campaigns_rule_or_the_pending_one():
    assert schedule.AnalysisBudget(Deadline.never(), 42.0).for_next(None) == 42.0
    assert schedule.AnalysisBudget(Deadline.after(0.0), 42.0).for_next(None) is None  # no time left: stays pending
    long = Deadline.after(10_000.0)
    assert schedule.AnalysisBudget(long, 42.0, campaign=False).for_next(None) == 42.0
    short = schedule.AnalysisBudget(Deadline.after(schedule.ANALYSIS_SPAN_FACTOR * (schedule.MIN_ANALYSIS_S + 1)), 42.0,
                                    campaign=False).for_next(None)
    assert short is not None and schedule.MIN_ANALYSIS_S <= short < schedule.MIN_ANALYSIS_S + 1
