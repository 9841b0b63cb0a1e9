"""Hostile input exits 2 with a message naming the file, field or value, and leaves existing files
byte-identical: bad baselines, unusable output folders, a full disk, stores that are not divfuzz's
or are damaged. No compile: each is refused before any case runs.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.errors import StoreError
from divfuzz.fuzzer.gate.baseline import machine_key
from test_internal_failures import corrupt_table

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "corpus" / "specs" / "seed-gelu-tanh-bf16.json"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def flat(text: str) -> str:
    return " ".join(text.split())


def one_spec_corpus(root: Path) -> Path:
    (root / "specs").mkdir(parents=True)
    shutil.copy(SPEC, root / "specs" / SPEC.name)
    return root


def good_baseline() -> dict:
    from divfuzz.fuzzer.gate.machine import describe_machine

    return {"schema_version": 3, **machine_key("cpu"), "config": {}, "known_buckets": [], "machine": describe_machine("cpu"), "specs": {
        "seed-gelu-tanh-bf16": {"status": "diverged", "error_type": None,
                                "severity": {"severity": "noise", "rule": "few-ulps", "output": "v1"}, "outputs": {"v1": {
            "kind": "float", "dtype": "bfloat16", "numel": 16, "n_diff": 1, "diff_fraction": 0.0625,
            "max_ulp": 1, "nan_inf_mismatch": 0, "triage": "same"}}}}}


def gate_with_baseline(tmp_path: Path, text: str):
    corpus = one_spec_corpus(tmp_path / "corpus")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(text)
    return invoke("gate", "--device", "cpu", "--corpus", str(corpus), "--baseline", str(baseline)), baseline


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_in_a_baseline_exits_2_naming_it(tmp_path, constant):
    text = json.dumps(good_baseline(), indent=1).replace('"max_ulp": 1', f'"max_ulp": {constant}')
    result, baseline = gate_with_baseline(tmp_path, text)
    assert result.exit_code == 2, result.output
    assert str(baseline) in flat(result.output).replace(" ", "") or str(baseline) in result.output.replace("\n", "")
    assert constant in result.output and "not a number JSON allows" in flat(result.output)


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda b: b["specs"]["seed-gelu-tanh-bf16"]["outputs"]["v1"].pop("numel"), "outputs.v1.numel"),
        (lambda b: b["specs"]["seed-gelu-tanh-bf16"]["outputs"]["v1"].update(max_ulp=-3), "outputs.v1.max_ulp"),
        (lambda b: b["specs"]["seed-gelu-tanh-bf16"]["outputs"]["v1"].update(max_ulp="7"), "outputs.v1.max_ulp"),
        (lambda b: b.pop("arch"), "arch"),
        (lambda b: b.pop("torch"), "torch"),
        (lambda b: b.update(config=["inductor"]), "config"),
        (lambda b: b.update(config={"inductor": ["not", "a", "mapping"]}), "config"),
        (lambda b: b.update(schema_version=True), "schema_version"),
        (lambda b: b["specs"]["seed-gelu-tanh-bf16"].update(error_type=3), "error_type"),
    ],
)
def test_a_baseline_missing_a_key_or_of_a_wrong_type_exits_2_naming_the_field(tmp_path, edit, field):
    data = good_baseline()
    edit(data)
    result, baseline = gate_with_baseline(tmp_path, json.dumps(data))
    assert result.exit_code == 2, result.output
    assert field in flat(result.output), result.output
    assert baseline.name in result.output


def test_out_under_a_regular_file_exits_2_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    for args in (
        ("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(blocker / "out")),
        ("minimize", str(SPEC), "--device", "cpu", "--repro-dir", str(blocker / "out")),
        ("minimize", "--module", "nowhere.py:make", "--device", "cpu", "--repro-dir", str(blocker / "out")),
        ("gate", "--device", "cpu", "--corpus", str(ROOT / "corpus"), "--repro-dir", str(blocker / "r")),
    ):
        t0 = time.perf_counter()
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "is a regular file, not a folder" in flat(result.output), (args, result.output)
        assert time.perf_counter() - t0 < 30, f"{args[0]} worked before refusing its --out"
    assert blocker.read_text() == "keep me\n"


def test_gate_report_paths_are_checked_before_the_replay(tmp_path):
    """Own attack: `--json` (or --junit/--markdown) under a regular file used to fail with a
    traceback and exit 1 (CI's "the gate failed") after the whole replay."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for option in ("--json", "--junit", "--markdown"):
        t0 = time.perf_counter()
        result = invoke("gate", "--device", "cpu", "--corpus", str(ROOT / "corpus"), option, str(blocker / "gate.out"))
        assert result.exit_code == 2, result.output
        assert option in result.output and "regular file" in flat(result.output)
        assert time.perf_counter() - t0 < 30


def _mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")


@pytest.fixture
def mount_point(tmp_path):
    where = tmp_path / "mnt"
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_out_on_a_read_only_file_system_exits_2_saying_so(mount_point):
    _mount_tmpfs(mount_point, "ro,size=1m")
    for args in (
        ("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(mount_point / "out")),
        ("minimize", str(SPEC), "--device", "cpu", "--repro-dir", str(mount_point / "out")),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "read-only" in flat(result.output) and str(mount_point) in result.output.replace("\n", "")


def test_a_full_disk_exits_2_saying_so_and_keeps_the_store(mount_point):
    _mount_tmpfs(mount_point, "size=1m")
    out = mount_point / "out"
    out.mkdir()
    store = Store(out / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d0", spec_json="{}", device="cpu", config={},
                   verdict={"status": "ok"}, score=0.0, wall_s=0.1, finding_kind=None, key=None)
    with open(mount_point / "filler", "wb") as f:  # fill the disk
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    with pytest.raises(StoreError) as info:
        store.add_case(run_id=run_id, slot=0, idx=1, spec_digest="d1", spec_json="x" * 2_000_000, device="cpu",
                       config={}, verdict={"status": "ok"}, score=0.0, wall_s=0.1, finding_kind=None, key=None)
    assert "the disk is full" in str(info.value) and str(out / STORE_NAME) in str(info.value)
    assert store.stored_case(run_id, 0, 0) == ("d0", 0.0) and store.stored_case(run_id, 0, 1) is None
    store.close()
    result = invoke("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "the disk is full" in flat(result.output)


def _sha(path: Path) -> bytes:
    return path.read_bytes()


def _report(out: Path):
    return invoke("report", "--out", str(out))


def test_report_refuses_an_empty_file_and_leaves_it_empty(tmp_path):
    (tmp_path / STORE_NAME).write_bytes(b"")
    result = _report(tmp_path)
    assert result.exit_code == 2 and "an empty file, not a divfuzz store" in flat(result.output)
    assert (tmp_path / STORE_NAME).read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE_NAME]


def foreign_store(path: Path) -> bytes:
    """Another application's SQLite file that also has a `meta` table (even a schema_version)."""
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                     "INSERT INTO meta VALUES ('schema_version', '1');"
                     "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('mine');")
    db.close()
    return path.read_bytes()


def test_report_and_minimize_refuse_another_application_s_sqlite_file_byte_identical(tmp_path):
    before = foreign_store(tmp_path / STORE_NAME)
    result = _report(tmp_path)
    assert result.exit_code == 2 and "not a divfuzz store" in flat(result.output)
    # Own attack: `minimize CASE-ID --out DIR` opened it for writing (WAL mode, divfuzz's tables).
    result = invoke("minimize", "1", "--out", str(tmp_path), "--device", "cpu", "--repro-dir", str(tmp_path / "min"))
    assert result.exit_code == 2 and "not a divfuzz store" in flat(result.output)
    result = invoke("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(tmp_path))
    assert result.exit_code == 2 and "not a divfuzz store" in flat(result.output)
    assert (tmp_path / STORE_NAME).read_bytes() == before
    assert not (tmp_path / (STORE_NAME + "-wal")).exists()


def small_store(out: Path) -> Path:
    """A real store with one run, one case and one bucket, its WAL folded into the file."""
    from divfuzz.records.buckets import BucketKey

    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    key = BucketKey(kind="ulp", dtype="bfloat16", device_type="cpu", ops=("gelu",), detail="")
    store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d0", spec_json="{}", device="cpu", config={},
                   verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="ulp", key=key, judged=bucket_severity(key, None), triage="same")
    store.finish_run(run_id)
    store.close()
    return out / STORE_NAME


def test_a_corrupt_buckets_page_exits_2_and_leaves_the_store_byte_identical(tmp_path):
    path = small_store(tmp_path)
    corrupt_table(path, "buckets")
    before = _sha(path)
    result = _report(tmp_path)
    assert result.exit_code == 2, result.output
    assert "the store is corrupt" in flat(result.output) and str(path) in result.output.replace("\n", "")
    assert _sha(path) == before


def test_a_non_integer_schema_version_exits_2_byte_identical(tmp_path):
    path = small_store(tmp_path)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='one' WHERE key='schema_version'")
    db.commit()
    db.close()
    before = _sha(path)
    for args in (("report", "--out", str(tmp_path)), ("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(tmp_path))):
        result = invoke(*args)
        assert result.exit_code == 2 and "schema_version 'one'" in flat(result.output) and "not an integer" in flat(result.output)
    assert _sha(path) == before


def test_a_damaged_row_in_a_store_exits_2_naming_the_store(tmp_path):
    """Own attack: valid SQLite, but a bucket row whose key_json is not JSON (a hand edit, a bad
    merge): `report` died with a JSONDecodeError traceback and exit 1."""
    path = small_store(tmp_path)
    db = sqlite3.connect(path)
    db.execute("UPDATE buckets SET key_json='{not json'")
    db.commit()
    db.close()
    before = _sha(path)
    result = _report(tmp_path)
    assert result.exit_code == 2, result.output
    assert "damaged row" in flat(result.output) and str(path) in result.output.replace("\n", "")
    assert _sha(path) == before


def test_a_schema_4_key_in_a_current_store_exits_2_naming_the_store(tmp_path):
    """A key row in the text form of schema 4 ("signature") where schema 5 keeps fields (a hand
    copy between stores): refused, naming the store and saying how such a key is converted."""
    path = small_store(tmp_path)
    db = sqlite3.connect(path)
    db.execute("UPDATE buckets SET key_json=?", (json.dumps(
        {"kind": "ulp", "dtype": "bfloat16", "device_type": "cpu", "signature": "gelu", "detail": ""}),))
    db.commit()
    db.close()
    before = _sha(path)
    result = _report(tmp_path)
    assert result.exit_code == 2, result.output
    assert "before schema 5" in flat(result.output) and "damaged row" in flat(result.output) and str(path) in result.output.replace("\n", ""), result.output
    assert "Traceback" not in result.output
    assert _sha(path) == before


def test_store_opened_for_reading_writes_nothing(tmp_path):
    path = small_store(tmp_path)
    before, mtime = _sha(path), os.stat(path).st_mtime_ns
    store = Store(path, create=False)
    assert [b.count for b in store.buckets()] == [1]
    store.close()
    assert _sha(path) == before and os.stat(path).st_mtime_ns == mtime
