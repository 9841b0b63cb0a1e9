"""Shared test set-up: GPU tests skip cleanly without CUDA; helpers to build the seeds' specs."""

from __future__ import annotations

import functools
import subprocess
import sys
import time

import pytest
import torch

from divfuzz.fuzzer.engine.worker import key_compile_caches_by_cpu_isa

# Tests that compile in the pytest process share Inductor's cache folder with every other run on
# this host; its keys leave out the CPU vector ISA, so a graph cached by a run under
# ATEN_CPU_CAPABILITY=avx2 came back into a native AVX512 run and crashed it ("free(): invalid
# pointer", seen here). The test process keys its caches by the ISA as divfuzz's workers do.
key_compile_caches_by_cpu_isa()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# What `python -c "import torch"` takes on a quiet 2-core machine (measured: 2.1 s wall), the unit
# of `machine_slowness`.
QUIET_TORCH_IMPORT_S = 2.1


@functools.lru_cache(maxsize=1)
def _slowness() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True, timeout=600)
    return max(1.0, (time.monotonic() - t0) / QUIET_TORCH_IMPORT_S)


@pytest.fixture
def machine_slowness() -> float:
    """How many times slower than a quiet 2-core machine this one is now (at least 1), measured once
    a session by the time a fresh interpreter takes to import torch: what a worker's start and a
    compile cost scale with. A test with a time budget scales its budget and its slack by it, so it
    asserts its property at any speed (issue 57: a 45 s campaign stored nothing on a loaded host)."""
    return _slowness()
