"""The SQLite store: bad files are refused without damage; root causes survive a restart."""

from __future__ import annotations

import hashlib
import re

import pytest

from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.loop import Campaign, CampaignOptions
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import InternalError, StoreError
from divfuzz.records.severity import BucketSeverity, Severity
from divfuzz.reports.markdown import _minimized, buckets_markdown


def test_a_file_that_is_not_a_store_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "divfuzz.sqlite"
    path.write_bytes(b"this is not sqlite at all" * 100)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match="not a usable divfuzz store"):
        Store(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_root_causes_are_remembered_across_opens(tmp_path):
    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu", "layer_norm", "linear"), rule="many-ulps")
    root = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("layer_norm",), rule="many-ulps",
                     culprit=CulpritKey("aot_eager_decomp_partition", "decomposition", "aten.native_layer_norm"))
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
    # Every bucket a campaign minimizes has its root cause; one no campaign minimizes (noise: a
    # compiled-closer bf16 batch norm of seed 3's draws) may stay pending for the pool.
    assert all(b.key.culprit is not None for b in buckets if b.severity not in ("noise", "by-design", "eager-worse"))
    # Every bucket was judged; bug/suspect rows show their minimization read back from the folder,
    # by-design/noise ones are folded by culprit (the minimal size depends on the severity kept).
    assert all(b.severity_reason is not None for b in buckets)
    rows = [line for line in report.splitlines() if re.match(r"\| \d+ \| ", line)]  # a bucket's row in a root cause's table
    assert rows or "folded" in report, report
    assert all(re.search(r"\| \d+ → \d+ ops, \d+ s \|", r) for r in rows), report
    # The minimizer keeps the severity and still shrinks: measured at seed 3, the 12-op graph whose
    # bumped output is sign(x) (integer-valued) shrinks to that one op within the 30 s budget.
    assert all(int(re.search(r"\| \d+ → (\d+) ops", r).group(1)) <= 2 for r in rows), report
    folded = [line for line in report.splitlines() if line.startswith("- ")]
    assert len(rows) + sum(int(re.search(r": (\d+) buckets", f).group(1)) for f in folded) == len(buckets), report
    assert all(_minimized(b.folder) for b in buckets if b.key.culprit is not None)
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
    """A finding's case stored for analysis as the campaign stores it (`Filing.store_case`)."""
    row = dict(run_id=run_id, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json="{}", device="cpu", config={},
               verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="bf16-ulp")
    return Filing(store, store.path.parent, timeout_s=None).store_case(
        row, key=None, raw_key=raw, triage="", for_analysis=True,
        severity={"severity": severity, "rule": raw.rule, "output": "out", "detail": f"case {idx}"})


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
    store = Store(path, create=False, read_only=False)  # a writing command's open upgrades it
    try:
        assert store.pending_count() == 0 and store.pending_analyses() == []
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    finally:
        store.close()


def test_a_raw_bucket_is_renamed_or_merged_into_its_root_cause_and_its_pending_row_closed(tmp_path):
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    raw_a = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu", "linear"), rule="many-ulps")
    raw_b = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu", "relu"), rule="many-ulps")
    # Attribution named a documented precision switch: the root cause's severity is by-design.
    root = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps",
                     culprit=CulpritKey("inductor", switch="emulate_precision_casts"))
    first = _finding_case(store, run_id, 0, raw_a)
    again = _finding_case(store, run_id, 1, raw_a)  # the same raw key while its analysis is open
    other = _finding_case(store, run_id, 2, raw_b)
    assert first.queued and not again.queued and other.queued and first.key == raw_a
    assert [p.raw_key for p in store.pending_analyses()] == [raw_a, raw_b] and store.pending_count() == 2
    assert {b.severity for b in store.buckets()} == {"suspect"}  # the raw keys' rule
    filing = Filing(store, tmp_path, timeout_s=None)
    filed = filing.file_in_slot(raw_a, root)
    assert filed.created and filed.bucket_id == first.bucket_id and filed.severity == "by-design"
    merged = filing.file_in_slot(raw_b, root)
    assert not merged.created and merged.bucket_id == first.bucket_id and merged.raw_bucket_id == other.bucket_id
    assert merged.severity == "by-design"
    later = _finding_case(store, run_id, 3, raw_b)  # a raw key already filed goes straight to its root cause
    assert later.key == root and not later.queued and later.bucket_id == first.bucket_id
    [bucket] = store.buckets()
    # A bucket's severity is its key's: the later case, rated suspect on its own, does not change it.
    assert bucket.key == root and bucket.count == 4 and bucket.severity == "by-design"
    # The reason shown keeps the first case's words, the switch that made it by-design named in front
    # (and its rule as `severity_of` names a finding a precision knob removes).
    assert bucket.severity_reason == {"severity": "by-design", "rule": "precision-knob", "output": "out",
                                      "detail": "emulate_precision_casts removes it; case 0"}
    assert store.pending_count() == 0 and store.root_cause_of(raw_a) == root == store.root_cause_of(raw_b)
    assert {store.case(i).bucket_id for i in (first.case_id, again.case_id, other.case_id, later.case_id)} == {bucket.id}
    store.close()


