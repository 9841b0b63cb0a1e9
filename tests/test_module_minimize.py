"""`divfuzz minimize --module`: the seeds' own models, handed over as a user would, reduced by
torch's fx minifier with divfuzz's oracle as predicate, one folder per root cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main

MODULES = Path(__file__).parent / "modules"


def _minimize(tmp_path: Path, module: str, *args: str) -> list[dict]:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["minimize", "--module", f"{MODULES / module}:make_case", "--out", str(out), *args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]


def _repro_exit_code(cause: dict) -> int:
    folder = Path(cause["folder"])
    return subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True, timeout=600).returncode


@pytest.mark.slow
def test_seed_000_gated_model_holds_no_bug_and_gets_no_repro(tmp_path):
    # Seed 000 (a bf16 sigmoid gate after a layer norm): the fused gate keeps its intermediates in
    # fp32 and rounds once, where eager rounds each step. Judged against fp64, compiled is closer
    # over the output and no element is grossly further (same()'s rule), so no graph is reduced and
    # no repro is written. Issue 8 first reduced the gate as by-design (emulate_precision_casts);
    # the fp64 rule that came after it calls the whole model noise.
    causes = _minimize(tmp_path, "seed000_gated.py", "--device", "cpu", "--autocast", "bfloat16", "--budget", "600s")
    judged = json.loads((tmp_path / "out" / "capture.json").read_text())["severity"]
    assert (judged["severity"], judged["rule"]) == ("noise", "compiled-closer"), judged
    assert causes == []


def _assert_small_and_still_flipping(cause: dict) -> None:
    """A reduction that converged (no fx_minifier cut and no single bypass keeps the same severity
    and rule, and no bypass may cast an undefined value) to fewer ops, whose uint8 output still
    flips, in the repro too. How far it can shrink depends on where this machine's divergence
    starts: on torch 2.13's CPU, an AMD EPYC ended at 9 of 24 ops (the convolution whose layout
    Inductor changes, two multiplies, and the six-op E8M0 encoding, each of whose guards keeps its
    cast defined); an Intel AVX512 CPU with AMX at 14, since its flips start at the first GELU's
    erf and the chain from there to the encoding stays."""
    assert cause["reduction_cut"] is None, cause
    assert cause["ops"] < cause["ops_before"], cause
    assert cause["outputs"][0].startswith("uint8"), cause["outputs"]
    assert cause["differing"][0] > 0
    assert "no single subsystem" not in cause["summary"]
    assert _repro_exit_code(cause) == 1


@pytest.mark.slow
def test_seed_002_e8m0_model_shrinks_to_a_converged_graph_that_still_flips(tmp_path):
    # The reduction's quality, not the default budget: on the shared 2-core CPU each fx_minifier
    # query compiles C++ for 1-11 s, and 300 s cut it at 9-18 ops (its deadline is tested apart).
    causes = _minimize(tmp_path, "seed002_e8m0.py", "--device", "cpu", "--budget", "600s")
    assert causes, "torch 2.13 CPU shows uint8 flips for this model; the pipeline must find them"
    for c in causes:
        _assert_small_and_still_flipping(c)


@pytest.mark.gpu
def test_seed_002_e8m0_model_on_cuda_shrinks_to_a_converged_graph_that_still_flips(tmp_path):
    # On an H100 with torch 2.11 this model flips 1,347 of 524,288 uint8 outputs (max step 7).
    causes = _minimize(tmp_path, "seed002_e8m0.py", "--device", "cuda", "--budget", "600s")
    assert causes
    for c in causes:
        _assert_small_and_still_flipping(c)


@pytest.mark.slow
def test_fp32_floor_division_off_by_one_is_a_bug_and_is_minimized(tmp_path):
    # torch 2.13 CPU: Inductor's floor division by 0.1 is off by 1 where eager and fp64 agree.
    causes = _minimize(tmp_path, "floordiv_fp32.py", "--device", "cpu")
    assert causes, "the fp32 floor division must not read as 'agree'"
    bug = causes[0]
    assert bug["severity"]["severity"] == "bug" and bug["severity"]["rule"] == "int-valued-wrong", bug
    assert bug["outputs"][0].startswith("float32")
    assert bug["ops"] < bug["ops_before"], bug  # the exact relu(x) - relu(-x) prefix is cut
    assert _repro_exit_code(bug) == 1


def test_budget_bounds_a_module_that_never_returns(tmp_path, monkeypatch):
    import time

    import divfuzz.fuzzer.cli.minimize_command as cli_minimize

    monkeypatch.setattr(cli_minimize, "MODULE_GRACE_S", 5.0)
    t0 = time.monotonic()
    result = CliRunner().invoke(
        main, ["minimize", "--module", f"{MODULES / 'never_returns.py'}:make_case", "--device", "cpu",
               "--budget", "1s", "--out", str(tmp_path / "out")],
    )
    assert result.exit_code == 2, result.output
    assert "not done within --budget 1 s plus 5 s of grace; the worker was killed" in result.output
    # It names the phase in flight (from phases.json): NAME() itself never returned.
    assert "killed during load (does NAME() or the model return?)" in " ".join(result.output.split())
    # The call is bounded at 6 s; the rest is the worker's start (importing torch: over a minute on
    # a loaded 2-core CI box). Without the bound this test would never end.
    assert time.monotonic() - t0 < 300


@pytest.mark.slow
def test_fp32_result_of_a_bf16_computation_is_judged_against_fp64_not_skipped(tmp_path):
    # Before issue 8 `--module` skipped every fp32 output and called this "agree". It is judged:
    # compiled is further from fp64 on about 7% of the outputs (up to 7 ULPs), within same()'s 2x
    # RMSE margin with no element grossly further, so it is noise by that rule and gets no repro.
    causes = _minimize(tmp_path, "logsoftmax_bf16_fp32.py", "--device", "cpu")
    judged = json.loads((tmp_path / "out" / "capture.json").read_text())["severity"]
    assert (judged["severity"], judged["rule"]) == ("noise", "within-same"), judged
    assert "float32 elements differ" in judged["detail"] and "compiled-worse" in judged["detail"], judged
    assert causes == []
