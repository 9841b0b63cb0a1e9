"""Second compilers (issue 13): ONNX Runtime through divfuzz's `onnxrt` backend, declared
capabilities against a real probe, campaigns that draw within them, and `--against`.

Real onnxruntime on the CPU, no mocks (skipped where onnxruntime is not installed); the `gpu` test
runs LayerNorm backward graphs on CUDA, Inductor against onnxrt.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from divfuzz.generators.strategies import graph_specs

from divfuzz.fuzzer.cli.main import main
from divfuzz.records.backends import ONNXRT, capabilities_of
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]
DRIFT = "divfuzz.fuzzer.engine.planted:drift"


def _one_op_spec(op: str, dtype: str, backward: bool):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from probe_backend_ops import one_op_spec
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return one_op_spec(op, dtype, backward)


def _stored(out: Path) -> tuple[list[dict], list[str]]:
    con = sqlite3.connect(out / "divfuzz.sqlite")
    try:
        verdicts = [json.loads(v) for (v,) in con.execute("SELECT verdict_json FROM cases")]
        keys = [k for (k,) in con.execute("SELECT key FROM buckets")]
    finally:
        con.close()
    return verdicts, keys


def test_old_verdicts_load_without_against():
    d = {"status": "ok", "outputs": [], "error_type": None, "error_message": None, "timings": {}}
    v = Verdict.from_dict(d)
    assert v.against is None and "against" not in v.to_dict()


def test_unknown_backends_support_everything_and_onnxrt_declares_measured_cells():
    assert capabilities_of("inductor").allows("gelu", "bfloat16", True)
    assert capabilities_of("divfuzz.fuzzer.engine.planted:ulp_bump").unsupported == ()
    assert ONNXRT.measured and ONNXRT.unsupported  # filled from scripts/probe_backend_ops.py
    both = capabilities_of("inductor", "onnxrt")
    assert both.unsupported == ONNXRT.unsupported


@pytest.mark.parametrize("op,dtype,backward", [("gelu", "float32", False), ("gelu", "bfloat16", False), ("layer_norm", "float32", True)])
def test_declared_capabilities_match_a_real_onnxrt_compile(op, dtype, backward):
    """The table says what a real compile under ONNX Runtime does: a declared cell compiles and runs;
    an undeclared one fails to compile and reads UNSUPPORTED (not a compile-error finding)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.records.config import CompileConfig

    spec = _one_op_spec(op, dtype, backward)
    verdict = execute_case(spec, "cpu", CompileConfig(backend="onnxrt"))
    if ONNXRT.allows(op, dtype, backward):
        assert verdict.status in (Status.OK, Status.DIVERGED), (verdict.status, verdict.error_message)
    else:
        assert verdict.status == Status.UNSUPPORTED, (verdict.status, verdict.error_message)
        assert "onnxrt declares" in verdict.error_message


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph_specs(max_ops=6, allowed=ONNXRT.allows, allow_autocast=False))
def test_graphs_drawn_for_onnxrt_hold_no_unsupported_cell(spec):
    from divfuzz.fuzzer.engine.execute import graph_cells

    assert ONNXRT.unsupported_cell(graph_cells(spec)) is None, graph_cells(spec)


