"""Generators keep undefined float->integer casts out by construction (issue 8).

A NaN, infinite or out-of-range float cast to an integer is undefined behaviour: the oracle files
such flips as `undefined`, never as findings, so a generator that draws them wastes cases. The
default strategy feeds every encoding through a `cast_guard`; `guard_casts=False` (`divfuzz fuzz
--unguarded-casts`) draws the very same graphs without the guards. No compile here.
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, seed, settings

from divfuzz.generators.build import build_callable, make_inputs, rounding_boundaries
from divfuzz.generators.ops import CAST_GUARD, GUARDED_ENCODINGS
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import FLOAT_DTYPES, GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.boundary import distance_ulps, undefined_cast

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
# Encodings drawn often: the graphs are chains ending in casts.
CAST_HEAVY = ("e8m0_encode", "quantize", "log", "exp", "div", "mul", "add", "sum", "count_cmp", "cast")


def _int_casts(spec: GraphSpec) -> list[Node]:
    """Every node that casts a float to an integer: its op's output is an integer, its input a float,
    and it is not a comparison (a count casts bools, which is always defined)."""
    return [
        n for n in spec.nodes
        if n.dtype not in FLOAT_DTYPES and spec.meta(n.inputs[0])[1] in FLOAT_DTYPES and get_op(n.op).family != "compare"
    ]


def _fed_by_guard(spec: GraphSpec, cast: Node) -> bool:
    src = cast.inputs[0]
    if src not in {n.name for n in spec.nodes}:
        return False
    guard = spec.node(src)
    kw = guard.kwargs
    return (guard.op == CAST_GUARD and kw["encoding"] == cast.op and kw["to"] == cast.kwargs["to"]
            and (cast.op != "quantize" or kw["scale"] == cast.kwargs["scale"]))


@SETTINGS
@given(spec=graph_specs(max_ops=8, ops=CAST_HEAVY))
def test_every_drawn_cast_to_an_integer_is_fed_by_its_guard(spec):
    validate_spec(spec)
    for cast in _int_casts(spec):
        assert cast.op in GUARDED_ENCODINGS
        assert _fed_by_guard(spec, cast), spec.to_json()
    assert len(spec.nodes) <= 8


def _campaign_draws(strategy, seed_value: int, n: int) -> list[GraphSpec]:
    """The first `n` specs a seeded Hypothesis run draws (as a campaign slot does with `@seed`)."""
    drawn: list[GraphSpec] = []

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=False)
    @given(strategy)
    def collect(spec):
        drawn.append(spec)

    collect()
    return drawn


def _without_guards(spec: GraphSpec) -> GraphSpec:
    """`spec` with every cast_guard node removed and its encoding reading the guard's input again."""
    from dataclasses import replace

    guarded = {n.name: n.inputs[0] for n in spec.nodes if n.op == CAST_GUARD}
    nodes = tuple(replace(n, inputs=tuple(guarded.get(i, i) for i in n.inputs)) for n in spec.nodes if n.op != CAST_GUARD)
    return replace(spec, nodes=nodes, outputs=tuple(guarded.get(o, o) for o in spec.outputs))


def test_same_seed_same_cases_with_and_without_guards():
    """Each mode draws the same cases from the same seed (a resumed campaign redraws them). The
    guard takes no draw of its own, so a seed's first cases are the very same graphs with and
    without guards, the guards aside. Later cases part: Hypothesis mutates the choices it has seen,
    and a guard counts towards the drawn op count."""
    for seed_value in (3, 5, 11):
        guarded = _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY, guard_casts=True), seed_value, 25)
        unguarded = _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY, guard_casts=False), seed_value, 25)
        if seed_value == 11:
            assert guarded == _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY, guard_casts=True), 11, 25)
            assert unguarded == _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY, guard_casts=False), 11, 25)
        first = guarded[:2]
        assert any(n.op == CAST_GUARD for s in first for n in s.nodes), seed_value  # the comparison covers guards
        assert [_without_guards(s) for s in first] == unguarded[:2], seed_value
        assert all(n.op != CAST_GUARD for s in unguarded for n in s.nodes)


def test_unguarded_casts_are_drawn_only_when_asked():
    unguarded = _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY, guard_casts=False), 5, 60)
    assert all(n.op != CAST_GUARD for s in unguarded for n in s.nodes)
    assert sum(not _fed_by_guard(s, c) for s in unguarded for c in _int_casts(s)) > 5
    guarded = _campaign_draws(graph_specs(max_ops=8, ops=CAST_HEAVY), 5, 60)
    assert sum(len(_int_casts(s)) for s in guarded) > 5  # the guarded strategy still draws casts
    assert all(_fed_by_guard(s, c) for s in guarded for c in _int_casts(s))