def test_the_store_stores_the_severity_it_is_given_and_derives_none(tmp_path):
    """Judge, then store: the store takes a bucket's verdict as a value (`BucketSeverity`) and
    keeps it as given; it refuses a bucket without one rather than judge the key itself."""
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    key = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("div", "floor"), rule="int-valued-wrong")  # its rule: a bug
    row = dict(run_id=run_id, slot=0, spec_json="{}", device="cpu", config={}, verdict={"status": "diverged"},
               score=1.0, wall_s=0.1, finding_kind="bf16-ulp")
    with pytest.raises(InternalError, match="without its bucket's verdict"):
        store.add_case(**row, idx=0, spec_digest="d0", key=key)
    assert store.buckets() == [] and store.case_at(run_id, 0, 0) is None  # nothing half-stored
    given = BucketSeverity(Severity.NOISE, {"severity": "noise", "rule": "planted", "output": "o", "detail": "as given"})
    _, bucket_id, new = store.add_case(**row, idx=0, spec_digest="d0", key=key, judged=given)
    assert new and store.bucket(bucket_id).severity == "noise"  # not the key's rule's `bug`: what it was given
    assert store.bucket(bucket_id).severity_reason == given.reason
    # A later case's verdict does not move a known bucket's.
    store.add_case(**row, idx=1, spec_digest="d1", key=key, judged=BucketSeverity(Severity.BUG, {"severity": "bug"}))
    assert store.bucket(bucket_id).severity == "noise" and store.bucket(bucket_id).severity_reason == given.reason
    # A case for analysis comes with the key the store files it under, read in the same transaction.
    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps")
    root = raw.with_culprit(CulpritKey("inductor", "lowerings", "aten.gelu"))
    store.remember_root_cause(raw, root)
    with pytest.raises(InternalError, match="key_for_case"):
        store.add_case_for_analysis(**row, idx=2, spec_digest="d2", raw_key=raw, key=raw, judged=given)
    assert store.key_for_case(raw) == root and store.case_at(run_id, 0, 2) is None and store.pending_count() == 0
    # A re-keyed bucket takes the verdict its filer gives it.
    other = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("exp",), rule="many-ulps")
    store.add_case_for_analysis(**row, idx=3, spec_digest="d3", raw_key=other, key=other,
                                judged=BucketSeverity(Severity.SUSPECT, None))
    filed = store.resolve_root_cause(other, other.with_culprit(CulpritKey("inductor")), judged=given)
    assert filed.created and filed.severity == "noise" and store.bucket(filed.bucket_id).severity_reason == given.reason
    store.close()


def test_a_root_cause_without_a_switch_keeps_its_raw_keys_severity(tmp_path):
    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("div", "floor"), rule="int-valued-wrong")
    root = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("div",), rule="int-valued-wrong",
                     culprit=CulpritKey("inductor", "lowerings", "aten.div", switch="emulate_precision_casts"))
    first = _finding_case(store, run_id, 0, raw, severity="bug")
    assert store.bucket(first.bucket_id).severity == "bug"
    filed = Filing(store, tmp_path, timeout_s=None).file_in_slot(raw, root)
    # a wrong answer stays a bug even when a precision switch hides it
    assert filed.created and filed.severity == "bug" and store.bucket(filed.bucket_id).severity == "bug"
    assert store.bucket(filed.bucket_id).severity_reason["detail"] == "case 0"
    store.close()


def _old_text(key: dict) -> str:
    """A schema-4 key's text, as schema 4 wrote it into the `key` and `raw_key` columns."""
    detail = f" {key['detail']}" if key["detail"] else ""
    return f"{key['kind']}{detail} · {key['dtype']} · {key['device_type']} · {key['signature']}"


