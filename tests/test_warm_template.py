"""Workers forked from the warm template (`divfuzz.fuzzer.engine.warm_template`): they run cases
as spawned ones do, see their own environment, and a template that cannot start a worker gives
way to spawning. Real processes, real Inductor on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.records.config import CompileConfig
from seed_specs import sigmoid_gate


def _started(env: dict | None = None) -> Worker:
    worker = Worker("cpu", extra_env=env or {"DIVFUZZ_WORKER_THREADS": "1"})
    worker.start()
    return worker


def _forked(worker: Worker) -> bool:
    assert type(worker.process).__name__ == "ForkServerProcess", warm_template.refusal(worker.extra_env)
    return True


def test_a_worker_forked_from_the_template_gives_the_spawned_workers_verdict(monkeypatch):
    request = CaseRequest(sigmoid_gate(64), "cpu", CompileConfig())
    forked = _started()
    try:
        assert _forked(forked)
        from_template = forked.run(request, 300)
    finally:
        forked.stop()
    monkeypatch.setenv("DIVFUZZ_WARM_WORKERS", "0")
    spawned = _started()
    try:
        assert type(spawned.process).__name__ == "SpawnProcess"
        from_spawn = spawned.run(request, 300)
    finally:
        spawned.stop()
    assert from_template.outputs and from_template.to_dict() | {"timings": {}} == from_spawn.to_dict() | {"timings": {}}


def test_a_forked_worker_sees_its_own_environment_and_a_changed_one_is_spawned(monkeypatch, tmp_path):
    cache = str(tmp_path / "cache")
    forked = _started({"DIVFUZZ_WORKER_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": cache})
    try:
        assert _forked(forked)
        assert forked.call("os:getenv", {"key": "TORCHINDUCTOR_CACHE_DIR"}, 60).value == cache
    finally:
        forked.stop()
    # What torch may read at import changed since the template started: the worker is spawned,
    # so it imports torch under the new value.
    monkeypatch.setenv("DIVFUZZ_TEMPLATE_PROBE", "changed")
    spawned = _started()
    try:
        assert type(spawned.process).__name__ == "SpawnProcess"
        assert spawned.call("os:getenv", {"key": "DIVFUZZ_TEMPLATE_PROBE"}, 60).value == "changed"
    finally:
        spawned.stop()


def test_a_template_that_cannot_start_a_worker_gives_way_to_spawning(tmp_path):
    script = tmp_path / "broken_template.py"
    script.write_text(
        "from divfuzz.fuzzer.engine import warm_template\n"
        "from divfuzz.fuzzer.engine.worker import Worker\n"
        "if __name__ == '__main__':\n"
        "    warm_template.PRELOAD = ('fork_breaker',)\n"
        "    first, second = Worker('cpu'), Worker('cpu')\n"
        "    print(first.call('os:getpid', {}, 120))\n"
        "    print(type(first.process).__name__)\n"
        "    second.start()\n"
        "    print(type(second.process).__name__)\n"
        "    first.stop(); second.stop()\n"
    )
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert "error=None" in done.stdout and lines[-2:] == ["SpawnProcess", "SpawnProcess"], done.stdout
    assert "did not start from the warm template" in done.stderr
