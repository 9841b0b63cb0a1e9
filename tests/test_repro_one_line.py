"""repro.py stays divfuzz's judge, but a dtype or shape change or a compile error is one line and
exit 1, with no traceback of its own (issue 39: a dtype change crashed its own repro with
`TypeError: ulp_distance needs one dtype`). The same folders' issue.py: the dtype assert, or only
the call that raises, exiting 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.records.buckets import BucketKey
from divfuzz.records.config import CompileConfig
from divfuzz.reports.bucket_folder import write_bucket_folder
from seed_specs import unary_bf16


@pytest.fixture(scope="module")
def worker():
    w = Worker("cpu")
    yield w
    w.stop()


def _repro_of(tmp_path, worker, backend: str, kind: str):
    spec = unary_bf16("gelu", rows=2, dim=4)
    config = CompileConfig(backend=backend)
    verdict = worker.run(CaseRequest(spec, "cpu", config), 120)
    key = BucketKey(kind=kind, detail="-", dtype="bfloat16", device_type="cpu", ops=tuple(dict.fromkeys(spec.op_names)))
    folder = write_bucket_folder(tmp_path, bucket_id=1, key=key, spec=spec, device="cpu", config=config, verdict=verdict)
    return folder, subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, timeout=300)


def _issue_of(folder):
    text = (folder / "issue.py").read_text()
    return text, subprocess.run([sys.executable, "issue.py"], cwd=folder, capture_output=True, text=True, timeout=300)


def test_a_dtype_change_is_one_line_and_exit_1(tmp_path, worker):
    folder, proc = _repro_of(tmp_path, worker, "divfuzz.fuzzer.engine.planted:wrong_dtype", "type-mismatch")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    changed = [line for line in proc.stdout.splitlines() if line.startswith("dtype changed: ")]
    assert changed == ["dtype changed: v1: eager bfloat16 [2, 4], compiled float32 [2, 4]"], proc.stdout
    text, issue = _issue_of(folder)
    assert issue.returncode == 1 and "AssertionError: dtype changed: eager torch.bfloat16, compiled torch.float32" in issue.stderr, issue.stderr
    assert text.rstrip().splitlines()[-1].startswith("assert compiled.dtype == eager.dtype") and len(text.splitlines()) <= 30


def test_a_compile_error_is_one_line_and_exit_1(tmp_path, worker):
    folder, proc = _repro_of(tmp_path, worker, "divfuzz.fuzzer.engine.planted:compile_error", "compile-error")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("compile error: ")]
    assert len(lines) == 1 and "PlantedCompileError" in lines[0] and "\n" not in lines[0], proc.stdout
    text, issue = _issue_of(folder)
    assert issue.returncode == 1 and "PlantedCompileError" in issue.stderr and not issue.stdout, issue.stdout + issue.stderr
    assert text.rstrip().splitlines()[-1] == "    torch.compile(model, backend=backend)(x0)  # compile-error"
