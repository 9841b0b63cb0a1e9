"""A report reads what it shows, not the store (issue 40, item 8: `report --html` on a store of
100,001 buckets). The store files and counts the buckets by root cause in SQLite
(`divfuzz.fuzzer.store.cause_index`); these tests hold that index equal to the one rule
(`root_cause_groups` over every bucket row) and the reports' memory flat as the store grows.
The stores are built through the store's API by `scripts/big_store_bench.py` (the benchmark that
measures the same at 10,000 and 100,001 buckets)."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.generators.coverage import op_coverage
from divfuzz.reports.html import MAX_PLOT_STEPS, MAX_ROOT_CAUSES_PER_SECTION, collect, write_html
from divfuzz.reports.markdown import coverage_markdown, iter_buckets_markdown
from divfuzz.reports.root_causes import fold_by_culprit, root_cause_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import big_store_bench  # noqa: E402  (the benchmark's store builder: one way to make these stores)

sys.path.remove(str(Path(__file__).resolve().parents[1] / "scripts"))


def _store(folder: Path, buckets: int) -> Path:
    big_store_bench.build(folder, buckets)
    return folder / STORE_NAME


def _add_second_run(path: Path) -> int:
    """A second run whose cases fall into some buckets of the first and open two of their own."""
    store = Store(path)
    try:
        run_id, _ = store.start_run(seed=1, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
        for i, b in enumerate([3, 7, 8, 17, 18, 19, 10**6, 10**6 + 8]):
            key, analysis = big_store_bench.bucket_key(b)
            _, bucket_id, new = store.add_case(
                run_id=run_id, slot=0, idx=i, spec_digest=f"r{i}", spec_json='{"not": "a spec"}', device="cpu", config={},
                verdict=big_store_bench.case_verdict(), score=1.0, wall_s=1.0, finding_kind="fp32-ulp", key=key,
                triage="compiled-worse", judged=bucket_severity(key, {"severity": "bug", "rule": key.rule, "output": "v1", "detail": "again"}))
            if new and analysis is not None:
                store.set_bucket_analysis(bucket_id, minimized=analysis[0], culprit=analysis[1])
        store.finish_run(run_id)
    finally:
        store.close()
    return run_id


def _same_causes(index, buckets, *, shown: int, in_scope=None) -> None:
    """The index's root causes, read with their first `shown` buckets, equal the rule's over
    `buckets`; its bucket counts are those of `in_scope` (`buckets` unless some are hidden)."""
    expected = root_cause_groups(buckets)
    severities = {rc.severity for rc in expected}
    in_scope = buckets if in_scope is None else in_scope
    assert dict(index.cause_counts()) == {s: sum(rc.severity == s for rc in expected) for s in severities}
    assert dict(index.bucket_counts()) == {s: sum(b.severity == s for b in in_scope) for s in {b.severity for b in in_scope}}
    assert index.bucket_total() == len(in_scope)
    for sev in severities:
        want = [rc for rc in expected if rc.severity == sev]
        got = list(index.causes(sev, buckets=shown))
        assert index.section(sev) == (len(want), sum(len(rc.buckets) for rc in want), sum(rc.cases for rc in want))
        assert len(got) == len(want), sev
        for g, w in zip(got, want):
            assert (g.parts, g.severity, g.culprit, g.pattern) == (w.parts, w.severity, w.culprit, w.pattern)
            assert [b.id for b in g.buckets] == [b.id for b in w.buckets[:shown]] and g.buckets[0] == w.lead
            assert (g.bucket_count, g.cases, g.severity_counts(), g.known, g.counted(), g.title) == (
                len(w.buckets), w.cases, w.severity_counts(), w.known, w.counted(), w.title)
        assert [tuple(r[:5]) + (r[5],) for r in index.folds(sev, ids=4)] == [
            tuple(r[:5]) + (r[5][:4],) for r in fold_by_culprit(want)]
        assert [rc.lead.id for rc in index.causes(sev, limit=3, buckets=1)] == [rc.lead.id for rc in want[:3]]


def test_the_stores_index_folds_counts_and_orders_root_causes_as_the_rule_does(tmp_path):
    # 1,400 buckets: raw ones of every severity, a mechanism's 140 (one root cause), 7 minimized
    # root causes of 20 buckets each and by-design ones under 13 culprits; a second run on top.
    path = _store(tmp_path / "s", 1400)
    run_id = _add_second_run(path)
    store = Store(path, create=False)
    try:
        everything = store.buckets()
        assert max(len(rc.buckets) for rc in root_cause_groups(everything)) > 50  # read in part, counted whole
        for shown in (1, 12, 50, 10**6):
            with store.root_cause_index() as index:
                _same_causes(index, everything, shown=shown)
        with store.root_cause_index(run_id=run_id) as index:
            _same_causes(index, store.buckets(run_id=run_id), shown=12)
        lead = root_cause_groups(everything)[0].lead
        with store.root_cause_index(bucket_id=lead.id) as index:
            _same_causes(index, [lead], shown=12)
        with store.root_cause_index(new_only=True) as index:  # hides what matches a known upstream bug
            known = [rc for rc in root_cause_groups(everything) if not rc.is_new]
            assert known and index.hidden == len(known)
            _same_causes(index, [b for rc in root_cause_groups(everything) if rc.is_new for b in rc.buckets], shown=12,
                         in_scope=everything)
        # the index's tables are SQLite's temp tables, dropped at the end; the store file is untouched
        assert not store.db.execute("SELECT name FROM temp.sqlite_master WHERE type = 'table'").fetchall()
        assert not store.db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'divfuzz_report%'").fetchall()
        # the coverage table, counted as the cases stream by in bucket order, as from every case at once
        severity = {b.id: b.severity for b in everything}
        assert op_coverage(store.iter_case_specs(), grouped=True) == op_coverage(
            ((c["spec_json"], c["bucket_id"]) for c in store.case_summaries()), severity)
        assert op_coverage(store.iter_case_specs(run_id=run_id), grouped=True) == op_coverage(
            ((c["spec_json"], c["bucket_id"]) for c in store.case_summaries(run_id=run_id)), severity)
        markdown = "".join(iter_buckets_markdown(store)) + "\n" + coverage_markdown(store) + "\n"
    finally:
        store.close()
    # `divfuzz report` prints the markdown as it is read, a batch of lines at a time: the same text
    printed = CliRunner().invoke(main, ["report", "--out", str(path.parent)], catch_exceptions=False)
    assert printed.exit_code == 0 and printed.output == markdown
    assert markdown.count("\n### ") == sum(rc.severity in ("bug", "suspect", "eager-worse") for rc in root_cause_groups(everything))


def _peak(path: Path, what: str, page: Path) -> int:
    """Peak Python memory (tracemalloc) of one report of the store at `path`."""
    store = Store(path, create=False)
    try:
        tracemalloc.start()
        if what == "html":
            write_html(collect(store), page)
        else:
            for _ in iter_buckets_markdown(store):  # printed and dropped, a line at a time, as the CLI does
                pass
            coverage_markdown(store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        store.close()
    return peak


def test_a_reports_memory_and_page_stay_flat_as_the_store_grows_threefold(tmp_path, monkeypatch):
    """Both stores fill every cap of a page (50 root causes a section, 50 buckets a root cause's
    table, 20 ids a fold), so a page shows as much of each. Before, the reports held every bucket
    row (the markdown also every case and its whole text): from 4,000 to 12,000 buckets the peak
    rose from 31 to 92 MB (markdown) and from 14 to 37 MB (HTML). Now they read a page of rows at
    a time and keep only what they show: the same peak (1 and 5 MB), the same page size."""
    warm, small, large = _store(tmp_path / "warm", 100), _store(tmp_path / "small", 4000), _store(tmp_path / "large", 12000)

    def refuse(*args, **kwargs):
        raise AssertionError("a report read every row at once")

    monkeypatch.setattr(Store, "buckets", refuse)
    monkeypatch.setattr(Store, "case_summaries", refuse)
    for what in ("markdown", "html"):
        _peak(warm, what, tmp_path / "warm.html")  # once first: imports (torch, for the page's code) and caches
        few = _peak(small, what, tmp_path / "small.html")
        many = _peak(large, what, tmp_path / "large.html")
        assert many < few + 1.5 * 2**20, (what, few, many)
    small_page, large_page = (tmp_path / "small.html").read_text(), (tmp_path / "large.html").read_text()
    assert len(large_page) < 1.1 * len(small_page), (len(small_page), len(large_page))
    # the new-buckets curve: one step per bucket up to MAX_PLOT_STEPS, then one step for several
    curve = large_page.split('data-plot="new-buckets"', 1)[1].split('class="line" d="', 1)[1].split('"', 1)[0]
    assert MAX_PLOT_STEPS < curve.count("L") <= 2 * MAX_PLOT_STEPS + 2, curve.count("L")
    assert large_page.count('<section class="root-cause sev-bug"') == MAX_ROOT_CAUSES_PER_SECTION


@pytest.mark.slow
def test_a_report_of_100001_buckets_stays_under_the_memory_of_a_small_one(tmp_path):
    """The issue's store: 100,001 buckets and 100,012 cases, as `scripts/big_store_bench.py` builds
    it; the peak RSS of `divfuzz report --html` and `divfuzz report` under `/usr/bin/time -v`
    stays within 50 MB of a 1,000-bucket store's (before: 541 MB and 878 MB against 242 MB and 47 MB)."""
    if not Path("/usr/bin/time").exists():
        pytest.skip("needs /usr/bin/time")
    for name in ("html", "report.md"):
        peaks = []
        for n in (1000, 100_001):
            folder = tmp_path / str(n)
            if not folder.exists():
                big_store_bench.build(folder, n)
            argv = ["report", "--out", str(folder)] + (["--html", str(folder / "report.html")] if name == "html" else [])
            peaks.append(big_store_bench.measure(argv, folder / "stdout")["rss_mb"])
        assert peaks[1] < peaks[0] + 50, (name, peaks)
