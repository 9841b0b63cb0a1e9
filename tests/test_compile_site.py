"""One compile site: only `divfuzz.fuzzer.engine.compile` calls `torch.compile`, and what it applies
(Inductor overrides, removed decompositions) holds for the block it yields in and not after."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from divfuzz.fuzzer.engine.compile import compiled
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
COMPILE_SITE = ROOT / "fuzzer" / "engine" / "compile.py"
SCANNED = ("fuzzer", "generators", "oracles", "reports", "records")


def _torch_compile_uses(tree: ast.AST) -> list[int]:
    """Lines that reach `torch.compile` as code: an attribute `torch.compile` (called, aliased or
    passed on) or `from torch import compile`. Generated source held in strings is not code here."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "compile" and isinstance(node.value, ast.Name) and node.value.id == "torch":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and any(a.name == "compile" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_sees_calls_aliases_and_imports_but_not_generated_source():
    code = 'import torch\nf = torch.compile(g)\nh = torch.compile\nfrom torch import compile\nSRC = "torch.compile(m)"\n'
    assert _torch_compile_uses(ast.parse(code)) == [2, 3, 4]


def test_only_the_engine_compile_module_reaches_torch_compile():
    offenders = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == COMPILE_SITE:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _torch_compile_uses(ast.parse(path.read_text(), str(path)))]
    assert offenders == []
    assert _torch_compile_uses(ast.parse(COMPILE_SITE.read_text())), "the compile site itself must still call torch.compile"


def test_overrides_and_removed_decompositions_hold_inside_the_block_only():
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor import decomposition as inductor_decomp

    layer_norm = torch.ops.aten.native_layer_norm.default
    assert layer_norm in inductor_decomp.decompositions
    before = inductor_config.emulate_precision_casts
    config = CompileConfig().with_inductor(emulate_precision_casts=not before)
    with compiled(torch.sin, config, decompositions=("aten.native_layer_norm",)) as fn:
        assert callable(fn)
        assert inductor_config.emulate_precision_casts is (not before)
        assert layer_norm not in inductor_decomp.decompositions
        assert inductor_config.fx_graph_cache is False  # the cache does not key on the table
    assert inductor_config.emulate_precision_casts is before
    assert layer_norm in inductor_decomp.decompositions


def test_the_settings_are_restored_when_the_block_raises():
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor import decomposition as inductor_decomp

    before = inductor_config.emulate_precision_casts
    with pytest.raises(RuntimeError, match="inside"):
        with compiled(torch.sin, CompileConfig().with_inductor(emulate_precision_casts=not before), decompositions=("aten.native_layer_norm",)):
            raise RuntimeError("inside")
    assert inductor_config.emulate_precision_casts is before
    assert torch.ops.aten.native_layer_norm.default in inductor_decomp.decompositions


def test_an_unknown_backend_is_refused_before_anything_is_compiled():
    import torch

    with pytest.raises(ConfigError, match="no_such_backend"):
        with compiled(torch.sin, CompileConfig(backend="no_such_backend")):
            pass


def test_a_training_step_compiles_its_backward_under_the_overrides():
    """The backward compiles lazily at the first backward: inside the block it must see the
    same Inductor settings as the forward (a recording backend reads them at compile time)."""
    import torch
    import torch._inductor.config as inductor_config

    seen = []

    def recording_backend(gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def keep(g, _inputs):
            seen.append(inductor_config.emulate_precision_casts)
            return make_boxed_func(g.forward)

        return aot_autograd(fw_compiler=keep, bw_compiler=keep)(gm, example_inputs)

    before = inductor_config.emulate_precision_casts
    x = torch.randn(8, requires_grad=True)
    with compiled(lambda t: (t.sin() * 2).sum(), CompileConfig().with_inductor(emulate_precision_casts=not before),
                  backend_fn=recording_backend) as fn:
        fn(x).backward()
    assert seen == [not before, not before]  # forward, then backward
    assert x.grad is not None and torch.allclose(x.grad, 2 * x.detach().cos())


def test_a_compared_compile_skips_pointwise_autotuning_and_a_timed_one_keeps_torchs_default():
    import torch
    import torch._inductor.config as inductor_config

    from divfuzz.records.config import NUMERICS_NEUTRAL

    assert ("triton.autotune_pointwise", False) in NUMERICS_NEUTRAL
    default = inductor_config.triton.autotune_pointwise
    assert default is True  # torch's own default: what the perf oracle times
    with compiled(torch.sin, CompileConfig()):
        assert inductor_config.triton.autotune_pointwise is False
    with compiled(torch.sin, CompileConfig(), timed=True):
        assert inductor_config.triton.autotune_pointwise is True
    # the case's own overrides still apply on top (max_autotune_pointwise turns tuning back on in Triton's heuristics)
    with compiled(torch.sin, CompileConfig().with_inductor(max_autotune_pointwise=True)):
        assert inductor_config.max_autotune_pointwise is True and inductor_config.triton.autotune_pointwise is False
    assert inductor_config.triton.autotune_pointwise is default


def test_a_compared_compile_keeps_one_reduction_config_and_a_user_can_ask_for_timed_ones():
    import torch
    import torch._inductor.config as inductor_config

    from divfuzz.records.config import COMPARED_COMPILE, REPRODUCIBLE
    from divfuzz.records.config import check_inductor_override

    assert set(REPRODUCIBLE) <= set(COMPARED_COMPILE)
    default = inductor_config.test_configs.force_filter_reduction_configs
    assert default is False  # torch's own default: every candidate config compiled and timed
    with compiled(torch.sin, CompileConfig()):
        assert inductor_config.test_configs.force_filter_reduction_configs is True
    with compiled(torch.sin, CompileConfig(), timed=True):
        assert inductor_config.test_configs.force_filter_reduction_configs is False
    key = "test_configs.force_filter_reduction_configs"
    check_inductor_override(key, False)  # a config may turn timing back on (`--inductor key=false`)
    with compiled(torch.sin, CompileConfig().with_inductor(**{key: False})):
        assert inductor_config.test_configs.force_filter_reduction_configs is False
    assert inductor_config.test_configs.force_filter_reduction_configs is default
