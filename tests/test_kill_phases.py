"""A kill never corrupts a store (issue 40): after a SIGKILL at any moment and a resume, every bucket
points at a stored case and has its folder, and no `buckets/.tmp-*` is left behind.

The campaigns are real (two worker processes, the real store, real Inductor) and so are the kills:
`DIVFUZZ_KILL_AT` (`divfuzz.reports.kill_points`) has the driver SIGKILL itself at a chosen phase
(fuzzing, writing a folder, filing an analysis, writing the report), which a `kill -9` from outside
hits only by luck. The store-level test builds the state the issue found (a bucket's first case
dropped to run again while the other slot's case had joined it) with the store's own calls."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.buckets import BucketKey
from test_spec_safety import base


def broken_buckets(out: Path) -> list[str]:
    """What breaks the invariant, as lines: a bucket without a stored first case, without a
    recorded folder or whose folder is gone, and every `.tmp-*` left in `buckets/`."""
    problems = []
    with sqlite3.connect(out / STORE_NAME) as db:
        for bucket_id, first, folder in db.execute("SELECT id, first_case_id, folder FROM buckets"):
            if db.execute("SELECT COUNT(*) FROM cases WHERE id=?", (first,)).fetchone()[0] != 1:
                problems.append(f"bucket {bucket_id}: first case {first} is not stored")
            if folder is None or not (out / "buckets" / Path(folder).name).is_dir():
                problems.append(f"bucket {bucket_id}: no folder ({folder})")
    if (out / "buckets").exists():
        problems += [f"left behind: {p.name}" for p in (out / "buckets").iterdir() if p.name.startswith(".tmp-")]
    return problems


# ---- the store's own calls: the state the issue found ----------------------------------------

def _key(op: str) -> BucketKey:
    return BucketKey(kind="fp32-ulp", dtype="float32", device_type="cpu", ops=(op,), rule="many-ulps")


def _add(store: Store, run_id: int, slot: int, key: BucketKey):
    return store.add_case(run_id=run_id, slot=slot, idx=0, spec_digest="d", spec_json=json.dumps(base()), device="cpu",
                          config={"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}},
                          verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="fp32-ulp", key=key, judged=bucket_severity(key, None))


def test_a_bucket_whose_first_case_was_dropped_points_at_a_stored_case_and_gets_its_folder(tmp_path):
    """Slot 0's case opened bucket K and the driver died writing K's folder; slot 1's case had
    joined K. The resume ran slot 0's case again (dropping the first copy) and it landed elsewhere:
    K pointed at a deleted case for good ("divfuzz.sqlite: no case 3"). Before the resume draws,
    K points at its earliest stored case and has its folder; a bucket left with no case goes."""
    store = Store(tmp_path / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
        first, bucket, _ = _add(store, run_id, 0, _key("tanh"))
        joined, same, _ = _add(store, run_id, 1, _key("tanh"))
        assert same == bucket
        _add(store, run_id, 0, _key("exp"))  # the resume's run of slot 0's draw: the first copy is dropped
        (tmp_path / "buckets" / ".tmp-abc").mkdir(parents=True)
        (tmp_path / "buckets" / ".tmp-abc" / "repro.py").write_text("half")
        written = Filing(store, tmp_path, timeout_s=60).finish_interrupted()
        assert store.bucket(bucket).first_case_id == joined
        assert bucket in written
    finally:
        store.close()
    assert broken_buckets(tmp_path) == []
    assert json.loads((tmp_path / "buckets" / Path(Store(tmp_path / STORE_NAME).bucket(bucket).folder).name / "case.json")
                      .read_text())["case_id"] == joined


# ---- real campaigns, killed at each phase ----------------------------------------------------

FUZZ = ["fuzz", "--device", "cpu", "--workers", "2", "--max-cases", "24", "--seed", "5", "--no-live", "--max-ops", "3"]


def _fuzz(out: Path, xdg: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DIVFUZZ_KILL_AT", "TORCHINDUCTOR_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(xdg)
    if kill_at:
        env["DIVFUZZ_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", *FUZZ, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)


def _workers_of(out: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-f", "--", str(out)], capture_output=True, text=True).stdout.split()
    return [p for p in found if int(p) != os.getpid()]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["case-stored", "folder-written:2", "folder-moved:2", "root-cause-filed", "report"])
def test_a_campaign_killed_at_each_phase_resumes_to_a_whole_store(tmp_path, point):
    out, xdg = tmp_path / "out", tmp_path.parent / "kill-phases-cache"
    killed = _fuzz(out, xdg, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, (point, killed.returncode, killed.stdout[-2000:], killed.stderr[-2000:])
    if point.split(":")[0] in ("case-stored", "folder-written", "folder-moved"):
        assert broken_buckets(out), "the kill left a whole store: this phase is not tested"  # what the resume must put right
    resumed = _fuzz(out, xdg)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert broken_buckets(out) == []
    assert _workers_of(out) == []
    with sqlite3.connect(out / STORE_NAME) as db:
        assert db.execute("SELECT COUNT(*) FROM buckets").fetchone()[0] > 0
