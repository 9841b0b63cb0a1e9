"""The minimizer: candidate validity and determinism (fast), planted bugs shrink to one op (slow)."""

from __future__ import annotations

import pytest

from divfuzz.records.config import CompileConfig
from divfuzz.fuzzer.triage.shrink import PASSES, case_predicate, minimize_spec, spec_elements
from divfuzz.generators.surgery import rebuild_spec
from divfuzz.records.errors import MinimizeError
from divfuzz.fuzzer.engine.worker import Worker
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from seed_specs import e8m0, layer_norm_linear, sigmoid_gate


def _chain_bf16(ops=("relu", "tanh", "sigmoid"), rows=64, dim=32) -> GraphSpec:
    nodes, prev = [], "x0"
    for i, op in enumerate(ops):
        params = (("affine", False), ("eps", 1e-5)) if op == "layer_norm_manual" else ()  # its schema requires both
        nodes.append(Node(f"v{i + 1}", op, (prev,), params, "bfloat16", (rows, dim)))
        prev = f"v{i + 1}"
    return GraphSpec(
        inputs=(TensorSpec("x0", (rows, dim), "bfloat16"),), nodes=tuple(nodes), outputs=(prev,),
        recipe=InputRecipe("mixed_sign", 7),
    )


@pytest.mark.parametrize("spec", [layer_norm_linear(256), sigmoid_gate(256), e8m0(), _chain_bf16()])
def test_every_candidate_is_a_valid_spec(spec):
    for name, make in PASSES:
        for cand in make(spec):
            validate_spec(cand)
            assert GraphSpec.from_json(cand.to_json()) == cand, name


def test_rebuild_spec_reinfers_weights_from_new_shapes():
    spec = layer_norm_linear(64, 128)
    small = rebuild_spec(spec, data_shapes={"x0": (8, 16)})
    assert small.meta("x0")[0] == (8, 16)
    assert small.meta("v1_weight")[0] == (16,) and small.meta("v2_weight")[0] == (128, 16)
    assert small.node("v2").shape == (8, 128)


def test_pure_predicate_minimizes_deterministically():
    spec = _chain_bf16(("relu", "tanh", "layer_norm_manual", "sigmoid"))
    spec = rebuild_spec(spec)
    has_tanh = lambda s: "tanh" in s.op_names  # noqa: E731
    a = minimize_spec(spec, has_tanh, budget_s=30)
    b = minimize_spec(spec, has_tanh, budget_s=30)
    assert a.spec == b.spec and a.spec.op_names == ("tanh",)
    assert spec_elements(a.spec) == 1 and a.spec.recipe == InputRecipe("normal", 0)
    assert a.ops_before == 4 and a.ops_after == 1 and a.predicate_calls >= 2


def test_input_that_does_not_fail_is_refused():
    with pytest.raises(MinimizeError, match="does not fail"):
        minimize_spec(_chain_bf16(), lambda s: False, budget_s=5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, spec, kind",
    [
        ("divfuzz.fuzzer.engine.planted:ulp_bump", _chain_bf16(), "bf16-ulp"),
        ("divfuzz.fuzzer.engine.planted:uint8_flip", e8m0(64, 64), "int-gross"),
    ],
)
def test_planted_bug_minimizes_to_one_op(backend, spec, kind):
    worker = Worker("cpu")
    try:
        pred = case_predicate(worker, device="cpu", config=CompileConfig(backend=backend), kind=kind, timeout_s=120)
        result = minimize_spec(spec, pred, budget_s=60)
    finally:
        worker.stop()
    assert result.ops_after == 1, result.spec.to_json()
    assert result.elements_after <= 4


def test_a_shrunk_shape_that_an_ops_params_no_longer_fit_is_no_candidate():
    """group_norm's `groups` must divide the channels: shrinking 4 channels to 3 under groups=2 is
    not a valid graph. It must be skipped as a candidate, not stop the campaign as divfuzz's own
    error (seen on an H100: `ValueError: groups=2 does not divide the 3 channels`)."""
    from divfuzz.generators.spec import GraphSpec, Node, TensorSpec

    spec = GraphSpec(
        inputs=(TensorSpec("x0", (2, 4, 5), "float32"),),
        nodes=(Node("v1", "group_norm", ("x0",), (("affine", False), ("eps", 1e-5), ("groups", 2)), "float32", (2, 4, 5)),),
        outputs=("v1",),
    )
    assert rebuild_spec(spec) is not None
    assert rebuild_spec(spec, data_shapes={"x0": (2, 3, 5)}) is None


def test_dropping_the_op_after_the_culprit_keeps_the_outputs_name():
    """A finding is about an output by name: the minimizer keeps the output its reason names. An
    op after the one that shows the finding (a gelu after the interpolate that changed the dtype)
    must still go, its stand-in taking the output's name."""
    chain = rebuild_spec(_chain_bf16(("relu", "tanh", "sigmoid")))
    assert chain.outputs == ("v3",) and chain.node("v3").op == "sigmoid"
    result = minimize_spec(chain, lambda s: s.outputs == ("v3",) and "tanh" in s.op_names, budget_s=30)
    assert result.spec.op_names == ("tanh",) and result.spec.outputs == ("v3",)
    assert result.spec.node("v3").inputs == ("x0",)
