"""The functions a worker process may be asked to call (`Worker.call`), bound to their names.

Callers name a target by `divfuzz.fuzzer.engine.worker.WorkerTarget` (so that a command does not
import, say, the user-module minimizer and torch to ask a worker to run it); the worker process
runs only the function bound here. This module imports each target, so the import contracts
(pyproject's `[tool.importlinter]`) see the code a worker runs: it is the top layer, and nothing
in the package imports it; the worker loads it by name (`TARGET_REGISTRY`).

Invariant, checked at import: every `WorkerTarget` is bound, to the function its value names.
Adding a target: a `WorkerTarget` member and its line here. Tests that need a target of their
own (`os:getpid`) use `Worker.call_unregistered_for_tests`, never product code.
"""

from __future__ import annotations

from typing import Callable

from divfuzz.fuzzer.campaign.sizing import gpu_free_bytes
from divfuzz.fuzzer.engine.worker import WorkerTarget, key_compile_caches_by_cpu_isa, target_reference, worker_facts
from divfuzz.fuzzer.gate.machine import describe_machine
from divfuzz.fuzzer.triage.attribute import bisect_in_worker
from divfuzz.fuzzer.triage.module_perf import perf_module_in_worker
from divfuzz.fuzzer.triage.user_module import minimize_module_in_worker
from divfuzz.records.errors import InternalError

TARGETS: dict[WorkerTarget, Callable[..., object]] = {
    WorkerTarget.GPU_FREE_BYTES: gpu_free_bytes,
    WorkerTarget.DESCRIBE_MACHINE: describe_machine,
    WorkerTarget.BISECT: bisect_in_worker,
    WorkerTarget.MINIMIZE_MODULE: minimize_module_in_worker,
    WorkerTarget.PERF_MODULE: perf_module_in_worker,
    WorkerTarget.WORKER_FACTS: worker_facts,
    WorkerTarget.KEY_CACHES_BY_ISA: key_compile_caches_by_cpu_isa,
}

_misbound = sorted({t.name for t in WorkerTarget} - set(t.name for t in TARGETS)) + sorted(
    t.name for t, fn in TARGETS.items() if target_reference(fn) != t.value)
if _misbound:
    raise InternalError(f"WorkerTarget and {__name__}.TARGETS disagree on {', '.join(_misbound)}")
