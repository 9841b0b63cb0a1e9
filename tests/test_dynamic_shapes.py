"""Dynamic shapes as a campaign dimension: a spec compiled with `mark_dynamic` (or dynamic=True)
runs with its shape siblings through one compile (`divfuzz.generators.shape_siblings`), each size
judged on its own; a compile the siblings add, or a first size whose results change after the
others ran, is a finding; repro.py and issue.py mark what divfuzz marked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from divfuzz.fuzzer.engine import graph_run
from divfuzz.fuzzer.engine.execute import AFTER_PREFIX, execute_case, execute_group
from divfuzz.generators.shape_siblings import dynamic_marks, same_graph_but_sizes, shape_siblings
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs, op_spec
from divfuzz.generators.validate import load_spec, validate_spec
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import SpecError
from divfuzz.records.severity import Severity
from divfuzz.reports.issue_script import _compile_call
from divfuzz.reports.repro import render_repro

PLANTED = "divfuzz.fuzzer.engine.planted:"


def _norm(dynamic: str = "marked", dims=(0,), rows: int = 8) -> GraphSpec:
    """x0 (rows, 3, 16) -> layer_norm (affine) -> exp: its weights follow the last dim only."""
    shape = (rows, 3, 16)
    return validate_spec(GraphSpec(
        inputs=(TensorSpec("x0", shape, "float32"), TensorSpec("v1_weight", (16,), "float32", init="near_one"),
                TensorSpec("v1_bias", (16,), "float32", init="near_zero")),
        nodes=(Node("v1", "layer_norm", ("x0", "v1_weight", "v1_bias"), (("affine", True), ("eps", 1e-5)), "float32", shape),
               Node("v2", "exp", ("v1",), (), "float32", shape)),
        outputs=("v2",), dynamic=dynamic, dynamic_dims=dims if dynamic == "marked" else ()))


def test_shape_siblings_resize_only_the_dynamic_dims_and_are_a_function_of_the_spec():
    spec = _norm(dims=(1,))
    siblings = shape_siblings(spec)
    assert len(siblings) == 2 and siblings == shape_siblings(spec)
    for s in siblings:
        assert same_graph_but_sizes(spec, s) and s.inputs[0].shape[0::2] == (8, 16) and s.inputs[0].shape[1] not in (0, 1, 3)
        assert s.inputs[1:] == spec.inputs[1:] and s.nodes[1].shape == s.inputs[0].shape
    assert shape_siblings(_norm(dynamic="")) == ()
    assert shape_siblings(_norm(dims=(2,))) == ()  # the last dim sizes the weights: not free to vary
    assert [s.inputs[0].shape[1:] for s in shape_siblings(_norm(dynamic="all"))] == [(3, 16), (3, 16)]
    assert dynamic_marks(spec) == ((0, 1),)


def test_a_dynamic_spec_round_trips_and_what_it_marks_is_checked_at_load():
    spec = _norm()
    data = spec.to_dict()
    assert data["schema_version"] == 2 and (data["dynamic"], data["dynamic_dims"]) == ("marked", [0])
    assert load_spec(json.dumps(data)) == spec
    static = _norm(dynamic="").to_dict()
    assert "dynamic" not in static and static["schema_version"] == 1
    for bad, why in (({"dynamic": "marked", "dynamic_dims": []}, "distinct dims"), ({"dynamic": "all", "dynamic_dims": [0]}, "empty"),
                     ({"dynamic": "marked", "dynamic_dims": [5]}, "outside"), ({"dynamic": "sometimes"}, "dynamic")):
        with pytest.raises(SpecError, match=why):
            load_spec(json.dumps(data | bad))


def test_dynamic_true_comes_from_the_spec_over_the_campaigns_config():
    assert CompileConfig().for_graph("all").dynamic is True
    assert CompileConfig().for_graph("marked") == CompileConfig() == CompileConfig().for_graph("")


def _group(spec: GraphSpec, backend: str = "inductor") -> list:
    verdicts: list = []
    assert execute_group([spec, *shape_siblings(spec)], "cpu", CompileConfig(backend=backend), on_verdict=verdicts.append) == 3
    return verdicts


@pytest.mark.parametrize("dynamic", ["marked", "all"])
def test_one_dynamic_compile_serves_every_size_on_real_inductor(dynamic):
    verdicts = _group(_norm(dynamic))
    assert [v.recompile for v in verdicts] == [None, None, None]
    assert "compile" in dict(verdicts[0].timings) and all("compile" not in dict(v.timings) for v in verdicts[1:])
    assert not any(o.name.startswith(AFTER_PREFIX) for v in verdicts for o in v.outputs)


def test_a_compile_the_sizes_add_is_a_recompile_finding(monkeypatch):
    # The first compile without its marks (static): each new size compiles again.
    monkeypatch.setattr(graph_run, "dynamic_marks", lambda spec: ())
    verdicts = _group(_norm(), backend="eager")
    assert verdicts[0].recompile is None and all(v.recompile for v in verdicts[1:])
    assert "x0 [" in verdicts[1].recompile and "dims [0] marked dynamic" in verdicts[1].recompile
    assert finding_of(verdicts[1]).kind.value == "recompile" and verdicts[1].status.value == "diverged"
    reason = severity_of(verdicts[1])
    assert reason.severity is Severity.SUSPECT and reason.rule == "recompile", reason  # no value differs


def test_a_result_that_depends_on_which_size_ran_first_is_caught():
    verdicts = _group(_norm(), backend=PLANTED + "order_dependent")
    assert not any(o.differs for v in verdicts[:2] for o in v.outputs)
    after = [o for o in verdicts[2].outputs if o.name.startswith(AFTER_PREFIX)]
    assert [o.name for o in after] == ["after:v2"]
    assert severity_of(verdicts[2]).severity is Severity.BUG and severity_of(verdicts[2]).output == "after:v2"


def test_a_stale_buffer_returned_for_another_size_is_caught():
    verdicts = _group(_norm(dynamic="all"), backend=PLANTED + "stale_second_call")
    assert all(severity_of(v).severity is Severity.BUG for v in verdicts[1:])


def test_repro_and_issue_mark_what_divfuzz_marked():
    text = render_repro(_norm(), device="cpu", config=CompileConfig(), title="t")
    assert "MARKED = [(0, 0)]" in text and "torch._dynamo.mark_dynamic(inputs[i], d)" in text
    assert "DYNAMIC = True" in render_repro(_norm(dynamic="all"), device="cpu", config=CompileConfig(), title="t")
    assert _compile_call(CompileConfig().for_graph("all"))[1] == "torch.compile(model, dynamic=True)"


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None, phases=[Phase.generate])
@given(graph_specs(max_ops=5))
def test_every_drawn_dynamic_spec_has_valid_shape_siblings(spec):
    if spec.dynamic:
        siblings = shape_siblings(spec)
        assert siblings and all(same_graph_but_sizes(spec, s) and validate_spec(s) == s for s in siblings)


def test_a_mark_the_graph_specialises_is_unsupported_not_a_compiler_bug():
    # Dynamo refuses mark_dynamic on a dim a pooling window runs over (ConstraintViolationError):
    # the marks were wrong, and the group ends there without a finding.
    spec = op_spec("max_pool1d", [{"kernel": 2, "stride": 2, "ceil_mode": False}], "float32", (4, 3, 16))
    spec = validate_spec(replace(spec, dynamic="marked", dynamic_dims=(2,)))
    verdict = execute_case(spec, "cpu", CompileConfig())
    assert verdict.status.value == "unsupported" and "specialises a dim" in verdict.error_message
    assert finding_of(verdict) is None
