"""`divfuzz diff OLD NEW`: two real stores with planted changes report exactly those changes.

The stores are written through the real `Store` API (no compile): each case is a real spec (its
real digest) with a real verdict, as a campaign would store it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.oracles.severity_policy import bucket_severity, key_severity
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict
from divfuzz.reports.diff import diff_sides, side_from_store
from tests.seed_specs import layer_norm_linear, sigmoid_gate

def _root(*ops: str, culprit: CulpritKey, rule: str = "many-ulps") -> BucketKey:
    return BucketKey("bf16-ulp", "bfloat16", "cpu", ops=ops, rule=rule, culprit=culprit)


STAYS = _root("gelu", culprit=CulpritKey("inductor", "lowerings", "aten.erf"))
FIXED = _root("layer_norm", "linear", culprit=CulpritKey("aot_eager_decomp_partition", "decomposition", "aten.native_layer_norm"))
WORSE = _root("linear", "mul", "sigmoid", culprit=CulpritKey("inductor", "fused sigmoid gate"), rule="float-gross-worse")
NEW = _root("rms_norm", culprit=CulpritKey("inductor", "lowerings", "aten.rsqrt"))
NOT_REACHED = _root("softmax", culprit=CulpritKey("inductor", "online softmax"))


def _verdict(max_ulp: int) -> dict:
    f = FloatComparison(
        dtype="bfloat16", numel=1024, n_diff=7, max_ulp=max_ulp, ulp_histogram=(("1", 5), ("2", 2)),
        nan_inf_mismatch=0, triage="compiled-worse", n_worse=7, n_closer=0, rmse_eager=1e-3, rmse_compiled=3e-3,
        max_abs_diff=0.01,
    )
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v2", float_cmp=f),)).to_dict()


def _ok() -> dict:
    return Verdict(Status.OK).to_dict()


def _severity(key: BucketKey) -> dict:
    sev = key_severity(key).value
    return {"severity": sev, "rule": key.rule, "output": "v2", "detail": f"planted {sev}"}


def _add(store: Store, run_id: int, idx: int, spec, *, key=None, max_ulp=3) -> None:
    store.add_case(
        run_id=run_id, slot=0, idx=idx, spec_digest=spec.digest(), spec_json=spec.to_json(indent=None), device="cpu",
        config={"backend": "inductor"}, verdict=_verdict(max_ulp) if key else _ok(), score=1.0, wall_s=0.5,
        finding_kind=key.kind if key else None, key=key, triage="compiled-worse" if key else "",
        judged=bucket_severity(key, _severity(key)) if key else None,
    )


def _rated_by_an_older_policy(path: Path, key: BucketKey, severity: str) -> None:
    """`key`'s bucket as a divfuzz whose severity policy rated the key's rule `severity` stored it:
    a bucket's severity is its key's under the policy of the divfuzz that wrote the store."""
    db = sqlite3.connect(path)
    assert db.execute("UPDATE buckets SET severity=? WHERE key=?", (severity, key.identity())).rowcount == 1
    db.commit()
    db.close()


def _run(store: Store, seed: int, device: str = "cpu") -> int:
    run_id, _ = store.start_run(seed=seed, device=device, config={"backend": "inductor"}, options={}, versions={"torch": "2.13"})
    return run_id


def _spec(rows: int):
    return layer_norm_linear(rows=rows, dim=8)


@pytest.fixture
def stores(tmp_path):
    """OLD: STAYS, FIXED, WORSE (suspect, as an older policy rated its rule), NOT_REACHED. NEW:
    replays FIXED's spec (no finding), STAYS as before, WORSE now `bug`, and a NEW bucket;
    NOT_REACHED's spec is never run."""
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir(), new_dir.mkdir()
    old = Store(old_dir / STORE_NAME)
    r = _run(old, 1)
    _add(old, r, 0, _spec(2), key=STAYS)
    _add(old, r, 1, _spec(3), key=FIXED)
    _add(old, r, 2, sigmoid_gate(rows=4, dim=8), key=WORSE)
    _add(old, r, 3, _spec(5), key=NOT_REACHED)
    _add(old, r, 4, _spec(6))
    old.finish_run(r)
    old.close()
    _rated_by_an_older_policy(old_dir / STORE_NAME, WORSE, "suspect")
    new = Store(new_dir / STORE_NAME)
    r = _run(new, 2)
    _add(new, r, 0, _spec(2), key=STAYS)
    _add(new, r, 1, _spec(3))  # FIXED's spec, replayed: no finding now
    _add(new, r, 2, sigmoid_gate(rows=4, dim=8), key=WORSE)  # bug: its rule's severity now
    _add(new, r, 3, _spec(7), key=NEW)
    new.finish_run(r)
    new.close()
    return old_dir, new_dir


