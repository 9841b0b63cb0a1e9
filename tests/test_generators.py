"""The IR and the strategies: round-trips, validity by construction, coverage of the registry."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from divfuzz.fuzzer.engine.execute import boundary_distances
from divfuzz.generators.build import build_callable, build_reference, make_inputs, op_function, reference_inputs, rounding_boundaries
from divfuzz.records.errors import InvalidGraphError, SpecError, UnknownOpError
from divfuzz.generators.registry import all_ops, get_op
from divfuzz.generators.spec import SCHEMA_VERSION, GraphSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import load_spec, validate_spec
from seed_specs import e8m0, layer_norm_linear

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FAST
@given(graph_specs())
def test_any_drawn_spec_round_trips_through_json(spec):
    assert GraphSpec.from_json(spec.to_json()) == spec
    assert GraphSpec.from_json(spec.to_json()).digest() == spec.digest()
    assert load_spec(spec.to_json()) == spec


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(graph_specs())
def test_every_drawn_graph_is_valid_and_runs_eagerly(spec):
    validate_spec(spec)
    inputs = make_inputs(spec)
    outs = build_callable(spec)(*inputs)
    assert len(outs) == len(spec.outputs)
    for name, out in zip(spec.outputs, outs):
        assert tuple(out.shape) == spec.meta(name)[0], name
    ref = build_reference(spec)(*reference_inputs(inputs))
    assert all(r.dtype in (torch.float64,) or not r.is_floating_point() for r in ref)
    env: dict = {}
    build_callable(spec, keep=env)(*inputs)
    for name, dist in boundary_distances(spec, env).items():
        assert dist.shape == spec.meta(name)[0]


def test_every_registered_op_is_drawn_and_nothing_is_rejected():
    seen: Counter = Counter()
    drawn = [0]

    # 78 ops: the least likely (abs) is about 0.2% of op draws, some 6 of which a graph holds; a fixed
    # seed (derandomize) keeps this a check of the weights, not of luck.
    @settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    @given(graph_specs())
    def draw(spec):
        drawn[0] += 1
        seen.update(spec.op_names)

    draw()
    missing = set(all_ops()) - set(seen)
    assert not missing, f"never drawn in {drawn[0]} graphs: {sorted(missing)}"
    # Generation filters nothing: every example Hypothesis tried reached the test body.
    assert drawn[0] == 600


@FAST
@given(graph_specs(min_ops=2, max_ops=5))
def test_graph_sizes_follow_the_bounds(spec):
    assert 2 <= len(spec.nodes) <= 5
    assert all(o in {n.name for n in spec.nodes} for o in spec.outputs)


def test_spec_loading_errors_name_the_problem():
    good = layer_norm_linear().to_dict()
    with pytest.raises(SpecError, match="not valid JSON"):
        GraphSpec.from_json(json.dumps(good)[:-20])
    future = dict(good, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(SpecError, match="newer than this divfuzz"):
        GraphSpec.from_json(json.dumps(future))
    bad_op = json.loads(json.dumps(good))
    bad_op["nodes"][0]["op"] = "layer_nrom"
    with pytest.raises(UnknownOpError, match="layer_nrom"):
        load_spec(json.dumps(bad_op))
    bad_shape = json.loads(json.dumps(good))
    bad_shape["nodes"][1]["shape"] = [7, 7]
    with pytest.raises(InvalidGraphError, match="v2"):
        load_spec(json.dumps(bad_shape))
    bad_type = json.loads(json.dumps(good))
    bad_type["inputs"][0]["shape"] = "big"
    with pytest.raises(SpecError, match=r"inputs\[0\]\.shape"):
        GraphSpec.from_json(json.dumps(bad_type))


def test_inputs_are_a_pure_function_of_the_spec():
    spec = layer_norm_linear(rows=8)
    a, b = make_inputs(spec), make_inputs(spec)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    other = spec.with_recipe(type(spec.recipe)(spec.recipe.kind, spec.recipe.seed + 1))
    assert not torch.equal(make_inputs(other)[0], a[0])


def test_ops_have_one_definition_their_code_template():
    """No op carries a second definition of its meaning beside `code`: what runs is the template."""
    from divfuzz.generators.opdef import OpDef

    assert "run" not in OpDef.__dataclass_fields__
    x = make_inputs(layer_norm_linear(rows=4, dim=8))[0]
    gelu = op_function(get_op("gelu_manual"), 1, {})
    expected = 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))
    assert torch.equal(gelu(lambda d: d, x), expected)


def test_op_functions_tell_params_apart_by_type():
    """1, 1.0 and True are equal and hash alike in Python, yet print as different code: the
    compiled-function cache must not hand one the other's function."""
    add = get_op("add_eps")
    as_int = op_function(add, 1, {"eps": 1})
    as_float = op_function(add, 1, {"eps": 1.0})
    assert as_int is not as_float
    assert 1 in as_int.__code__.co_consts and 1.0 in as_float.__code__.co_consts
    assert type([c for c in as_float.__code__.co_consts if c == 1][0]) is float
    x = torch.ones(3, dtype=torch.int64)
    assert as_int(lambda d: d, x).dtype == torch.int64 and as_float(lambda d: d, x).dtype == torch.float32


def test_a_rounding_boundarys_pre_image_is_what_the_op_rounds():
    """`JumpRule.pre_image` is the sub-expression printed inside the op's `code`: for e8m0 (ceil,
    uint8) the output is exactly clamp(ceil(pre-image)) + 127, on eager's own values."""
    spec = e8m0(rows=8, dim=16)
    env: dict = {}
    (out,) = build_callable(spec, keep=env)(*make_inputs(spec))
    b = rounding_boundaries(spec, env)["v2"]
    assert b.dtype == "float32" and b.grid_offset == 0.0 and b.threshold is None
    assert torch.equal((torch.clamp(torch.ceil(b.pre_image), -127, 127) + 127).to(torch.uint8), out)
    assert boundary_distances(spec, env)["v2"].shape == out.shape