@pytest.mark.parametrize("cases", [4, pytest.param(10, marks=pytest.mark.slow)])
def test_onnxrt_campaign_draws_within_its_capabilities(tmp_path, cases):
    """A real ONNX Runtime campaign: no compile error, and no case left unsupported (nothing drawn
    outside the table). 4 cases take about 45 s on a loaded 2-core box, 10 about 100 s (slow tier)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--backend", "onnxrt", "--max-cases", str(cases), "--max-ops", "2",
                                  "--workers", "1", "--seed", "5", "--no-live", "--no-minimize", "--out", str(out)])
    assert r.exit_code == 0, r.output
    verdicts, keys = _stored(out)
    assert len(verdicts) == cases
    statuses = [v["status"] for v in verdicts]
    assert "unsupported" not in statuses and "compile-error" not in statuses, [(v["status"], v["error_message"]) for v in verdicts]
    assert not [k for k in keys if k.startswith("compile-error")], keys


def test_against_names_the_planted_compiler_as_further_from_fp64(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--backend", DRIFT, "--against", "aot_eager", "--max-cases", "4",
                                  "--dtypes", "bfloat16", "--workers", "1", "--seed", "2", "--no-live", "--out", str(out)])
    assert r.exit_code == 0, r.output
    verdicts, keys = _stored(out)
    judged = [v["against"] for v in verdicts if v.get("against")]
    assert len(judged) == 4
    assert all(a["backend"] == DRIFT and a["against"] == "aot_eager" for a in judged)
    decided = [a["further_from_fp64"] for a in judged if a["further_from_fp64"] not in ("equal", "-")]
    assert decided and set(decided) == {DRIFT}, judged
    assert keys and all(f"{DRIFT} vs aot_eager" in k for k in keys), keys


def test_against_with_the_roles_swapped_names_the_planted_one_again(tmp_path):
    from divfuzz.fuzzer.engine.against import execute_against
    from divfuzz.records.config import CompileConfig

    spec = _one_op_spec("layer_norm", "bfloat16", True)
    v = execute_against(spec, "cpu", CompileConfig(backend="aot_eager"), CompileConfig(backend=DRIFT))
    assert v.against.further_from_fp64 == DRIFT, v.against
    assert any(o.float_cmp and o.float_cmp.triage == "compiled-closer" for o in v.outputs)


@pytest.mark.parametrize("args,words", [
    (["--against", "no_such_backend"], ["no_such_backend"]),
    (["--against", "not a name"], ["--against"]),
    (["--backend", "onnxrt", "--ops", "gelu", "--dtypes", "bfloat16"], ["gelu", "onnxrt"]),
])
def test_bad_against_or_unsupported_ops_exit_2(tmp_path, args, words):
    if "onnxrt" in args:
        pytest.importorskip("onnxruntime")
    r = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(tmp_path / "o"), *args])
    assert r.exit_code == 2, r.output
    assert all(w in r.output for w in words), r.output
    assert not (tmp_path / "o" / "divfuzz.sqlite").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_layer_norm_backward_inductor_against_a_second_compiler(dtype):
    """LayerNorm backward (128 x 200) on CUDA: Inductor (A) against nvFuser when it loads, else
    ONNX Runtime (B), both against fp64; prints each gradient's RMSE and the judgement.

    Measured with a standalone copy of the onnxrt backend on the H100 (torch 2.11, onnxruntime
    1.30 without its CUDA provider) on 2026-11-22: fp32 grad:x0 RMSE vs fp64 eager 7.57e-8, inductor
    6.5e-8, onnxrt 7.55e-8 (before the host copies in `divfuzz.fuzzer.engine.own_backends` it was 7.7e-4: a
    use-after-free of CUDA inputs in torch.onnx's ONNXProgram.__call__); bf16: onnxrt cannot compile
    LayerNorm (declared unsupported), inductor's grad:x0 is as far from fp64 as eager's (1.69e-3)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from hypothesis import find

    from divfuzz.fuzzer.cli.options import against_summary
    from divfuzz.fuzzer.engine.against import execute_against
    from divfuzz.fuzzer.engine.own_backends import missing_requirement
    from divfuzz.records.config import CompileConfig

    second = "nvfuser" if missing_requirement("nvfuser") is None else "onnxrt"
    if second == "onnxrt" and missing_requirement("onnxrt") is not None:
        pytest.skip(f"neither nvfuser nor onnxrt loads: {missing_requirement('onnxrt')}")
    spec = find(graph_specs(min_ops=1, max_ops=1, ops=("layer_norm",), dtypes=(dtype,), allow_autocast=False),
                lambda s: s.backward and s.inputs[0].dtype == dtype and s.inputs[0].shape[0] >= 128 and s.inputs[0].shape[-1] >= 200,
                settings=settings(database=None, max_examples=5000, suppress_health_check=list(HealthCheck)))
    v = execute_against(spec, "cuda", CompileConfig(backend="inductor"), CompileConfig(backend=second))
    print(dtype, second, v.status.value, against_summary(v.against))
    if capabilities_of(second).allows("layer_norm", dtype, True):
        assert v.status in (Status.OK, Status.DIVERGED), (v.status, v.error_message)
        assert any(p.name.startswith("grad:") for p in v.against.outputs), v.against
        assert v.against.further_from_fp64 in ("inductor", second, "same", "equal")
    else:
        # Declared from CPU measurements; on the H100 (torch 2.11, 2026-11-24) onnxrt compiled the
        # bf16 LayerNorm backward and the case was judged (diverged): a conservative cell is allowed,
        # a compile failure that is not read as unsupported is not.
        assert (v.status == Status.UNSUPPORTED and v.against.failed == "against") or \
            (v.status in (Status.OK, Status.DIVERGED) and v.against.failed is None), (v.status, v.error_message)


def test_an_op_the_exporter_has_no_function_for_reads_unsupported_not_a_finding():
    """The H100 case: torch 2.11 lowers RMSNorm on CUDA to `aten._fused_rms_norm`, which torch.onnx
    cannot export; that is a capability onnxrt lacks, not a divergence. Here the same path on the CPU,
    with `aten.silu_backward` (no ONNX function either), called directly and outside the table."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import torch

    from divfuzz.fuzzer.engine.own_backends import unsupported_op_of
    from divfuzz.fuzzer.engine.compile import compiled
    from divfuzz.fuzzer.engine.execute import CaseClock, failure_verdict
    from divfuzz.records.config import CompileConfig

    config = CompileConfig(backend="onnxrt")
    g, x = torch.randn(4, 8), torch.randn(4, 8)
    with pytest.raises(Exception) as caught:
        with compiled(lambda g, x: torch.ops.aten.silu_backward(g, x) * 2, config) as fn:
            fn(g, x)
    assert unsupported_op_of(caught.value) == "aten.silu_backward"
    verdict = failure_verdict(_one_op_spec("sigmoid", "float32", False), config, caught.value, CaseClock("cpu"))
    assert verdict.status == Status.UNSUPPORTED
    assert "no implementation of aten.silu_backward" in verdict.error_message
    # any other compile failure stays a finding
    assert unsupported_op_of(RuntimeError("boom")) is None
