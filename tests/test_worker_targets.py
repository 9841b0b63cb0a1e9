"""What a worker may be asked to call is declared once (`divfuzz.fuzzer.engine.worker.WorkerTarget`)
and bound to its functions in one module the import contracts see (`divfuzz.fuzzer.worker_targets`)."""

from __future__ import annotations

import os

import pytest

from divfuzz.fuzzer import worker_targets
from divfuzz.fuzzer.engine import worker as engine_worker
from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget, target_reference
from divfuzz.records.errors import InternalError


def test_every_target_is_bound_to_the_function_it_names():
    assert set(worker_targets.TARGETS) == set(WorkerTarget)
    for target, function in worker_targets.TARGETS.items():
        assert target_reference(function) == target.value
    assert engine_worker.TARGET_REGISTRY == worker_targets.__name__


def test_a_worker_runs_a_declared_target_and_refuses_any_other():
    facts = engine_worker._run_call({"call": WorkerTarget.WORKER_FACTS.value, "kwargs": {}})
    assert set(facts["result"]) == {"torch_threads", "compile_threads", "triton_disable_line_info", "frozen_objects"}
    refused = engine_worker._run_call({"call": "os:getpid", "kwargs": {}})
    assert "result" not in refused and "Expected a WorkerTarget" in refused["error"]
    escape = engine_worker._run_call({"call": "os:getpid", "kwargs": {}, "unregistered_for_tests": True})
    assert escape == {"result": os.getpid()}
    with pytest.raises(InternalError, match="Expected a WorkerTarget"):
        Worker("cpu").call("divfuzz.fuzzer.engine.worker:worker_facts", {}, 10)  # a string, even a declared one's
