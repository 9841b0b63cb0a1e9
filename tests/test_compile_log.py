"""The compiler's own output stays off divfuzz's terminal and lands in the bucket's compile.log
(issue 39). The real Inductor on the CPU warns `bf16 and fp16 are mixed in the scheduler node`
(torch/_inductor/codegen/cpp.py) when one kernel loads bf16 and stores fp16: a bf16 -> fp16 cast
times itself does. Behind it, `planted:inductor_nan_first` makes the case a bug, so `minimize`
writes a bucket folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.records.config import CompileConfig

WARNING = "bf16 and fp16 are mixed in the scheduler node"


def _mixed_cast_spec() -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (16,), "bfloat16"),),
                     nodes=(Node("v1", "cast", ("x0",), (("to", "float16"),), "float16", (16,)),
                            Node("v2", "mul", ("v1", "v1"), (), "float16", (16,))),
                     outputs=("v2",))


def _cli(tmp_path, *args):
    # A fresh Inductor cache: a cached graph is not generated again, and would not warn again.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"))
    return subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)


def test_a_workers_compiler_warning_is_captured_per_request_not_printed(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    worker = Worker("cpu")
    try:
        mark = worker.output_mark()
        worker.run(CaseRequest(_mixed_cast_spec(), "cpu", CompileConfig()), 300)
        first = worker.last_output
        worker.run(CaseRequest(_mixed_cast_spec(), "cpu", CompileConfig(backend="eager")), 300)
        second = worker.last_output
    finally:
        worker.stop()
    assert WARNING in first and WARNING not in second  # each request's own output
    assert worker.output_since(mark) == first + second
    printed = capfd.readouterr()
    assert WARNING not in printed.out + printed.err


def test_minimize_keeps_the_compilers_warning_in_compile_log_and_off_the_terminal(tmp_path):
    (tmp_path / "cast.json").write_text(_mixed_cast_spec().to_json())
    proc = _cli(tmp_path, "minimize", "cast.json", "--device", "cpu", "--backend", "divfuzz.fuzzer.engine.planted:inductor_nan_first",
                "--out", "out", "--budget", "10s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert WARNING not in proc.stdout + proc.stderr and "Warning" not in proc.stderr, proc.stdout + proc.stderr
    (log,) = (tmp_path / "out").glob("*/compile.log")
    assert WARNING in log.read_text()


@pytest.mark.slow
def test_replay_prints_divfuzz_lines_only(tmp_path):
    (tmp_path / "cast.json").write_text(_mixed_cast_spec().to_json())
    proc = _cli(tmp_path, "replay", "cast.json", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert WARNING not in proc.stdout + proc.stderr and not proc.stderr.strip(), proc.stderr
    assert "severity:" in proc.stdout


# A line of torch's own logging (TORCH_LOGS): `V1126 20:39:42.442000 14953 torch/_inductor/graph.py:2722] ...`.
TORCH_LOG_LINE = re.compile(r"^[VIWEC]\d{4} [\d:.]+ +\d+ \S+\.py:\d+\]", re.M)


def _logged_cli(tmp_path, *args):
    """divfuzz with Inductor told to log every kernel it writes (`TORCH_LOGS=output_code`, through
    torch's own log handlers, on the workers' and on divfuzz's process alike)."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"), TORCH_LOGS="output_code")
    return subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", *args], capture_output=True, text=True, timeout=900,
                          env=env, cwd=tmp_path)


def test_fuzz_s_terminal_holds_divfuzz_s_lines_only_and_the_bucket_keeps_inductor_s_log(tmp_path):
    proc = _logged_cli(tmp_path, "fuzz", "--device", "cpu", "--out", "out", "--no-live", "--workers", "1", "--max-cases", "2",
                       "--max-ops", "3", "--seed", "5", "--backend", "divfuzz.fuzzer.engine.planted:inductor_nan_first")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    printed = proc.stdout + proc.stderr
    assert not TORCH_LOG_LINE.search(printed) and "Output code" not in printed and "torch/_inductor" not in printed, printed
    assert "bug root causes" in proc.stdout  # the end-of-run summary is there
    logs = list((tmp_path / "out" / "buckets").glob("*/compile.log"))
    assert logs and any(TORCH_LOG_LINE.search(log.read_text()) and "Output code" in log.read_text() for log in logs)


@pytest.mark.slow
def test_gate_s_terminal_holds_divfuzz_s_lines_only(tmp_path):
    corpus = Path(__file__).resolve().parent.parent / "corpus"
    proc = _logged_cli(tmp_path, "gate", "--device", "cpu", "--corpus", str(corpus), "--spec", "activation-float32-bwd",
                       "--workers", "1", "--baseline-any", "--backend", "divfuzz.fuzzer.engine.planted:inductor_nan_first")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # the planted NaN fails the gate
    printed = proc.stdout + proc.stderr
    assert "gate FAIL" in proc.stdout and "nan-inf-new" in proc.stdout
    assert not TORCH_LOG_LINE.search(printed) and "Output code" not in printed and "torch/_inductor" not in printed, printed
