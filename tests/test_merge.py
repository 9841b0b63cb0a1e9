"""`divfuzz merge OUT STORE...`: shard stores fold into the store one host would have held.

Most tests build stores through the real Store API (no compile); one merges two real CPU
campaigns with a planted backend and compares with one store that ran both.
"""

from __future__ import annotations

import hashlib
import os
import resource
import stat
import subprocess
import sys
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.oracles.severity_policy import bucket_severity, key_severity
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig

_VERDICT = {"status": "diverged", "outputs": [], "timings": []}
GELU = BucketKey("ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps")
NORM = BucketKey("ulp", "bfloat16", "cpu", ops=("layer_norm",), rule="int-valued-wrong")
NORM_NOISE = BucketKey("ulp", "bfloat16", "cpu", ops=("layer_norm",), rule="few-ulps")
HANG = BucketKey("hang", "-", "cpu", ops=("sigmoid",), detail="Timeout", rule="hang")


def _severity(level: str, rule: str = "test") -> dict:
    return {"severity": level, "rule": rule, "output": "v1", "detail": level}


def _add_run(store: Store, seed: int, cases: list[tuple[str, BucketKey | None, str]]) -> int:
    """One finished run of `cases`: (spec digest, bucket key or None, severity: the key's), slot 0 in order."""
    run_id, _ = store.start_run(seed=seed, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
    for idx, (digest, key, level) in enumerate(cases):
        assert key is None or key_severity(key).value == level, (key, level)
        store.add_case(run_id=run_id, slot=0, idx=idx, spec_digest=digest, spec_json=json.dumps({"d": digest}),
                       device="cpu", config={}, verdict=_VERDICT, score=1.0, wall_s=0.1,
                       finding_kind=key.kind if key else None, key=key, triage="compiled-worse" if key else "",
                       judged=bucket_severity(key, _severity(level, key.rule)) if key else None, ran_on="cpu")
    store.finish_run(run_id)
    return run_id


# a2 and b0 are one graph whose cases were rated by different rules: two buckets (a key holds its rule).
SHARD_A = [("a0", GELU, "suspect"), ("a1", None, ""), ("a2", NORM_NOISE, "noise"), ("a3", GELU, "suspect"), ("a4", NORM, "bug")]
SHARD_B = [("b0", NORM, "bug"), ("b1", HANG, "bug"), ("a0", GELU, "suspect")]  # b's last case drew a's graph again


def _store(folder: Path, *runs: tuple[int, list]) -> Path:
    folder.mkdir(parents=True)
    store = Store(folder / STORE_NAME)
    try:
        for seed, cases in runs:
            _add_run(store, seed, cases)
    finally:
        store.close()
    return folder


def _buckets(folder: Path) -> dict[str, tuple]:
    """Bucket by bucket, what must agree: count, severity, triage, the seed of its first run."""
    with sqlite3.connect(folder / STORE_NAME) as db:
        return {key: (count, severity, triage, seed) for key, count, severity, triage, seed in db.execute(
            "SELECT b.key, b.count, b.severity, b.triage, r.seed FROM buckets b JOIN runs r ON r.id = b.first_run_id")}


def _cases(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / STORE_NAME) as db:
        return sorted(db.execute(
            "SELECT r.seed, c.slot, c.idx, c.spec_digest, c.status, b.key, c.ran_on FROM cases c JOIN runs r ON r.id = c.run_id"
            " LEFT JOIN buckets b ON b.id = c.bucket_id"), key=repr)


def _verdicts(*folders: Path) -> dict[str, tuple]:
    """Each bucket's key -> (severity, the reason it shows), as stored (a later folder's over an earlier one's)."""
    verdicts = {}
    for folder in folders:
        with sqlite3.connect(folder / STORE_NAME) as db:
            rows = db.execute("SELECT key, severity, severity_json FROM buckets").fetchall()
        verdicts.update({key: (severity, json.loads(reason) if reason else None) for key, severity, reason in rows})
    return verdicts


def _digest_tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _merge(*args):
    return CliRunner().invoke(main, ["merge", *map(str, args)])


def test_merge_of_two_shards_equals_one_store_of_the_same_cases_bucket_for_bucket(tmp_path):
    a = _store(tmp_path / "a", (1, SHARD_A))
    b = _store(tmp_path / "b", (2, SHARD_B))
    single = _store(tmp_path / "single", (1, SHARD_A), (2, SHARD_B))
    result = _merge(tmp_path / "merged", a, b)
    assert result.exit_code == 0, result.output
    merged = tmp_path / "merged"
    assert _buckets(merged) == _buckets(single)
    assert _buckets(merged)[GELU.identity()][0] == 3  # the same graph in two runs is two cases, as in one store
    assert _buckets(merged)[NORM.identity()][:2] == (2, "bug") and _buckets(merged)[NORM_NOISE.identity()][:2] == (1, "noise")
    assert _cases(merged) == _cases(single)
    with sqlite3.connect(merged / STORE_NAME) as db:
        assert db.execute("SELECT seed, status FROM runs ORDER BY id").fetchall() == [(1, "finished"), (2, "finished")]
        first_seen, last_seen = db.execute("SELECT first_seen, last_seen FROM buckets WHERE key=?", (NORM.identity(),)).fetchone()
    with sqlite3.connect(a / STORE_NAME) as da, sqlite3.connect(b / STORE_NAME) as dbb:
        fa, la = da.execute("SELECT first_seen, last_seen FROM buckets WHERE key=?", (NORM.identity(),)).fetchone()
        fb, lb = dbb.execute("SELECT first_seen, last_seen FROM buckets WHERE key=?", (NORM.identity(),)).fetchone()
    assert (first_seen, last_seen) == (min(fa, fb), max(la, lb))


def test_merge_leaves_its_inputs_byte_identical_and_merging_again_adds_nothing(tmp_path):
    a = _store(tmp_path / "a", (1, SHARD_A))
    b = _store(tmp_path / "b", (2, SHARD_B))
    before = {p: _digest_tree(p) for p in (a, b)}
    assert _merge(tmp_path / "m", a, b).exit_code == 0
    once = (_buckets(tmp_path / "m"), _cases(tmp_path / "m"))
    again = _merge(tmp_path / "m", b / STORE_NAME, a)  # a file or a folder; the other order
    assert again.exit_code == 0, again.output
    assert "0 cases added (8 duplicates skipped)" in " ".join(again.output.split())
    assert (_buckets(tmp_path / "m"), _cases(tmp_path / "m")) == once
    assert {p: _digest_tree(p) for p in (a, b)} == before  # no -wal, -shm or lock file appeared either


def test_a_bucket_folder_is_copied_under_its_new_number_and_a_stored_path_cannot_lead_elsewhere(tmp_path):
    a = _store(tmp_path / "a", (1, SHARD_A))
    (a / "buckets" / "0003-ulp-layer-norm").mkdir(parents=True)
    (a / "buckets" / "0003-ulp-layer-norm" / "repro.py").write_text("print('repro')\n")
    (a / "buckets" / "0003-ulp-layer-norm" / "leak").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("not to be copied")
    with sqlite3.connect(a / STORE_NAME) as db:  # the store was moved: its paths name another host's folder
        db.execute("UPDATE buckets SET folder='/elsewhere/buckets/0003-ulp-layer-norm' WHERE key=?", (NORM.identity(),))
        db.execute("UPDATE buckets SET folder='/etc' WHERE key=?", (GELU.identity(),))
    b = _store(tmp_path / "b", (2, SHARD_B))
    result = _merge(tmp_path / "m", b, a)
    assert result.exit_code == 0, result.output
    with sqlite3.connect(tmp_path / "m" / STORE_NAME) as db:
        norm_id, folder = db.execute("SELECT id, folder FROM buckets WHERE key=?", (NORM.identity(),)).fetchone()
        assert db.execute("SELECT folder FROM buckets WHERE key=?", (GELU.identity(),)).fetchone()[0] is None
    assert norm_id == 1 and Path(folder).name.startswith("0001-")  # b came first: its layer_norm bucket is 1
    assert (Path(folder) / "repro.py").read_text() == "print('repro')\n" and not (Path(folder) / "leak").exists()
    assert "no folder to copy" in result.output and not list((tmp_path / "m" / "buckets").glob("*etc*"))


@pytest.mark.parametrize("order", ["older-first", "newer-first"])
def test_one_key_stored_under_two_policies_merges_at_the_more_severe(tmp_path, order):
    """A bucket's severity is its key's under the policy of the divfuzz that wrote the store: a
    shard written when NORM's rule was rated suspect, merged with one that rates it bug, keeps bug."""
    older = _store(tmp_path / "older", (1, [("a4", NORM, "bug")]))
    with sqlite3.connect(older / STORE_NAME) as db:
        assert db.execute("UPDATE buckets SET severity='suspect', severity_json=? WHERE key=?",
                          (json.dumps(_severity("suspect", NORM.rule)), NORM.identity())).rowcount == 1
    newer = _store(tmp_path / "newer", (2, [("b0", NORM, "bug")]))
    result = _merge(tmp_path / "m", *((older, newer) if order == "older-first" else (newer, older)))
    assert result.exit_code == 0, result.output
    assert _buckets(tmp_path / "m")[NORM.identity()][:2] == (2, "bug")  # the more severe of its inputs
    store = Store(tmp_path / "m" / STORE_NAME, create=False)
    try:
        [bucket] = store.buckets()
        assert bucket.severity == "bug" and bucket.severity_reason["severity"] == "bug"  # shown as it is stored
    finally:
        store.close()


def test_bad_inputs_exit_2_naming_the_file_and_write_nothing(tmp_path):
    a = _store(tmp_path / "a", (1, SHARD_A))
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    damaged = _store(tmp_path / "damaged", (3, SHARD_B))
    with sqlite3.connect(damaged / STORE_NAME) as db:
        db.execute("UPDATE buckets SET key_json='{not json' WHERE key=?", (HANG.identity(),))
    cases = [
        ((a, tmp_path / "missing"), str(tmp_path / "missing")),
        ((a, other), str(other)),
        ((a, a / STORE_NAME), "named twice"),
        ((a, damaged), str(damaged / STORE_NAME)),
    ]
    for inputs, named in cases:
        out = tmp_path / f"out-{len(named)}"
        before = {p: _digest_tree(p) for p in (a, damaged)}
        result = _merge(out, *inputs)
        assert result.exit_code == 2, result.output
        assert named in " ".join(result.output.split()).replace("\n", "")
        assert not (out / STORE_NAME).exists()  # all or nothing: a new output is not left half-merged
        assert {p: _digest_tree(p) for p in (a, damaged)} == before
    existing = _store(tmp_path / "existing", (9, SHARD_B))
    kept = (_buckets(existing), _cases(existing))
    result = _merge(existing, a, damaged)  # a's runs went in before damaged failed: all are rolled back
    assert result.exit_code == 2 and (_buckets(existing), _cases(existing)) == kept
    assert not (existing / "buckets").exists()
    assert _merge(existing, existing).exit_code == 2


def test_a_store_a_campaign_is_writing_is_refused(tmp_path):
    from divfuzz.fuzzer.store import CampaignLock

    a = _store(tmp_path / "a", (1, SHARD_A))
    lock = CampaignLock(a / STORE_NAME)
    lock.acquire()
    try:
        result = _merge(tmp_path / "m", a)
    finally:
        lock.release()
    assert result.exit_code == 2 and "campaign is running" in result.output and not (tmp_path / "m" / STORE_NAME).exists()


@pytest.mark.slow  # four campaigns (768 s on this loaded 2-core box); the Store-API test above proves the same fast
def test_merge_of_two_real_shard_campaigns_equals_one_store_that_ran_both(tmp_path):
    def campaign(out: Path, seed: int) -> None:
        run_campaign(CampaignOptions(device="cpu", out_dir=out, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"),
                                     dtypes=("bfloat16",), max_cases=3, seed=seed, workers=1))

    campaign(tmp_path / "shard1", 11)
    campaign(tmp_path / "shard2", 12)
    campaign(tmp_path / "single", 11)
    campaign(tmp_path / "single", 12)
    result = _merge(tmp_path / "merged", tmp_path / "shard1", tmp_path / "shard2")
    assert result.exit_code == 0, result.output
    buckets = _buckets(tmp_path / "merged")
    assert buckets and buckets == _buckets(tmp_path / "single")
    assert sum(count for count, *_ in buckets.values()) >= 3  # the planted bump is found
    assert _cases(tmp_path / "merged") == _cases(tmp_path / "single")
    assert {c[-1] for c in _cases(tmp_path / "merged")} == {"cpu"}  # ran_on kept
    folders = sorted((tmp_path / "merged" / "buckets").iterdir())
    assert len(folders) == len(buckets) and all((f / "repro.py").is_file() for f in folders)


def test_merge_of_two_tiny_real_campaigns_equals_one_store_that_ran_both(tmp_path):
    """The fast tier's real-campaign merge (2 cases of at most 2 ops each, no minimization): real
    stores written by the campaign loop, merged through the store's own methods."""
    def campaign(out: Path, seed: int) -> None:
        run_campaign(CampaignOptions(device="cpu", out_dir=out, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump"),
                                     dtypes=("bfloat16",), max_cases=2, max_ops=2, seed=seed, workers=1))

    for out, seeds in (("shard1", (11,)), ("shard2", (12,)), ("single", (11, 12))):
        for seed in seeds:
            campaign(tmp_path / out, seed)
    before = {p: _digest_tree(tmp_path / p) for p in ("shard1", "shard2")}
    result = _merge(tmp_path / "merged", tmp_path / "shard1", tmp_path / "shard2")
    assert result.exit_code == 0, result.output
    buckets = _buckets(tmp_path / "merged")
    assert buckets and buckets == _buckets(tmp_path / "single")
    assert _cases(tmp_path / "merged") == _cases(tmp_path / "single") and len(_cases(tmp_path / "merged")) == 4
    assert {p: _digest_tree(tmp_path / p) for p in ("shard1", "shard2")} == before
    folders = sorted((tmp_path / "merged" / "buckets").iterdir())
    assert len(folders) == len(buckets) and all((f / "repro.py").is_file() for f in folders)
    # Each folder is its shard's, copied whole (`Filing.copy_folder`), and each bucket's verdict is
    # the one its shard stored, as one store that ran both holds it: read, never judged again.
    shards = {tuple(sorted(_digest_tree(f).items())) for s in ("shard1", "shard2") for f in (tmp_path / s / "buckets").iterdir()}
    assert {tuple(sorted(_digest_tree(f).items())) for f in folders} <= shards
    assert _verdicts(tmp_path / "merged") == _verdicts(tmp_path / "single") == _verdicts(tmp_path / "shard2", tmp_path / "shard1")


RAW = BucketKey("ulp", "bfloat16", "cpu", ops=("gelu", "mul"), rule="many-ulps")
ROOT = BucketKey("ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps", culprit=CulpritKey("inductor"))


def _shard_with_analysis(folder: Path, seed: int, digests: list[str], *, filed: bool) -> Path:
    """A shard whose findings share the raw key RAW, stored before analysis (as the pool does);
    `filed`: its analysis then filed ROOT as the root cause, else it stayed pending."""
    folder.mkdir(parents=True)
    store = Store(folder / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=seed, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
        filing = Filing(store, folder, timeout_s=None)
        for idx, digest in enumerate(digests):
            row = dict(run_id=run_id, slot=0, idx=idx, spec_digest=digest, spec_json=json.dumps({"d": digest}), device="cpu",
                       config={}, verdict=_VERDICT, score=1.0, wall_s=0.1, finding_kind="ulp", ran_on="cpu")
            filing.store_case(row, key=None, raw_key=RAW, triage="compiled-worse", severity=_severity("suspect", RAW.rule),
                              for_analysis=True)
        if filed:
            filing.file_in_slot(RAW, ROOT)
        store.finish_run(run_id)
    finally:
        store.close()
    return folder


def _pending(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / STORE_NAME) as db:
        return db.execute("SELECT p.raw_key, c.spec_digest FROM pending_analyses p JOIN cases c ON c.id = p.case_id").fetchall()


def test_an_analysis_left_pending_in_a_shard_stays_pending_in_the_merge_pointing_at_its_case(tmp_path):
    a = _shard_with_analysis(tmp_path / "a", 1, ["a0", "a1"], filed=False)
    other = _store(tmp_path / "other", (5, SHARD_B))  # shifts case ids: the pending row must follow its case
    result = _merge(tmp_path / "merged", other, a)
    assert result.exit_code == 0, result.output
    assert _pending(tmp_path / "merged") == [(RAW.identity(), "a0")]
    assert "1 still pending" in " ".join(result.output.split())
    assert _buckets(tmp_path / "merged")[RAW.identity()][0] == 2


@pytest.mark.parametrize("order", ["pending-first", "filed-first"])
def test_a_raw_key_one_shard_left_open_and_another_filed_ends_filed_whatever_the_order(tmp_path, order):
    a = _shard_with_analysis(tmp_path / "a", 1, ["a0", "a1"], filed=False)
    b = _shard_with_analysis(tmp_path / "b", 2, ["b0"], filed=True)
    result = _merge(tmp_path / "merged", *((a, b) if order == "pending-first" else (b, a)))
    assert result.exit_code == 0, result.output
    merged = tmp_path / "merged"
    assert _pending(merged) == []  # open or filed, never both
    buckets = _buckets(merged)
    assert RAW.identity() not in buckets and buckets[ROOT.identity()][0] == 3  # every case under the root cause
    assert "1 closed" in " ".join(result.output.split())
    assert _verdicts(merged)[ROOT.identity()] == _verdicts(b)[ROOT.identity()]  # as the shard that filed it stored it


def _mknod_zero(path: Path) -> None:
    os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers


@pytest.mark.parametrize("plant, kind, out_exists", [
    (_mknod_zero, "a character device", False),
    pytest.param(_mknod_zero, "a character device", True, marks=pytest.mark.slow),
    (os.mkfifo, "a FIFO", False),
    (os.mkfifo, "a FIFO", True),
])
def test_a_device_or_fifo_in_a_shards_bucket_folder_is_refused_by_name_and_leaves_out_as_it_was(tmp_path, plant, kind,
                                                                                                   out_exists):
    """A character device (/dev/zero) in a shard's bucket folder was read until the output disk
    was full; a FIFO's refusal was a raw Python list of tuples; both left an empty `buckets/`."""
    if kind == "a character device" and os.getuid() != 0:
        pytest.skip("mknod of a character device needs root")
    a = _store(tmp_path / "a", (1, SHARD_A))
    folder = a / "buckets" / "0002-ulp-layer-norm"
    folder.mkdir(parents=True)
    (folder / "repro.py").write_text("print('repro')\n")
    plant(folder / "zero")
    with sqlite3.connect(a / STORE_NAME) as db:
        db.execute("UPDATE buckets SET folder=? WHERE key=?", (str(folder), NORM.identity()))
    out = tmp_path / "m"
    if out_exists:
        _store(out, (2, SHARD_B))
    before = _digest_tree(out) if out_exists else None
    if kind == "a FIFO":  # refused or not, a FIFO never blocks the copy: in process
        result = _merge(out, a)
        code, text = result.exit_code, " ".join(result.output.split())
    else:  # a real process under a 64 MiB file-size limit: were the device read, the test fails, not the disk
        limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 26, 1 << 26))  # noqa: E731
        ran = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "merge", str(out), str(a)], capture_output=True,
                             text=True, timeout=300, preexec_fn=limit)
        code, text = ran.returncode, " ".join((ran.stdout + ran.stderr).split())
    assert code == 2, text
    assert f"{folder / 'zero'} is {kind}, not a regular file or folder; refused without reading it" in text
    assert "nothing was merged" in text and "[(" not in text
    if out_exists:
        after = {name: digest for name, digest in _digest_tree(out).items() if name != "divfuzz.lock"}  # the lock: as any merge
        assert not (out / "buckets").exists() and after == before
    else:
        assert not out.exists()
