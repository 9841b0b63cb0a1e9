"""The perf oracle on a GPU: CUDA-event timings with the L2 flushed, planted slow kernels found,
the A/A control clean at the default CUDA margin, and the real Inductor on a training norm block."""

from __future__ import annotations

import pytest
import torch

from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.oracles.findings import finding_of
from divfuzz.records.config import CompileConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def block(tokens=8192, hidden=1024, op="rms_norm") -> GraphSpec:
    params = (("affine", True), ("eps", 1e-6))
    weights = (TensorSpec("v1_weight", (hidden,), "bfloat16", True, "near_one"),)
    if op == "layer_norm":
        weights += (TensorSpec("v1_bias", (hidden,), "bfloat16", True, "near_zero"),)
    return GraphSpec(
        inputs=(TensorSpec("x0", (tokens, hidden), "bfloat16", True, "data"),) + weights,
        nodes=(Node("v1", op, ("x0",) + tuple(w.name for w in weights), params, "bfloat16", (tokens, hidden)),),
        outputs=("v1",), recipe=InputRecipe("normal", 5), backward=True,
    )


def test_planted_slow_kernels_and_the_aa_control_on_cuda():
    from divfuzz.fuzzer.engine.execute_perf import execute_perf_case

    spec = block()
    fwd = execute_perf_case(spec, "cuda", CompileConfig(backend="divfuzz.fuzzer.engine.planted:slow_forward"))
    print([p.describe() for p in fwd.perf])
    assert finding_of(fwd).kind.value == "slower-fwd"
    assert all(p.timer.startswith("cuda events") for p in fwd.perf)
    bwd = execute_perf_case(spec, "cuda", CompileConfig(backend="divfuzz.fuzzer.engine.planted:slow_backward"))
    print([p.describe() for p in bwd.perf])
    assert finding_of(bwd).kind.value == "slower-bwd"
    for _ in range(3):
        control = execute_perf_case(spec, "cuda", CompileConfig(), self_check=True)
        print("A/A", [p.describe() for p in control.perf])
        assert finding_of(control) is None


def test_inductor_on_a_training_norm_block_is_timed_in_both_phases():
    from divfuzz.fuzzer.engine.execute_perf import execute_perf_case

    for op in ("rms_norm", "layer_norm"):
        v = execute_perf_case(block(op=op), "cuda", CompileConfig())
        print(op, v.status.value, [p.describe() + f" clock {p.clock}" for p in v.perf])
        assert [p.phase for p in v.perf] == ["fwd", "fwd+bwd"] and all(p.repeats >= 10 for p in v.perf)
        fwd, step = v.perf
        assert step.eager_median_s > 1.5 * fwd.eager_median_s  # the step includes the backward's kernels