def test_a_version_4_store_converts_its_keys_to_fields_and_keeps_severities_cases_and_analyses(tmp_path):
    """Schema 4 keyed rows by a text: "ops (modes)", "raised: <site>", or "ops @ culprit text" once
    analysed. Opening it converts every key (buckets, pending analyses, remembered root causes) to
    fields: the rule from the bucket's stored reason, the culprit from its stored culprit."""
    import json
    import sqlite3

    from divfuzz.fuzzer.store import SCHEMA_VERSION
    from divfuzz.records.culprit import Culprit

    path = tmp_path / STORE_NAME
    store = Store(path)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    case_ids = [store.add_case(run_id=run_id, slot=0, idx=i, spec_digest=f"d{i}", spec_json="{}", device="cpu", config={},
                               verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind=kind, key=None)[0]
                for i, kind in enumerate(("bf16-ulp", "bf16-ulp", "bf16-ulp", "compile-error"))]
    store.close()
    raw = {"kind": "bf16-ulp", "dtype": "bfloat16", "device_type": "cpu", "signature": "gelu+linear (autocast bfloat16)", "detail": ""}
    root = {"kind": "bf16-ulp", "dtype": "bfloat16", "device_type": "cpu",
            "signature": "layer_norm @ inductor: emulate_precision_casts removes it", "detail": ""}
    error = {"kind": "compile-error", "dtype": "-", "device_type": "cpu",
             "signature": "raised: torch/_inductor/lowering.py:N in make_pointwise", "detail": "AssertionError"}
    analysed_raw = {"kind": "bf16-ulp", "dtype": "bfloat16", "device_type": "cpu", "signature": "gelu+layer_norm (backward)", "detail": ""}
    culprit = Culprit(stage="inductor", summary="inductor: emulate_precision_casts removes it", fixes=("emulate_precision_casts",))
    reasons = {"raw": {"severity": "suspect", "rule": "many-ulps", "output": "y", "detail": "12 ULPs"},
               "root": {"severity": "by-design", "rule": "precision-knob", "output": "y", "detail": "emulate_precision_casts removes it; 3 ULPs"},
               "error": {"severity": "bug", "rule": "compile-error", "output": "-", "detail": "AssertionError"}}
    db = sqlite3.connect(path)  # as schema 4 wrote it: keys as text, a signature in key_json
    rows = [(1, raw, reasons["raw"], [case_ids[0], case_ids[1]], None, None),
            (2, root, reasons["root"], [case_ids[2]], json.dumps(culprit.to_dict()), json.dumps({"spec": {"backward": True}})),
            (3, error, reasons["error"], [case_ids[3]], None, None)]
    for bucket_id, key, reason, cases, culprit_json, minimized_json in rows:
        db.execute("INSERT INTO buckets(id, key, key_json, kind, dtype, device_type, signature, detail, triage, first_seen,"
                   " last_seen, first_run_id, count, first_case_id, minimized_json, culprit_json, severity, severity_json)"
                   " VALUES (?,?,?,?,?,?,?,?,'',0,0,?,?,?,?,?,?,?)",
                   (bucket_id, _old_text(key), json.dumps(key), key["kind"], key["dtype"], key["device_type"], key["signature"],
                    key["detail"], run_id, len(cases), cases[0], minimized_json, culprit_json, reason["severity"], json.dumps(reason)))
        db.executemany("UPDATE cases SET bucket_id=? WHERE id=?", [(bucket_id, c) for c in cases])
    db.execute("INSERT INTO pending_analyses(raw_key, key_json, case_id, queued_at) VALUES (?,?,?,0)",
               (_old_text(raw), json.dumps(raw), case_ids[0]))
    db.execute("INSERT INTO root_causes(raw_key, key_json) VALUES (?,?)", (_old_text(analysed_raw), json.dumps(root)))
    db.execute("UPDATE meta SET value='4' WHERE key='schema_version'")
    db.commit()
    db.close()

    store = Store(path, create=False, read_only=False)  # a writing command's open upgrades it
    try:
        assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        store.check_stored_keys()  # every key column is its key_json's identity
        by_id = {b.id: b for b in store.buckets()}
        new_raw = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu", "linear"), autocast="bfloat16", rule="many-ulps")
        new_root = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("layer_norm",), backward=True, rule="precision-knob",
                             culprit=CulpritKey("inductor", switch="emulate_precision_casts"))
        new_error = BucketKey("compile-error", "-", "cpu", detail="AssertionError",
                              site="torch/_inductor/lowering.py:N in make_pointwise", rule="compile-error")
        assert {i: b.key for i, b in by_id.items()} == {1: new_raw, 2: new_root, 3: new_error}
        assert new_error.ops_text() == "raised: torch/_inductor/lowering.py:N in make_pointwise"
        # each bucket keeps its severity, its reason and its cases
        assert {i: b.severity for i, b in by_id.items()} == {1: "suspect", 2: "by-design", 3: "bug"}
        assert by_id[1].severity_reason == reasons["raw"] and by_id[2].severity_reason == reasons["root"]
        assert {i: b.count for i, b in by_id.items()} == {1: 2, 2: 1, 3: 1}
        assert [store.case(c).bucket_id for c in case_ids] == [1, 1, 2, 3]
        assert by_id[2].culprit == culprit.to_dict()
        # the open analysis is keyed by its bucket's new key, and its priority found by that identity
        [pending] = store.pending_analyses()
        assert pending.raw_key == new_raw and pending.case_id == case_ids[0]
        assert store.pending_priorities() == {new_raw.identity(): ("suspect", 2)}
        # the remembered analysis files its raw key's fields under the converted root-cause key
        [filed] = store.root_cause_rows()
        assert filed.key == new_root
        from dataclasses import replace

        remembered = BucketKey.from_identity(filed.raw_key)  # its text named no rule: which it gets is the migration's choice
        assert replace(remembered, rule="") == BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu", "layer_norm"), backward=True)
        assert store.root_cause_of(remembered) == new_root
    finally:
        store.close()
    # converted once: opened again, nothing changes
    again = Store(path, create=False)
    try:
        assert {b.id: b.key for b in again.buckets()} == {1: new_raw, 2: new_root, 3: new_error}
    finally:
        again.close()
