"""Shared test set-up: GPU tests skip cleanly without CUDA; helpers to build the seeds' specs."""

from __future__ import annotations

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
