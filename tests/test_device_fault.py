"""An accelerator fault (CUDA's illegal address, a launch failure) is the compiler's finding only where
the case gives it again in a fresh worker: an asynchronous fault surfaces at a later case's call, and
a faulted context fails every case after it (`Worker.run_group`). Planted on the CPU by
`device_fault` (always) and `device_fault_once` (only the first time, as the machine's fault is)."""

from __future__ import annotations

from divfuzz.fuzzer.engine.planted import FAULT_MARK_ENV
from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status, is_device_fault
from divfuzz.generators.input_siblings import input_siblings
from tests.seed_specs import sigmoid_gate

PLANTED = "divfuzz.fuzzer.engine.planted:"


def _group(backend: str, env: dict, n: int = 3):
    spec = sigmoid_gate(rows=64, dim=32)
    worker = Worker("cpu", extra_env=env)
    try:
        request = CaseRequest(spec, "cpu", CompileConfig(backend=PLANTED + backend), siblings=input_siblings(spec, n))
        return [v for v, _ in worker.run_group(request, 240.0)]
    finally:
        worker.stop()


def test_the_markers_name_accelerator_faults_and_not_an_ops_refusal():
    assert is_device_fault("AcceleratorError", "CUDA error: unspecified launch failure")
    assert is_device_fault("RuntimeError", "CUDA error: an illegal memory access was encountered")
    assert not is_device_fault("RuntimeError", "expected scalar type Float but found BFloat16")


def test_a_fault_that_repeats_in_a_fresh_worker_stays_the_compilers_runtime_error():
    verdicts = _group("device_fault", {})
    assert verdicts and all(v.status is Status.RUNTIME_ERROR for v in verdicts), verdicts
    assert not any(v.worker_deaths for v in verdicts)


def test_a_fault_that_does_not_repeat_is_no_finding_and_is_kept_as_an_infrastructure_event(tmp_path):
    mark = tmp_path / "faulted"
    verdicts = _group("device_fault_once", {FAULT_MARK_ENV: str(mark)})
    assert mark.exists()  # the first run faulted
    assert len(verdicts) == 3 and not any(v.status is Status.RUNTIME_ERROR for v in verdicts), verdicts
    assert "accelerator fault not repeated" in " ".join(verdicts[0].worker_deaths), verdicts[0]


def test_planted_defects_land_on_an_output_of_another_layout_without_an_error_of_their_own():
    """A transposed output has no flat view: the planted defect is the backend's, never a runtime
    error of divfuzz's own planting (seen on the H200: ulp_bump's campaign found only runtime-errors)."""
    import torch

    from divfuzz.fuzzer.engine import planted

    x = torch.randn(6, 4, dtype=torch.bfloat16)
    for backend, changed in ((planted.ulp_bump, 1), (planted.nan_first, 1), (planted.eight_ulps_up, 1)):
        fn = torch.compile(lambda a: (a * 2).t(), backend=backend)
        got, want = fn(x), (x * 2).t()
        assert got.shape == want.shape and int((got.view(torch.int16) != want.view(torch.int16)).sum()) == changed, backend
        torch._dynamo.reset()
