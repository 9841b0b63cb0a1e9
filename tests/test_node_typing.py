"""The one node-typing rule (`divfuzz.generators.node_typing`): it says what real torch gives on the CPU for
every registered op under autocast, and the strategies, `validate_spec` and the spec surgery all
type a node the same way.

(No snapshot of drawn graphs here: Hypothesis draws literal constants from every first-party
module loaded, tests included, so the same seed draws other graphs when pytest collects other
files. The refactor's "same seeds, same graphs" was checked with every divfuzz module loaded.)"""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

from divfuzz.generators.build import build_callable, make_inputs
from divfuzz.generators.node_typing import new_node, promote
from divfuzz.generators.opdef import Meta
from divfuzz.generators.registry import all_ops, get_op
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.surgery import rebuild_spec
from divfuzz.generators.validate import load_spec, validate_spec
from divfuzz.records.dtypes import ALL_DTYPES, DATA_DTYPES, DTYPES, MANTISSA_BITS
from divfuzz.records.errors import InvalidGraphError

SHAPE = (4, 8, 24)


def _draw(strategy, n: int, at: int) -> list:
    drawn = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck), phases=(Phase.generate,))
    @seed(at)
    @given(strategy)
    def collect(value):
        drawn.append(value)

    collect()
    return drawn[:n]


def _cells(op):
    """Every tuple of data dtypes an autocast graph can hand `op` (float32 data, bf16/fp16 values
    after a linear or a cast) that the op accepts."""
    for dtypes in itertools.product(DATA_DTYPES, repeat=op.arity):
        metas = tuple(Meta(SHAPE, d) for d in dtypes)
        if op.accepts(metas):
            yield metas


def _params(op, metas) -> list[dict]:
    drawn = _draw(st.composite(lambda draw: op.draw_params(draw, metas))(), 8, 0)
    return list({json.dumps(p, sort_keys=True): p for p in drawn}.values())


@pytest.mark.parametrize("autocast", ["bfloat16", "float16", None])
def test_the_rule_gives_what_torch_gives_on_the_cpu_for_every_op(autocast):
    """Each registered op alone, on every data dtype it accepts, weights made as the rule says
    (float32 under autocast), run by real torch under `torch.autocast("cpu")`: the output's dtype
    and shape are the node's. (Before the rule knew torch's fp32 list, mse_loss, cross_entropy and
    margin_ranking_loss said bf16 where torch gives float32, and so did the hand-written norms
    with their float32 weights.)"""
    wrong = []
    for name, op in all_ops().items():
        for metas in _cells(op):
            args = tuple(f"x{i}" for i in range(op.arity))
            for params in _params(op, metas):
                node, weights = new_node(op, "v1", args, metas, params, autocast=autocast, backward=False)
                data = tuple(TensorSpec(a, m.shape, m.dtype) for a, m in zip(args, metas))
                spec = GraphSpec(data + weights, (node,), ("v1",), InputRecipe("normal", 0), autocast)
                (out,) = build_callable(spec, "cpu")(*make_inputs(spec, "cpu"))
                got = (str(out.dtype).removeprefix("torch."), tuple(out.shape))
                if got != (node.dtype, node.shape):
                    wrong.append(f"{name} on {[m.dtype for m in metas]} {params}: rule {node.dtype}{node.shape}, torch {got}")
    assert not wrong, "\n".join(wrong[:20])


def test_losses_under_autocast_are_float32_and_linears_the_autocast_dtype():
    x = (Meta(SHAPE, "bfloat16"), Meta(SHAPE, "bfloat16"))
    loss, _ = new_node(get_op("mse_loss"), "v1", ("a", "b"), x, {"reduction": "mean"}, autocast="bfloat16", backward=False)
    assert loss.dtype == "float32"
    loss, _ = new_node(get_op("mse_loss"), "v1", ("a", "b"), x, {"reduction": "mean"}, autocast=None, backward=False)
    assert loss.dtype == "bfloat16"
    lin, weights = new_node(get_op("linear"), "v1", ("a",), (Meta(SHAPE, "float32"),), {"out_features": 8, "bias": True},
                            autocast="bfloat16", backward=True)
    assert lin.dtype == "bfloat16" and [w.dtype for w in weights] == ["float32", "float32"]
    assert [w.name for w in weights] == ["v1_weight", "v1_bias"] and all(w.requires_grad for w in weights)
    norm, _ = new_node(get_op("rms_norm_manual"), "v1", ("a",), (Meta(SHAPE, "bfloat16"),), {"eps": 1e-5, "affine": True},
                       autocast="bfloat16", backward=False)
    assert norm.dtype == "float32"
    assert promote("bfloat16", "float16") == "float32" and promote("float64", "float32") == "float64"


@pytest.fixture(scope="module")
def drawn():
    return _draw(graph_specs(min_ops=3), 150, 23)


def test_validate_and_surgery_type_drawn_specs_as_the_strategies_do(drawn):
    autocast = [s for s in drawn if s.autocast]
    assert len(autocast) > 20
    for spec in drawn:
        assert validate_spec(spec) is spec
        rebuilt = rebuild_spec(spec)  # drops a data input no node uses, and nothing else
        assert rebuilt.nodes == spec.nodes and set(rebuilt.inputs) <= set(spec.inputs)


def _old_typed_autocast_spec(dtype_v2: str, dtype_v3: str) -> dict:
    """x -> linear (bf16 under autocast) -> mse_loss(none) -> add with the linear: as divfuzz
    stored it before the fp32 list (the loss and the add typed bfloat16)."""
    spec = GraphSpec(
        inputs=(TensorSpec("x0", (4, 8), "float32"), TensorSpec("v1_weight", (8, 8), "float32", init="fan_in")),
        nodes=(
            Node("v1", "linear", ("x0", "v1_weight"), (("bias", False), ("out_features", 8)), "bfloat16", (4, 8)),
            Node("v2", "mse_loss", ("v1", "v1"), (("reduction", "none"),), dtype_v2, (4, 8)),
            Node("v3", "add", ("v2", "v1"), (), dtype_v3, (4, 8)),
        ),
        outputs=("v3",),
        autocast="bfloat16",
    )
    return spec.to_dict()


def test_a_spec_stored_before_the_fp32_list_loads_retyped():
    old = load_spec(json.dumps(_old_typed_autocast_spec("bfloat16", "bfloat16")), source="old store")
    assert [n.dtype for n in old.nodes] == ["bfloat16", "float32", "float32"]
    new = GraphSpec.from_dict(_old_typed_autocast_spec("float32", "float32"))
    assert load_spec(new.to_json()) == new == old and validate_spec(new) is new
    # A dtype neither rule gives is still refused, naming the node.
    with pytest.raises(InvalidGraphError, match="node 'v3' .*dtype 'float16' but its inputs give 'float32'"):
        load_spec(json.dumps(_old_typed_autocast_spec("bfloat16", "float16")), source="old store")


def test_the_dtype_vocabulary_is_torchs():
    for name, info in DTYPES.items():
        t = getattr(torch, name)
        assert t.is_floating_point == info.is_float, name
        if info.is_float:
            assert torch.finfo(t).max == info.max_finite and torch.finfo(t).eps == 2.0**-info.mantissa_bits, name
            assert torch.finfo(t).tiny == 2.0**info.min_exponent, name
        elif name != "bool":
            assert (torch.iinfo(t).min, torch.iinfo(t).max) == info.int_range, name
    assert ALL_DTYPES[: len(MANTISSA_BITS)] == tuple(MANTISSA_BITS)
