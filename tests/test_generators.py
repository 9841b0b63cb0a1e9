"""The IR and the strategies: round-trips, validity by construction, coverage of the registry."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from fuzzer.engine.execute import boundary_distances
from generators.build import build_callable, build_reference, make_inputs, reference_inputs
from records.errors import InvalidGraphError, SpecError, UnknownOpError
from generators.registry import all_ops
from generators.spec import SCHEMA_VERSION, GraphSpec
from generators.strategies import graph_specs
from generators.validate import load_spec, validate_spec
from seed_specs import layer_norm_linear

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

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(graph_specs())
    def draw(spec):
        drawn[0] += 1
        seen.update(spec.op_names)

    draw()
    missing = set(all_ops()) - set(seen)
    assert not missing, f"never drawn in {drawn[0]} graphs: {sorted(missing)}"
    # Generation filters nothing: every example Hypothesis tried reached the test body.
    assert drawn[0] == 300


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
