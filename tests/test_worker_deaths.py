"""A worker killed from outside is no compiler bug (issue 56): a real worker process is sent
SIGKILL mid-case by the test, as `kill -9` or the OOM killer would. The case runs once more in a
fresh worker; only a death that repeats there is a crash, with its signal in the reason; one that
does not is an infrastructure event, said on stderr and kept with the verdict, never a finding."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from divfuzz.fuzzer.campaign.loop import Campaign, CampaignOptions
from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from seed_specs import unary_bf16

SLOW = CompileConfig(backend="divfuzz.fuzzer.engine.planted:slow_to_run")  # each compiled call 2 s late: time to kill


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it had answered and been replaced already
        pass


def _kill_during_requests(worker: Worker, times: int, after_s: float = 1.0) -> list[int]:
    """SIGKILL the worker's process `after_s` into each of its next `times` requests, from a
    thread of this process, as a signal from outside (divfuzz's own `kill` is never called)."""
    killed: list[int] = []
    original = type(worker).start

    def send_then_kill(conn_send):
        def send(message):
            conn_send(message)
            if len(killed) < times and message is not None:
                pid = worker.process.pid
                killed.append(pid)
                threading.Timer(after_s, _kill, (pid,)).start()
        return send

    def start(self):
        original(self)
        self.conn.send = send_then_kill(self.conn.send)

    worker.start = start.__get__(worker)
    return killed


@pytest.fixture
def worker():
    w = Worker("cpu", extra_env={"DIVFUZZ_WORKER_THREADS": "1"})
    yield w
    w.stop()


@pytest.mark.timeout(300)
def test_a_worker_killed_from_outside_once_mid_case_gives_the_re_runs_verdict_not_a_crash(worker, capfd):
    killed = _kill_during_requests(worker, times=1)
    verdict = worker.run(CaseRequest(unary_bf16("relu", 8, 8), "cpu", SLOW), 120)
    assert len(killed) == 1
    assert verdict.status is Status.OK, verdict
    assert verdict.worker_deaths == ("signal SIGKILL",)
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))).worker_deaths == ("signal SIGKILL",)  # as stored
    err = " ".join(capfd.readouterr().err.split())
    assert "a worker died during a case (signal SIGKILL), not stopped by divfuzz" in err
    assert "an infrastructure event" in err and "not a finding" in err


@pytest.mark.timeout(300)
def test_a_death_that_repeats_in_the_fresh_worker_is_a_crash_naming_both_signals(worker, capfd):
    killed = _kill_during_requests(worker, times=2)
    verdict = worker.run(CaseRequest(unary_bf16("relu", 8, 8), "cpu", SLOW), 120)
    assert len(killed) == 2 and killed[0] != killed[1]  # two processes: the re-run had a fresh one
    assert verdict.status is Status.CRASH and verdict.error_type == "WorkerDied(signal SIGKILL)", verdict
    assert "died during the case (signal SIGKILL), and again (signal SIGKILL)" in verdict.error_message
    assert verdict.worker_deaths == ()
    assert "a crash of the compiler under test" in " ".join(capfd.readouterr().err.split())


@pytest.mark.timeout(300)
def test_a_call_whose_worker_is_killed_once_answers_from_the_fresh_worker(worker):
    killed = _kill_during_requests(worker, times=1, after_s=0.5)
    outcome = worker.call_unregistered_for_tests("subprocess:call", {"args": ["sleep", "2"]}, 120)
    assert len(killed) == 1 and outcome.error is None and outcome.value == 0, outcome


@pytest.mark.timeout(300)
def test_a_campaign_whose_worker_is_killed_from_outside_files_no_crash_and_records_the_event(tmp_path):
    """The issue's attack: `kill -9` of a busy worker 22 s into `fuzz` made bucket 1 a crash bug
    with repro.py and issue.md. Here the slot's worker is killed mid-case, by pid, from outside."""
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, max_cases=3, seed=5, workers=1, max_ops=2, minimize=False,
                           inputs_per_compile=1, config=SLOW)
    campaign = Campaign(opts)
    stop = threading.Event()

    def kill_mid_second_case():
        while not stop.is_set() and campaign.progress.cases < 1:  # the worker is warm: its next case has begun
            time.sleep(0.05)
        time.sleep(1.0)  # inside the next case's 2 s compiled run
        workers = list(campaign.slot_workers)
        if workers and workers[0].process is not None:
            os.kill(workers[0].process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_mid_second_case, daemon=True)
    killer.start()
    try:
        result = campaign.run()
    finally:
        stop.set()
        campaign.close()
    killer.join(5)
    assert result.progress.cases == 3 and result.progress.by_status.get("crash", 0) == 0, result.progress
    [event] = result.progress.worker_deaths
    assert event["deaths"] == ["signal SIGKILL"] and event["idx"] >= 1
    timings = json.loads((tmp_path / f"divfuzz-run{result.run_id}-timings.json").read_text())
    assert timings["worker_deaths_not_repeated"] == [event]
    store = Store(tmp_path / STORE_NAME, create=False)
    try:
        assert store.buckets() == []
        [case] = [c for c in store.iter_cases() if c.verdict.get("worker_deaths")]
        assert case.status == "ok" and case.verdict["worker_deaths"] == ["signal SIGKILL"]
    finally:
        store.close()
    assert not (tmp_path / "buckets").exists() or not any((tmp_path / "buckets").iterdir())