def _chain(encoding: str, params: dict, *, guarded: bool, producer: str, dtype: str) -> GraphSpec:
    """x -> producer (log: NaN on negatives; exp: Inf on large values) -> [cast_guard] -> encoding."""
    from divfuzz.generators.ops import cast_guard_params

    shape = (8, 64)
    nodes = [Node("v1", producer, ("x0",), (), dtype, shape)]
    src = "v1"
    if guarded:
        nodes.append(Node("g2", CAST_GUARD, ("v1",), tuple(sorted(cast_guard_params(encoding, params).items())), dtype, shape))
        src = "g2"
    nodes.append(Node("v2", encoding, (src,), tuple(sorted(params.items())), params["to"], shape))
    return validate_spec(GraphSpec(inputs=(TensorSpec("x0", shape, dtype),), nodes=tuple(nodes), outputs=("v2",),
                                   recipe=InputRecipe("log_uniform", 3)))


def _undefined_elements(spec: GraphSpec) -> int:
    """Elements whose pre-image (the value eager rounds, as the oracle measures it) is NaN or
    infinite: the oracle files their flips as undefined casts (NaN boundary distance). A quantize
    pre-image must also be in the target's range (e8m0 offsets its exponent, so its pre-image is not)."""
    env: dict = {}
    with torch.no_grad():
        outs = build_callable(spec, keep=env)(*make_inputs(spec))
    boundary = rounding_boundaries(spec, env)["v2"]
    assert torch.isnan(boundary_distances(boundary)).equal(~torch.isfinite(boundary.pre_image))
    if spec.node("v2").op == "quantize":
        return int(undefined_cast(boundary.pre_image, outs[0].dtype).sum())
    return int((~torch.isfinite(boundary.pre_image)).sum())


def boundary_distances(b) -> torch.Tensor:
    return distance_ulps(b.pre_image, b.dtype, grid_offset=b.grid_offset, threshold=b.threshold, row_reduced=b.row_reduced)


def test_guard_makes_every_pre_image_a_defined_cast_where_the_unguarded_graph_has_none():
    cases = [
        ("quantize", {"scale": 0.01, "mode": "round", "to": "int8"}, "log", "float32"),
        ("quantize", {"scale": 0.05, "mode": "floor", "to": "uint8"}, "exp", "float16"),
        ("e8m0_encode", {"mode": "ceil", "to": "uint8"}, "log", "bfloat16"),
        ("e8m0_encode", {"mode": "floor", "to": "int8"}, "exp", "float16"),
    ]
    for encoding, params, producer, dtype in cases:
        bad = _undefined_elements(_chain(encoding, params, guarded=False, producer=producer, dtype=dtype))
        assert bad > 0, (encoding, producer, dtype)  # the inputs really hold NaN or Inf pre-images
        assert _undefined_elements(_chain(encoding, params, guarded=True, producer=producer, dtype=dtype)) == 0


def test_guard_changes_no_finite_in_range_value():
    """Where the pre-image was already defined the guard is the identity: it hides no divergence."""
    spec_u = _chain("quantize", {"scale": 0.05, "mode": "round", "to": "int8"}, guarded=False, producer="abs", dtype="float32")
    spec_g = _chain("quantize", {"scale": 0.05, "mode": "round", "to": "int8"}, guarded=True, producer="abs", dtype="float32")
    inputs = make_inputs(spec_u)
    with torch.no_grad():
        assert torch.equal(build_callable(spec_u)(*inputs)[0], build_callable(spec_g)(*inputs)[0])


def test_unguarded_casts_are_part_of_the_campaign_identity(tmp_path):
    """A resumed campaign must draw what the first one drew: the flag is in its identity (the store
    resumes only a run with equal options), and default runs keep the identity they had before it."""
    from dataclasses import replace

    from divfuzz.fuzzer.campaign.loop import CampaignOptions

    opts = CampaignOptions(device="cpu", out_dir=tmp_path)
    bare = replace(opts, unguarded_casts=True)
    assert "unguarded_casts" not in opts.identity()
    assert bare.identity() == opts.identity() | {"unguarded_casts": True}
    assert _campaign_draws(bare.strategy(), 3, 30) != _campaign_draws(opts.strategy(), 3, 30)
