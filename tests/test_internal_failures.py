"""divfuzz's own failures are loud: they stop the run, exit 2 with one line and a log, are
recorded `failed` in the store, and never become compiler buckets. One live campaign per store.

Real SQLite files (corrupted page by page), real worker processes, real `divfuzz fuzz`
subprocesses; no compile is needed (the eager backend, or no case at all).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.loop import Campaign, CampaignOptions
from divfuzz.fuzzer.store import STORE_NAME, CampaignLock, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import InternalError
from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.input_siblings import DEFAULT_INPUTS_PER_COMPILE
from divfuzz.generators.spec import InputRecipe, Node, TensorSpec
from seed_specs import unary_bf16

ROOT = Path(__file__).resolve().parents[1]


def corrupt_table(path: Path, table: str) -> None:
    """Overwrite the root page of `table` with garbage (the file must have no WAL left)."""
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()[0]
    db.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * page_size)


def cli_fuzz_options(out: Path, max_cases: int) -> CampaignOptions:
    """What `divfuzz fuzz --device cpu --backend eager --no-minimize --max-cases N` runs."""
    return CampaignOptions(device="cpu", out_dir=out, config=CompileConfig(backend="eager"), seed=0,
                           budget_s=None, max_cases=max_cases, minimize=False, inputs_per_compile=DEFAULT_INPUTS_PER_COMPILE)


def test_a_corrupt_cases_page_stops_the_campaign_records_it_failed_and_exits_2(tmp_path):
    out = tmp_path / "out"
    # An interrupted run with one stored case: the same command resumes it and reads that case first.
    campaign = Campaign(cli_fuzz_options(out, 3))
    spec = unary_bf16("gelu_tanh", rows=4, dim=4)
    campaign.store.add_case(run_id=campaign.run_id, slot=0, idx=0, spec_digest="0" * 16, spec_json=spec.to_json(),
                            device="cpu", config={}, verdict={"status": "ok"}, score=0.0, wall_s=0.1,
                            finding_kind=None, key=None)
    run_id = campaign.run_id
    campaign.close()
    corrupt_table(out / STORE_NAME, "cases")

    result = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--backend", "eager", "--no-minimize", "--no-live",
                                       "--max-cases", "3", "--workers", "1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "divfuzz stopped on its own error" in text and "corrupt" in text and f"run {run_id} recorded failed" in text
    log = out / f"divfuzz-run{run_id}-failure.log"
    assert f"traceback in {log}" in result.output.replace("\n", "")
    assert "Traceback" in log.read_text()
    store = Store(out / STORE_NAME, create=False)
    try:
        assert store.run_info(run_id)["status"] == "failed"
        error, log_path = store.run_failure(run_id)
        assert "corrupt" in error and log_path == str(log)
        assert store.buckets() == []  # the store's failure is no compiler bucket
    finally:
        store.close()


def huge_seed_spec():
    return replace(unary_bf16("gelu_tanh", rows=4, dim=4), recipe=InputRecipe("normal", 2**80))


def huge_shape_spec():
    spec = unary_bf16("gelu_tanh", rows=4, dim=4)
    shape = (1_000_000, 1_000_000)
    return replace(spec, inputs=(TensorSpec("x0", shape, "bfloat16"),),
                   nodes=(Node("v1", "gelu_tanh", ("x0",), (), "bfloat16", shape),))


def test_a_worker_reports_divfuzz_s_own_errors_as_internal_never_as_a_verdict():
    worker = Worker("cpu")
    try:
        # The worker re-validates what it is sent (the seed cap refuses 2**80 there) or fails building
        # it; either way the message names divfuzz, not the compiler, and says what broke.
        for spec, words in ((huge_seed_spec(), ("Overflow", "recipe.seed")), (huge_shape_spec(), ("GiB", "over the cap"))):
            with pytest.raises(InternalError) as info:
                worker.run(CaseRequest(spec, "cpu", CompileConfig(backend="eager")), 120)
            assert "not the compiler under test" in str(info.value) and any(w in str(info.value) for w in words)
            assert "Traceback" in info.value.details
            assert "\n" not in str(info.value)
        # The worker survives and still judges an ordinary case.
        verdict = worker.run(CaseRequest(unary_bf16("gelu_tanh", rows=4, dim=4), "cpu", CompileConfig(backend="eager")), 120)
        assert verdict.status.value == "ok"
    finally:
        worker.stop()


def test_the_gate_exits_2_not_1_when_divfuzz_fails_on_a_corpus_spec(tmp_path):
    """A spec that reaches the worker and breaks divfuzz (here a 2**80 seed, which the spec loader
    may also refuse first) is no compiler regression: exit 2, never a FAIL line."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "huge-seed.json").write_text(huge_seed_spec().to_json())
    from divfuzz.fuzzer.gate.baseline import machine_key
    from divfuzz.fuzzer.gate.machine import describe_machine

    baseline = {"schema_version": 3, **machine_key("cpu"), "config": {}, "specs": {}, "known_buckets": [],
                "machine": describe_machine("cpu")}
    (tmp_path / "b.json").write_text(json.dumps(baseline))
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(tmp_path), "--baseline", str(tmp_path / "b.json")])
    assert result.exit_code == 2, result.output
    assert "FAIL" not in result.output and "gate FAIL" not in result.output


def _divfuzz(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "divfuzz.fuzzer", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_a_second_campaign_on_a_live_store_is_refused_and_a_killed_one_s_lock_is_taken_over(tmp_path):
    out = tmp_path / "out"
    args = ("fuzz", "--device", "cpu", "--backend", "eager", "--no-minimize", "--no-live", "--max-cases", "100000", "--out", str(out))
    first = _divfuzz(*args)
    try:
        lock = out / "divfuzz.lock"
        deadline = time.time() + 120
        while time.time() < deadline and not (lock.exists() and str(first.pid) in lock.read_text()):
            assert first.poll() is None, first.stdout.read()
            time.sleep(0.2)
        assert str(first.pid) in lock.read_text()
        second = _divfuzz(*args)
        output, _ = second.communicate(timeout=120)
        assert second.returncode == 2, output
        assert f"another divfuzz campaign (pid {first.pid}" in " ".join(output.split()) and "--out" in output
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # a killed run: its lock goes stale
        first.wait()
    taken = CampaignLock(out / STORE_NAME)
    taken.acquire()
    try:
        assert taken.taken_over["pid"] == first.pid
        assert json.loads(taken.path.read_text())["pid"] == os.getpid()
    finally:
        taken.release()