def _side(folder: Path, run_id=None):
    store = Store(folder / STORE_NAME, create=False)
    try:
        return side_from_store(store, run_id=run_id, label=str(folder))
    finally:
        store.close()


def test_planted_changes_are_reported_exactly(stores):
    old_dir, new_dir = stores
    d = diff_sides(_side(old_dir), _side(new_dir))
    assert [b.key for b in d.new_buckets] == [str(NEW)]
    assert {(g.bucket.key, g.status) for g in d.gone} == {(str(FIXED), "fixed"), (str(NOT_REACHED), "not reached")}
    assert [(c.new.key, c.what) for c in d.changed] == [(str(WORSE), ("severity suspect -> bug",))]
    assert d.unchanged == 1  # STAYS
    assert d.setups_differ == ""  # same device and config on both sides


def _cli(*args: str):
    """The real command line, in process (the group's error handling included)."""
    r = CliRunner().invoke(main, ["diff", *args], catch_exceptions=False)
    r.returncode = r.exit_code
    return r


def test_cli_json_markdown_and_terminal_agree(stores):
    old_dir, new_dir = stores
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (old_dir / STORE_NAME, new_dir / STORE_NAME)}
    j = _cli(str(old_dir), str(new_dir), "--json")
    assert j.returncode == 0, j.stderr
    data = json.loads(j.stdout)
    assert [b["key"] for b in data["new_buckets"]] == [str(NEW)]
    assert sorted((g["key"], g["status"]) for g in data["gone"]) == sorted([(str(FIXED), "fixed"), (str(NOT_REACHED), "not reached")])
    assert [c["what"] for c in data["changed"]] == [["severity suspect -> bug"]]
    md = _cli(str(old_dir), str(new_dir), "--markdown")
    assert md.returncode == 0 and "## new" in md.stdout and "| fixed |" in md.stdout and "| not reached |" in md.stdout
    text = _cli(str(old_dir / STORE_NAME), f"{new_dir}:1")  # the file itself, and STORE:RUN_ID
    assert text.returncode == 0, text.stderr
    assert "1 new, 2 gone, 1 changed, 1 unchanged" in text.stdout
    assert before == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in before}  # diff writes nothing


def test_runs_of_one_store_are_diffed_by_run_id(tmp_path):
    store = Store(tmp_path / STORE_NAME)
    r1 = _run(store, 1)
    _add(store, r1, 0, _spec(2), key=STAYS, max_ulp=3)
    _add(store, r1, 1, _spec(3), key=FIXED)
    store.finish_run(r1)
    r2 = _run(store, 2)
    _add(store, r2, 0, _spec(2), key=STAYS, max_ulp=40)  # same bucket, wider bound
    _add(store, r2, 1, _spec(4), key=NEW)
    store.finish_run(r2)
    store.close()
    d = diff_sides(_side(tmp_path, r1), _side(tmp_path, r2))
    assert [b.key for b in d.new_buckets] == [str(NEW)]
    assert [(g.bucket.key, g.status) for g in d.gone] == [(str(FIXED), "not reached")]
    assert [c.what for c in d.changed] == [("max_ulp 3 -> 40",)]


def test_any_device_matches_a_cpu_bucket_with_its_gpu_twin(tmp_path):
    for name, device in (("cpu", "cpu"), ("gpu", "cuda")):
        (tmp_path / name).mkdir()
        store = Store(tmp_path / name / STORE_NAME)
        r = _run(store, 1, device)
        _add(store, r, 0, _spec(2), key=replace(STAYS, device_type=device))
        store.close()
    cpu, gpu = _side(tmp_path / "cpu"), _side(tmp_path / "gpu")
    strict = diff_sides(cpu, gpu)
    assert len(strict.new_buckets) == 1 and len(strict.gone) == 1
    assert "cpu" in strict.setups_differ and "cuda" in strict.setups_differ  # said, since "fixed" means less then
    loose = diff_sides(cpu, gpu, match_device=False)
    assert not loose.new_buckets and not loose.gone and loose.unchanged == 1


