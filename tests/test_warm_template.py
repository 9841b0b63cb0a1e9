"""Workers forked from the warm template (`divfuzz.fuzzer.engine.warm_template`): they run cases
as spawned ones do, see their own environment, and a template that cannot start a worker gives
way to spawning. Real processes, real Inductor on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.records.config import CompileConfig
from seed_specs import sigmoid_gate


def _started(env: dict | None = None) -> Worker:
    worker = Worker("cpu", extra_env=env or {"DIVFUZZ_WORKER_THREADS": "1"})
    worker.start()
    return worker


def _in_worker(env: dict | None, do):
    """(how a worker with `env` started, what `do(worker)` returned); the worker is stopped."""
    worker = _started(env)
    try:
        return type(worker.process).__name__, do(worker), warm_template.refusal(worker.device, worker.extra_env)
    finally:
        worker.stop()


def test_a_worker_forked_from_the_template_gives_the_spawned_workers_verdict(monkeypatch):
    request = CaseRequest(sigmoid_gate(64), "cpu", CompileConfig())
    forked, from_template, why = _in_worker(None, lambda w: w.run(request, 300))
    assert forked == "ForkServerProcess", why
    monkeypatch.setenv("DIVFUZZ_WARM_WORKERS", "0")
    spawned, from_spawn, _ = _in_worker(None, lambda w: w.run(request, 300))
    assert spawned == "SpawnProcess"
    assert from_template.outputs and from_template.to_dict() | {"timings": {}} == from_spawn.to_dict() | {"timings": {}}


def test_a_forked_worker_sees_its_own_environment_and_a_changed_one_is_spawned(monkeypatch, tmp_path):
    cache = str(tmp_path / "cache")
    getenv = lambda key: lambda w: w.call_unregistered_for_tests("os:getenv", {"key": key}, 60).value  # noqa: E731
    forked, seen, why = _in_worker({"DIVFUZZ_WORKER_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": cache}, getenv("TORCHINDUCTOR_CACHE_DIR"))
    assert forked == "ForkServerProcess", why
    assert seen == cache
    # What torch may read at import changed since the template started: the worker is spawned,
    # so it imports torch under the new value.
    monkeypatch.setenv("DIVFUZZ_TEMPLATE_PROBE", "changed")
    spawned, seen, why = _in_worker(None, getenv("DIVFUZZ_TEMPLATE_PROBE"))
    assert spawned == "SpawnProcess" and seen == "changed" and "DIVFUZZ_TEMPLATE_PROBE" in why


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """Run `body` in a fresh Python (its own template), with tests/ importable; it must exit 0."""
    script = tmp_path / "script.py"
    script.write_text("from divfuzz.fuzzer.engine import warm_template\n"
                      "from divfuzz.fuzzer.engine.worker import Worker\n"
                      "if __name__ == '__main__':\n" + "".join(f"    {line}\n" for line in body.strip().splitlines()))
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_group_whose_worker_dies_with_the_template_runs_its_unanswered_members_again_spawned(tmp_path):
    # The server is killed once the group's first verdict is in, while the worker runs a sibling
    # (each compiled run takes 2 s): the siblings run again on a spawned worker, none is a crash.
    done = _script(tmp_path, """
import os, signal
from multiprocessing import forkserver
from divfuzz.fuzzer.engine.worker import CaseRequest
from divfuzz.generators.input_siblings import input_siblings
from divfuzz.records.config import CompileConfig
from seed_specs import unary_bf16
spec = unary_bf16('relu', 8, 8)
worker = Worker('cpu', extra_env={'DIVFUZZ_WORKER_THREADS': '1'})
worker.start()
print(type(worker.process).__name__)
conn, killed = worker.conn, []
def recv():
    reply = type(conn).recv(conn)
    if not killed:
        killed.append(1)
        os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
    return reply
conn.recv = recv
request = CaseRequest(spec, 'cpu', CompileConfig(backend='divfuzz.fuzzer.engine.planted:slow_to_run'), siblings=input_siblings(spec, 3))
got = worker.run_group(request, 120)
print(','.join(v.status.value for v, _ in got), type(worker.process).__name__)
worker.stop()
""")
    first, statuses, second = done.stdout.split()
    assert (first, second) == ("ForkServerProcess", "SpawnProcess"), done.stdout + done.stderr
    assert statuses == "ok,ok,ok", done.stdout + done.stderr
    assert "server died" in done.stderr


@pytest.mark.parametrize("preload", ["fork_breaker", "broken_preload"])
def test_a_template_that_cannot_start_a_worker_gives_way_to_spawning(tmp_path, preload):
    # fork_breaker: every forked child exits at once; broken_preload: the fork server itself dies.
    done = _script(tmp_path, f"""
warm_template.PRELOAD = ({preload!r},)
first, second = Worker('cpu'), Worker('cpu')
print(first.call_unregistered_for_tests('os:getpid', {{}}, 120))
print(type(first.process).__name__)
second.start()
print(type(second.process).__name__)
first.stop(); second.stop()
""")
    lines = done.stdout.split()
    assert "error=None" in done.stdout and lines[-2:] == ["SpawnProcess", "SpawnProcess"], done.stdout
    assert "did not start from the warm template" in done.stderr


def test_a_worker_whose_template_server_dies_mid_case_runs_it_again_spawned_not_as_a_crash(tmp_path):
    # A forked worker dies with its server (PR_SET_PDEATHSIG): that is no crash of the compiler.
    # The server is killed while the worker compiles its first case (a real Inductor compile, seconds).
    done = _script(tmp_path, """
import os, signal, threading
from multiprocessing import forkserver
from divfuzz.fuzzer.engine.worker import CaseRequest
from divfuzz.records.config import CompileConfig
from seed_specs import sigmoid_gate
worker = Worker('cpu', extra_env={'DIVFUZZ_WORKER_THREADS': '1'})
worker.start()
print(type(worker.process).__name__)
threading.Timer(0.3, os.kill, (forkserver._forkserver._forkserver_pid, signal.SIGKILL)).start()
verdict = worker.run(CaseRequest(sigmoid_gate(256), 'cpu', CompileConfig()), 300)
print(verdict.status.value, type(worker.process).__name__)
worker.stop()
""")
    first, status, second = done.stdout.split()
    assert (first, second) == ("ForkServerProcess", "SpawnProcess") and status in ("ok", "diverged"), done.stdout + done.stderr
    assert "server died" in done.stderr
