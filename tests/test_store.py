"""The SQLite store: bad files are refused without damage; root causes survive a restart."""

from __future__ import annotations

import hashlib
import re

import pytest

from divfuzz.records.buckets import BucketKey
from divfuzz.fuzzer.campaign.loop import Campaign, CampaignOptions
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import StoreError
from divfuzz.reports.markdown import _minimized, buckets_markdown


def test_a_file_that_is_not_a_store_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "divfuzz.sqlite"
    path.write_bytes(b"this is not sqlite at all" * 100)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match="not a usable divfuzz store"):
        Store(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_root_causes_are_remembered_across_opens(tmp_path):
    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", "gelu+layer_norm+linear")
    root = BucketKey("bf16-ulp", "bfloat16", "cpu", "layer_norm @ decomposition of aten.native_layer_norm")
    store = Store(tmp_path / "s.sqlite")
    assert store.root_cause_of(raw) is None
    store.remember_root_cause(raw, root)
    store.close()
    assert Store(tmp_path / "s.sqlite").root_cause_of(raw) == root


@pytest.mark.slow  # two campaigns, one minimizing inline (45 s on CI's 2 cores); CI keeps the root-cause memory's
# unit test above, `minimize SPEC` (test_minimize) and the pooled analyses (test_analysis_pool)
def test_a_second_campaign_on_the_same_store_does_not_minimize_known_root_causes_again(tmp_path):
    opts = CampaignOptions(
        device="cpu", out_dir=tmp_path, max_cases=3, seed=3, dtypes=("bfloat16",), minimize=True,
        minimize_budget_s=30, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"),
    )
    first = Campaign(opts)
    first.run()
    assert first.analyzer.analyses >= 1
    first.close()  # the store and its campaign lock
    second = Campaign(CampaignOptions(**{**opts.__dict__, "max_cases": 3}))
    assert not second.resumed  # the first run finished: this is a new run over the same store
    second.run()
    assert second.analyzer.analyses == 0
    buckets = second.store.buckets()
    report = buckets_markdown(second.store)
    second.close()
    assert all("@" in b.key.signature for b in buckets)
    # Every bucket was judged; bug/suspect rows show their minimization read back from the folder,
    # by-design/noise ones are folded by culprit (the minimal size depends on the severity kept).
    assert all(b.severity_reason is not None for b in buckets)
    rows = [line for line in report.splitlines() if line.startswith("| ") and "@" in line]
    assert all(re.search(r"\| \d+ → \d+ ops, \d+ s \|", r) for r in rows), report
    # The minimizer keeps the severity and still shrinks: measured at seed 3, the 12-op graph whose
    # bumped output is sign(x) (integer-valued) shrinks to that one op within the 30 s budget.
    assert all(int(re.search(r"\| \d+ → (\d+) ops", r).group(1)) <= 2 for r in rows), report
    folded = [line for line in report.splitlines() if line.startswith("- ")]
    assert len(rows) + sum(int(re.search(r": (\d+) buckets", f).group(1)) for f in folded) == len(buckets), report
    assert all(_minimized(b.folder) for b in buckets)
    assert (tmp_path / STORE_NAME).exists()


def test_a_version_2_store_gains_ran_on_and_keeps_its_cases(tmp_path):
    import sqlite3

    from divfuzz.fuzzer.store import SCHEMA_VERSION

    path = tmp_path / STORE_NAME
    store = Store(path)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    case_id, _, _ = store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json="{}", device="cpu", config={},
                                   verdict={"status": "ok"}, score=0.0, wall_s=0.1, finding_kind=None, key=None, ran_on="cuda:1")
    assert store.case(case_id).ran_on == "cuda:1"
    store.close()
    db = sqlite3.connect(path)  # as written by schema 2, before cases recorded their device
    db.execute("ALTER TABLE cases DROP COLUMN ran_on")
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    db.commit()
    db.close()
    store = Store(path)
    try:
        assert store.case(case_id).ran_on is None and store.case(case_id).status == "ok"
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    finally:
        store.close()


def _finding_case(store, run_id, idx, raw, *, severity="suspect"):
    return store.add_case_for_analysis(
        raw_key=raw, severity_for=lambda key: {"severity": severity, "rule": key.signature, "output": "out", "detail": ""},
        run_id=run_id, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json="{}", device="cpu", config={},
        verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="bf16-ulp")


def test_a_version_3_store_gains_an_empty_pending_table_and_readers_see_it(tmp_path):
    import sqlite3

    from divfuzz.fuzzer.store import SCHEMA_VERSION

    path = tmp_path / STORE_NAME
    Store(path).close()
    db = sqlite3.connect(path)  # as written by schema 3, before analyses could be left pending
    db.execute("DROP TABLE pending_analyses")
    db.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    db.commit()
    db.close()
    store = Store(path, create=False)
    try:
        assert store.pending_count() == 0 and store.pending_analyses() == []
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION) == "4"
    finally:
        store.close()


def test_a_raw_bucket_is_renamed_or_merged_into_its_root_cause_and_its_pending_row_closed(tmp_path):
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    raw_a = BucketKey("bf16-ulp", "bfloat16", "cpu", "gelu+linear")
    raw_b = BucketKey("bf16-ulp", "bfloat16", "cpu", "gelu+relu")
    root = BucketKey("bf16-ulp", "bfloat16", "cpu", "gelu @ backend x")
    first = _finding_case(store, run_id, 0, raw_a)
    again = _finding_case(store, run_id, 1, raw_a)  # the same raw key while its analysis is open
    other = _finding_case(store, run_id, 2, raw_b)
    assert first.queued and not again.queued and other.queued and first.key == raw_a
    assert [p.raw_key for p in store.pending_analyses()] == [raw_a, raw_b] and store.pending_count() == 2
    judged = []
    by_design = lambda verdict: judged.append(verdict) or {"severity": "by-design", "rule": "knob", "output": "out", "detail": ""}
    filed = store.resolve_root_cause(raw_a, root, by_design)
    assert filed.created and filed.bucket_id == first.bucket_id and filed.severity == "by-design" and len(judged) == 2
    merged = store.resolve_root_cause(raw_b, root, by_design)
    assert not merged.created and merged.bucket_id == first.bucket_id and merged.raw_bucket_id == other.bucket_id
    later = _finding_case(store, run_id, 3, raw_b)  # a raw key already filed goes straight to its root cause
    assert later.key == root and not later.queued and later.bucket_id == first.bucket_id
    [bucket] = store.buckets()
    assert bucket.key == root and bucket.count == 4 and bucket.severity == "suspect"  # the later case, judged suspect, outranks by-design
    assert store.pending_count() == 0 and store.root_cause_of(raw_a) == root == store.root_cause_of(raw_b)
    assert {store.case(i).bucket_id for i in (first.case_id, again.case_id, other.case_id, later.case_id)} == {bucket.id}
    store.close()
