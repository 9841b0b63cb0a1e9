"""repro.py runs the very graph divfuzz builds: its `model()` and `make_inputs()` give the same
bits as `divfuzz.generators.build` (both come from each op's one `code` template), real and float64."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from divfuzz.records.config import CompileConfig
from divfuzz.fuzzer.engine.graph_run import fresh_inputs
from divfuzz.generators.build import build_callable, build_reference, make_inputs, reference_inputs
from divfuzz.generators.registry import all_ops
from divfuzz.generators.strategies import graph_specs
from divfuzz.reports.repro import render_repro
from seed_specs import layer_norm_linear


def _exec_script(text: str) -> dict:
    """A generated script's namespace, run as a module of its own (not as __main__): its carried
    dataclasses look their module up in sys.modules, as they do in a script run by path."""
    module = types.ModuleType("divfuzz_repro_under_test")
    sys.modules[module.__name__] = module
    try:
        exec(compile(text, "repro.py", "exec"), module.__dict__)  # our own generated code, in a test
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def _namespace(spec):
    return _exec_script(render_repro(spec, device="cpu", config=CompileConfig(), title="t"))


def _bits_equal(a, b):
    """Same shape and bits, NaN payloads and signed zeros included."""
    if a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    return torch.equal(a, b)


@pytest.mark.parametrize("op", sorted(all_ops()))
def test_repro_model_is_the_built_graph_bit_for_bit_for_every_op(op):
    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(graph_specs(ops=(op,), min_ops=1, max_ops=2, allow_backward=False))
    def check(spec):
        ns = _namespace(spec)
        inputs = make_inputs(spec)
        assert all(torch.equal(a, b) for a, b in zip(inputs, ns["make_inputs"]("cpu")))
        with torch.no_grad():  # each call on its own copies: an in-place op writes into its inputs
            ours = build_callable(spec)(*fresh_inputs(inputs))
            theirs = ns["model"](*fresh_inputs(inputs))
            ref_ours = build_reference(spec)(*reference_inputs(inputs))
            ref_theirs = ns["model"](*reference_inputs(inputs), ref=True)
        for a, b in zip(ours + ref_ours, theirs + ref_theirs):
            assert a.dtype == b.dtype and _bits_equal(a, b), spec.to_json()

    check()


@pytest.mark.slow  # 2 min on 2 cores; tests/test_repro_numbers.py runs every op's repro in the default tier
def test_repro_script_runs_standalone_and_exits_1_on_divergence(tmp_path):
    spec = layer_norm_linear(rows=2048)
    path = tmp_path / "repro.py"
    path.write_text(render_repro(spec, device="cpu", config=CompileConfig(), title="LayerNorm -> Linear"))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "torch " in proc.stdout and "ULP" in proc.stdout and "fp64 triage" in proc.stdout
    clean = render_repro(spec, device="cpu", config=CompileConfig(backend="aot_eager"), title="clean")
    path.write_text(clean)
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agree" in proc.stdout


def test_repro_compiles_under_the_engines_compared_settings_with_the_cases_own_over_them():
    """The script patches Inductor with what `compiled` applies to a compared compile (one config
    per reduction, no pointwise autotuning: `records.config.COMPARED_COMPILE`), then the case's own
    overrides, so it compiles the kernels the case ran."""
    from divfuzz.records.config import COMPARED_COMPILE

    key = "test_configs.force_filter_reduction_configs"
    spec = layer_norm_linear()
    for config, expected in (
        (CompileConfig(), dict(COMPARED_COMPILE)),
        (CompileConfig().with_inductor(**{key: False}), dict(COMPARED_COMPILE) | {key: False}),
    ):
        text = render_repro(spec, device="cpu", config=config, title="t")
        ns = _exec_script(text)
        assert ns["compile_settings"](ns["INDUCTOR_CONFIG"]) == expected
        assert "torch._inductor.config.patch(compile_settings(INDUCTOR_CONFIG))" in text


def test_a_modules_repro_compiles_both_rungs_under_the_compared_settings():
    """`minimize --module`'s repro compiles its two rungs as divfuzz's ladder did (`compiled`):
    under `COMPARED_COMPILE`, each `torch.compile` inside the patched block."""
    import ast

    from torch.fx.experimental.proxy_tensor import make_fx

    from divfuzz.records.config import COMPARED_COMPILE
    from divfuzz.reports.module_repro import render_module_repro

    gm = make_fx(lambda x: x.sum(-1))(torch.ones(2, 3))
    tree = ast.parse(render_module_repro("m.py:make_case", "n", gm, before="aot_eager", rung="inductor", device="cpu"))
    settings = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "COMPARED_COMPILE")
    assert ast.literal_eval(settings) == dict(COMPARED_COMPILE)
    patched = [w for w in ast.walk(tree) if isinstance(w, ast.With)
               and "compile_settings()" in ast.unparse(w.items[0].context_expr)]
    assert len(patched) == 1
    compiles_inside = [c for c in ast.walk(patched[0]) if isinstance(c, ast.Call) and ast.unparse(c.func) == "torch.compile"]
    compiles_all = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func) == "torch.compile"]
    assert len(compiles_inside) == len(compiles_all) == 2
