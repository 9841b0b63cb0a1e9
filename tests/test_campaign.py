"""Campaigns end to end with real workers, the real SQLite store and (where it counts) real Inductor.

Planted-bug backends prove each defect is caught and bucketed while the campaign goes on; the
real-Inductor campaign proves the bug families of the seeds are found on CPU.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig


def _campaign(tmp_path: Path, backend: str, **kw):
    kw.setdefault("max_cases", 4)
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend=backend), **kw)
    result = run_campaign(opts)
    store = Store(tmp_path / STORE_NAME)
    try:
        return result, store.buckets(run_id=result.run_id)
    finally:
        store.close()


def test_planted_ulp_bump_is_caught_in_a_bf16_bucket(tmp_path):
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:ulp_bump", dtypes=("bfloat16",), max_cases=5, seed=3)
    assert result.progress.cases == 5
    kinds = {b.key.kind for b in buckets}
    assert "bf16-ulp" in kinds, kinds
    for b in buckets:
        assert (Path(b.folder) / "repro.py").exists() and (Path(b.folder) / "spec.json").exists()


def test_planted_uint8_flip_is_caught_as_an_integer_finding(tmp_path):
    # Every case draws an encoding (with its cast guard): which other ops share a seed's draws
    # changes whenever the generator does, and this test is about the integer oracle.
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:uint8_flip", ops=("e8m0_encode",), max_cases=5, seed=1)
    kinds = {b.key.kind for b in buckets if b.key.dtype == "uint8"}
    assert kinds & {"int-gross", "int-boundary"}, [str(b.key) for b in buckets]


def test_planted_compile_error_is_a_finding_and_the_campaign_goes_on(tmp_path):
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:compile_error", max_cases=3)
    assert result.progress.cases == 3
    assert buckets and all(b.key.kind == "compile-error" for b in buckets)
    assert all("PlantedCompileError" in b.key.detail for b in buckets)


def test_killed_worker_is_a_crash_finding_and_the_campaign_goes_on(tmp_path):
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:kill_worker", max_cases=2)
    assert result.progress.cases == 2
    assert result.progress.by_status["crash"] == 2
    assert all(b.key.kind == "crash" and "SIGKILL" in b.key.detail for b in buckets)


def test_a_hang_past_the_timeout_is_a_finding_and_the_campaign_goes_on(tmp_path):
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:hang", max_cases=2, timeout_s=8)
    assert result.progress.by_status["hang"] == 2
    assert {b.key.kind for b in buckets} == {"hang"}


def test_a_slot_does_not_run_again_a_spec_it_drew_twice(tmp_path):
    # Hypothesis draws the same graph from other choices: seed 7's first slot repeats a spec by
    # its 4th draw (13 of its first 40). A repeat is not run, stored or counted as a case; its
    # draw keeps its place (idx), so a resumed run's stored rows line up with the draws.
    result, _ = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:eager_in_disguise", max_cases=12, seed=7)
    db = sqlite3.connect(tmp_path / STORE_NAME)
    rows = db.execute("SELECT idx, spec_digest FROM cases WHERE run_id=? ORDER BY idx", (result.run_id,)).fetchall()
    db.close()
    digests = [d for _, d in rows]
    assert result.progress.cases == len(rows) == 12
    assert len(set(digests)) == 12
    assert result.progress.repeats > 0
    assert rows[-1][0] + 1 == 12 + result.progress.repeats  # every draw up to the last case: a case or a repeat


def test_a_slot_whose_every_draw_repeats_stops_instead_of_drawing_forever(tmp_path, monkeypatch):
    # Options that leave one graph: under --max-cases alone the slot would draw repeats forever.
    from hypothesis import strategies as st

    from divfuzz.fuzzer.campaign import loop
    from seed_specs import sigmoid_gate

    monkeypatch.setattr(loop.CampaignOptions, "strategy", lambda self, slot=0: st.just(sigmoid_gate(64)))
    monkeypatch.setattr(loop, "REPEATS_BEFORE_EXHAUSTED", 5)
    result, _ = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:eager_in_disguise", max_cases=3)
    assert (result.progress.cases, result.progress.repeats, result.progress.exhausted_slots) == (1, 5, 1)


@pytest.mark.parametrize("cases", [40, pytest.param(100, marks=pytest.mark.slow)])  # CI runs the sample
def test_eager_in_disguise_yields_no_findings(tmp_path, cases):
    result, buckets = _campaign(tmp_path, "divfuzz.fuzzer.engine.planted:eager_in_disguise", max_cases=cases, seed=7)
    assert result.progress.cases == cases
    assert buckets == []
    assert result.progress.by_status.get("eager-error", 0) == 0


@pytest.mark.slow
def test_seeded_inductor_campaign_finds_a_norm_or_gelu_bf16_bucket_with_working_repros(tmp_path):
    result, buckets = _campaign(tmp_path, "inductor", max_cases=16, seed=11, dtypes=("bfloat16",))
    interesting = [
        b
        for b in buckets
        if b.key.kind == "bf16-ulp" and any(op in b.key.ops for op in _NORMS_AND_ERF)
    ]
    assert interesting, [str(b.key) for b in buckets]
    for b in buckets[:4]:
        proc = subprocess.run([sys.executable, str(Path(b.folder) / "repro.py")], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1, (str(b.key), proc.stdout[-2000:], proc.stderr[-2000:])


_NORMS_AND_ERF = {"layer_norm", "layer_norm_manual", "rms_norm", "rms_norm_manual", "group_norm", "batch_norm_eval", "gelu", "gelu_manual", "gelu_tanh"}


def test_same_seed_same_cases_and_each_case_records_the_device_it_ran_on(tmp_path):
    # Two slots each: the same seed and slot count give the same cases slot by slot.
    a, _ = _campaign(tmp_path / "a", "eager", max_cases=6, seed=5, workers=2)
    b, _ = _campaign(tmp_path / "b", "eager", max_cases=6, seed=5, workers=2)
    c, _ = _campaign(tmp_path / "c", "eager", max_cases=6, seed=6, workers=2)

    def digests(path):
        with sqlite3.connect(path / STORE_NAME) as db:
            return [r[0] for r in db.execute("SELECT spec_digest FROM cases ORDER BY slot, idx")]

    assert digests(tmp_path / "a") == digests(tmp_path / "b")
    assert digests(tmp_path / "a") != digests(tmp_path / "c")
    with sqlite3.connect(tmp_path / "a" / STORE_NAME) as db:
        rows = db.execute("SELECT slot, ran_on FROM cases").fetchall()
    assert len(rows) == 6 and {slot for slot, _ in rows} == {0, 1} and {on for _, on in rows} == {"cpu"}


def test_killed_campaign_resumes_without_losing_stored_cases(tmp_path):
    total = 16  # killed at 5 or more stored: the resume has cases stored and cases to run
    # One input per compile: four to a compile, the 16 cases would end in a second, before the kill
    # (a resume of a group: tests/test_input_siblings.py).
    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--backend", "eager", "--max-cases", str(total), "--workers", "1",
           "--seed", "2", "--out", str(tmp_path), "--no-live", "--inputs-per-compile", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db_path = tmp_path / STORE_NAME
    import time

    deadline = time.time() + 240
    stored = 0
    while time.time() < deadline:
        time.sleep(0.5)
        if db_path.exists():
            try:
                with sqlite3.connect(db_path) as db:
                    stored = db.execute("SELECT count(*) FROM cases").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if stored >= 5:
                break
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    with sqlite3.connect(db_path) as db:
        before = {r[0]: r[1] for r in db.execute("SELECT idx, spec_digest FROM cases")}
    assert len(before) >= 5
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(resumed)" in done.stdout
    with sqlite3.connect(db_path) as db:
        after = {r[0]: r[1] for r in db.execute("SELECT idx, spec_digest FROM cases")}
        runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert runs == 1
    assert len(after) == total and len(before) < total
    assert all(after[i] == d for i, d in before.items())


def _children(pid: int) -> list[int]:
    """Every process below `pid` (a worker started from the warm template is its server's child)."""
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            kids += [int(k) for k in (task / "children").read_text().split()]
    except OSError:  # it ended meanwhile
        return []
    return kids + [grandchild for kid in kids for grandchild in _children(kid)]


def _sleeping_in_a_case(pid: int) -> bool:
    """The planted `hang` backend sleeps inside the case: the worker's main thread waits in nanosleep."""
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_signal_to_the_whole_process_group_is_no_crash_finding(tmp_path):
    # `timeout`, CI cancellation and Ctrl-C signal the whole process group, workers included,
    # and often more than once. The worker must not die of it mid-case (a bogus `crash`); the
    # parent drops the case in flight, saves, reports, exits 2 at once, and leaves no process.
    import os
    import signal
    import time

    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--backend", "divfuzz.fuzzer.engine.planted:hang",
           "--timeout", "300", "--max-cases", "2", "--seed", "2", "--out", str(tmp_path), "--no-live", "--no-minimize"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline and not any(_sleeping_in_a_case(k) for k in _children(proc.pid)):
        time.sleep(0.5)
    assert any(_sleeping_in_a_case(k) for k in _children(proc.pid)), "the worker never reached the hanging case"
    signalled = time.time()
    os.killpg(proc.pid, signal.SIGTERM)
    for _ in range(3):  # `timeout` and CI runners signal more than once
        time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert time.time() - signalled < 60, "waited for the case in flight instead of dropping it"
    assert proc.returncode == 2, out
    assert "interrupted: 0 cases stored" in out, out
    with sqlite3.connect(tmp_path / STORE_NAME) as db:
        assert db.execute("SELECT count(*) FROM cases").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM buckets").fetchone()[0] == 0
        assert db.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    # No process left in the group, not even a zombie: divfuzz reaps its workers and the
    # multiprocessing resource tracker itself, because a CI container's PID 1 may reap none.
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


def test_a_worker_aborted_while_it_starts_is_no_error_and_no_finding(monkeypatch):
    # The budget's end (or Ctrl-C) can kill a worker still importing torch; that is an interrupt,
    # not divfuzz's own failure and not a crash of the compiler. A spawned worker imports torch
    # for seconds (one forked from the warm template is ready too soon to be caught starting).
    monkeypatch.setenv("DIVFUZZ_WARM_WORKERS", "0")
    import threading
    import time

    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
    from seed_specs import unary_bf16

    worker = Worker("cpu")
    got = []
    runner = threading.Thread(target=lambda: got.append(worker.run(
        CaseRequest(unary_bf16("gelu_tanh", rows=4, dim=4), "cpu", CompileConfig(backend="eager")), 60)))
    runner.start()
    deadline = time.time() + 60
    while time.time() < deadline and (worker.process is None or not worker.process.is_alive()):
        time.sleep(0.01)
    assert worker.conn is None or not worker.conn.poll(0), "the worker was ready before it could be aborted"
    worker.abort()
    runner.join(60)
    worker.stop()
    assert len(got) == 1 and got[0].error_type == "Aborted"