def test_bad_sides_exit_2_naming_them(stores, tmp_path):
    old_dir, new_dir = stores
    not_store = tmp_path / "notes.sqlite"
    not_store.write_bytes(b"not a database" * 50)
    before = not_store.read_bytes()
    for args, named in (
        ((str(tmp_path / "nowhere"), str(new_dir)), "OLD"),
        ((str(old_dir), f"{new_dir}:99"), "no run 99"),
        ((str(old_dir), str(not_store)), "notes.sqlite"),
    ):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert named in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not_store.read_bytes() == before


HOSTILE = '<script>alert("x")</script>'
HOSTILE_IMG = "<img src=x onerror=alert(1)>"
HOSTILE_NEW = _root("relu", culprit=CulpritKey("inductor", HOSTILE), rule="float-gross-worse")
HOSTILE_GONE = replace(_root("gelu", culprit=CulpritKey("inductor", HOSTILE, HOSTILE_IMG), rule="float-gross-worse"),
                       detail=HOSTILE_IMG, ops=("gelu", HOSTILE_IMG))


def _plant_hostile(old_dir: Path, new_dir: Path) -> None:
    """One more bucket on each side whose key, culprit and severity reason are markup: gone (not
    reached) from OLD, new in NEW."""
    for folder, key, idx in ((old_dir, HOSTILE_GONE, 10), (new_dir, HOSTILE_NEW, 11)):  # other specs: not a replay
        store = Store(folder / STORE_NAME, create=False, read_only=False)  # written to: a writer's open
        store.add_case(
            run_id=1, slot=0, idx=idx, spec_digest=_spec(20 + idx).digest(), spec_json=_spec(20 + idx).to_json(indent=None),
            device="cpu", config={"backend": "inductor"}, verdict=_verdict(3), score=1.0, wall_s=0.5, finding_kind=key.kind,
            key=key, triage="compiled-worse", judged=bucket_severity(key, {"severity": "bug", "rule": "t", "output": "v2", "detail": f"why {HOSTILE_IMG}"}),
        )
        bucket = next(b for b in store.buckets() if b.key == key)
        store.set_bucket_analysis(bucket.id, minimized=None, culprit={"stage": "inductor", "summary": HOSTILE_IMG})
        store.close()


def _section(page: str, sid: str) -> str:
    start = page.index(f'<section id="{sid}">')
    return page[start:page.index("</section>", start)]


def test_html_holds_each_planted_change_in_its_section_and_escapes_every_stored_string(stores, tmp_path):
    import re
    import time
    from html import unescape as html_unescape

    from divfuzz.reports.diff import diff_html

    old_dir, new_dir = stores
    _plant_hostile(old_dir, new_dir)
    html = tmp_path / "site" / "diff.html"
    r = _cli(str(old_dir), str(new_dir), "--json", "--html", str(html))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unchanged"] == 1  # stdout is still the JSON alone
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert not re.search(r'(src|href)="', page)  # nothing to load, nothing to follow

    def keys(sid):
        return {html_unescape(k) for k in re.findall(r'<tr data-key="([^"]*)"', _section(page, sid))}

    assert keys("new") == {str(NEW), str(HOSTILE_NEW)}
    assert keys("fixed") == {str(FIXED)}
    assert keys("not-reached") == {str(NOT_REACHED), str(HOSTILE_GONE)}
    assert keys("changed") == {str(WORSE)}
    assert "severity suspect -&gt; bug" in _section(page, "changed")
    assert "2 new, 3 gone (1 fixed, 2 not reached), 1 changed, 1 unchanged" in page
    # render time of the page alone (reported by the engineer; bounded loosely so a slow host passes)
    d = diff_sides(_side(old_dir), _side(new_dir))
    t0 = time.perf_counter()
    diff_html(d)
    assert time.perf_counter() - t0 < 2.0


def test_html_to_an_unwritable_path_exits_2_before_reading_a_store(stores, tmp_path):
    old_dir, new_dir = stores
    (tmp_path / "afile").write_text("x")
    r = _cli(str(tmp_path / "nowhere"), str(new_dir), "--html", str(tmp_path / "afile" / "d.html"))
    assert r.returncode == 2 and "--html" in r.stderr and "afile" in r.stderr, r.stderr  # the path, not the missing OLD
