"""In-place ops and views as ops (`divfuzz.generators.aliasing`): what a caller sees is judged, the
returned outputs and every input the graph writes into (`mutated:<input>`); every run starts from
the same inputs; backward graphs write into copies; a compiler that forgets a mutation is caught."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.fuzzer.engine.graph_run import run_forward_backward
from divfuzz.generators.aliasing import alias_roots, aliasing_problem, mutated_inputs
from divfuzz.generators.build import build_callable, build_reference, make_inputs, reference_inputs
from divfuzz.generators.features import program_features
from divfuzz.generators.ops import MUTATION_OPS, VIEW_OPS
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import load_spec, validate_spec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.oracles.ulp import bitwise_equal
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import InvalidGraphError
from divfuzz.records.severity import Severity
from divfuzz.reports.issue_script import render_issue_script
from divfuzz.reports.repro import render_repro

S = (8, 6)
FORGETS = CompileConfig(backend="divfuzz.fuzzer.engine.planted:forgets_mutation")


def _through_a_view(*, backward: bool = False, layout: str = "contiguous", clone: bool = False) -> GraphSpec:
    """x0 (written through its transpose) and x1: v1 = x0.t(); v2 = v1.mul_(exp(x1).t()); sigmoid(v2)."""
    t = (6, 8)
    return GraphSpec(
        inputs=(TensorSpec("x0", S, "float32", requires_grad=backward, layout=layout), TensorSpec("x1", S, "float32", requires_grad=backward)),
        nodes=(Node("v1", "transpose", ("x0",), (), "float32", t), Node("v2", "exp", ("x1",), (), "float32", S),
               Node("v3", "transpose", ("v2",), (), "float32", t),
               Node("v4", "mul_", ("v1", "v3"), (("clone", clone),), "float32", t),
               Node("v5", "sigmoid", ("v4",), (), "float32", t)),
        outputs=("v5",), backward=backward)


def test_a_write_through_a_view_reaches_the_input_it_views():
    spec = validate_spec(_through_a_view())
    roots = alias_roots(spec)
    assert roots["v1"] == roots["v4"] == "x0" and roots["v3"] == "v2" and roots["v5"] == "v5"
    assert mutated_inputs(spec) == ("x0",) and program_features(spec) == {"mutation", "view"}
    assert mutated_inputs(validate_spec(_through_a_view(backward=True, clone=True))) == ()
    assert {"add_", "mul_", "clamp_", "index_put_rows", "copy_slice"} <= set(MUTATION_OPS)
    assert {"transpose", "narrow", "select", "unsqueeze", "view_split"} <= set(VIEW_OPS)


def test_every_run_starts_from_the_same_inputs_and_judges_what_the_graph_wrote():
    spec = validate_spec(_through_a_view())
    inputs = make_inputs(spec)
    before = [x.clone() for x in inputs]
    first, _ = run_forward_backward(spec, build_callable(spec), inputs)
    second, _ = run_forward_backward(spec, build_callable(spec), inputs)
    assert all(bitwise_equal(a, b) for a, b in zip(before, inputs))  # the caller's tensors untouched
    assert [n for n, _ in first] == ["v5", "mutated:x0"]
    assert all(bitwise_equal(a, b) for (_, a), (_, b) in zip(first, second))
    expected = before[0] * before[1].exp()
    assert torch.allclose(dict(first)["mutated:x0"], expected)
    reference, _ = run_forward_backward(spec, build_reference(spec), reference_inputs(inputs))
    assert dict(reference)["mutated:x0"].dtype == torch.float64


def _square_self_write(second: str) -> dict:
    """x0 (6x6): v1 = x0.t(); v2 = v1.mul_(<second>)."""
    t = [6, 6]
    return {"inputs": [{"name": "x0", "shape": t, "dtype": "float32"}],
            "nodes": [{"name": "v1", "op": "transpose", "inputs": ["x0"], "shape": t, "dtype": "float32"},
                      {"name": "v2", "op": "mul_", "inputs": ["v1", second], "params": {"clone": False}, "shape": t,
                       "dtype": "float32"}],
            "outputs": ["v2"], "schema_version": 1}


@pytest.mark.parametrize("edit, why", [
    (lambda d: d.update(backward=True) or [t.update(requires_grad=True) for t in d["inputs"]], "backward graph"),
    (lambda d: d["inputs"][0].update(layout="expanded"), "overlap"),
    (lambda d: d.update(_square_self_write("x0")), "another view"),  # x0.t() times x0: a partial overlap
])
def test_what_eager_refuses_of_an_in_place_op_is_refused_at_load(edit, why):
    data = _through_a_view().to_dict()
    assert aliasing_problem(load_spec(json.dumps(_square_self_write("v1")))) is None  # the target itself is fine
    edit(data)
    with pytest.raises(InvalidGraphError, match=why):
        load_spec(json.dumps(data))
    bad = GraphSpec.from_json(json.dumps(data))
    inputs = make_inputs(bad)
    with pytest.raises(RuntimeError):  # and eager does refuse it
        out = build_callable(bad)(*inputs)
        torch.autograd.grad(out[0].sum(), [x for x in inputs if x.requires_grad])


def test_a_backward_graph_writes_into_copies_and_keeps_its_gradients():
    spec = validate_spec(_through_a_view(backward=True, clone=True))
    assert "v4 = v1.clone().mul_(v3)" in render_repro(spec, device="cpu", config=CompileConfig(), title="t")
    verdict = execute_case(spec, "cpu", CompileConfig(backend="aot_eager"))
    names = [o.name for o in verdict.outputs]
    assert names == ["v5", "grad:x0", "grad:x1"] and verdict.status.value == "ok"


def test_a_compiler_that_forgets_a_mutation_is_caught_on_the_mutated_input():
    spec = validate_spec(_through_a_view(layout="transposed"))
    verdict = execute_case(spec, "cpu", FORGETS)
    outputs = {o.name: o for o in verdict.outputs}
    assert not outputs["v5"].differs  # what it returns is right
    assert outputs["mutated:x0"].differs
    reason = severity_of(verdict)
    assert reason.severity is Severity.BUG and reason.output == "mutated:x0"
    assert execute_case(spec, "cpu", CompileConfig(backend="eager")).status.value == "ok"


def _run_repro(text: str) -> int:
    module = types.ModuleType("divfuzz_mutation_repro")
    sys.modules[module.__name__] = module
    argv = sys.argv
    try:
        sys.argv = ["repro.py"]
        exec(compile(text, "repro.py", "exec"), module.__dict__)  # our own generated code, in a test
        return module.main()
    finally:
        sys.argv = argv
        del sys.modules[module.__name__]


def test_repro_shows_the_in_place_op_and_judges_the_mutated_input():
    spec = validate_spec(_through_a_view())
    text = render_repro(spec, device="cpu", config=FORGETS, title="t")
    assert "v4 = v1.mul_(v3)" in text and "MUTATED = ['x0']" in text
    assert _run_repro(text) == 1
    assert _run_repro(render_repro(spec, device="cpu", config=CompileConfig(backend="eager"), title="t")) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None, phases=[Phase.generate])
@given(graph_specs(max_ops=6, ops=tuple(MUTATION_OPS + VIEW_OPS) + ("exp", "add", "sum")))
def test_drawn_graphs_of_in_place_ops_and_views_run_eagerly_alike_each_time(spec):
    validate_spec(spec)
    inputs = make_inputs(spec)
    first, cots = run_forward_backward(spec, build_callable(spec), inputs)
    second, _ = run_forward_backward(spec, build_callable(spec), inputs, cots)
    assert all(bitwise_equal(a, b) for (_, a), (_, b) in zip(first, second))
    reference, _ = run_forward_backward(spec, build_reference(spec), reference_inputs(inputs),
                                        [c.double() if c is not None else None for c in cots])
    assert [n for n, _ in reference] == [n for n, _ in first]
    assert {n for n, _ in first} >= {f"mutated:{x}" for x in mutated_inputs(spec)}


def test_issue_py_of_a_forgotten_mutation_fails_while_the_planted_bug_is_there():
    spec = validate_spec(_through_a_view())
    verdict = execute_case(spec, "cpu", FORGETS)
    script = render_issue_script(spec, device="cpu", config=FORGETS, reason=severity_of(verdict), verdict=verdict)
    assert script is not None and "v4 = v1.mul_(v3)" in script.text and "torch.empty_strided(x0.shape, x0.stride()" in script.text
    with pytest.raises(AssertionError):
        exec(compile(script.text, "issue.py", "exec"), {"__name__": "issue"})  # our own generated code, in a test
    fixed = script.text.replace("backend=backend", "backend='eager'")
    exec(compile(fixed, "issue.py", "exec"), {"__name__": "issue"})


def test_issue_py_hands_each_run_its_own_copy_of_an_input_the_graph_writes_into():
    """The judged output is read before the write (exp(x0), then x0 *= 2): if eager's run wrote into
    the script's one x0, the compiled run and the fp64 reference would start from the doubled values
    and the script would fail under any backend. Found on the H200 (seed 6060, div+amax+mul_scalar_)."""
    spec = validate_spec(GraphSpec(
        inputs=(TensorSpec("x0", S, "float32"),),
        nodes=(Node("v1", "exp", ("x0",), (), "float32", S),
               Node("v2", "mul_scalar_", ("x0",), (("clone", False), ("scalar", 2.0)), "float32", S)),
        outputs=("v1", "v2")))
    assert mutated_inputs(spec) == ("x0",)
    drift = CompileConfig(backend="divfuzz.fuzzer.engine.planted:drift")
    verdict = execute_case(spec, "cpu", drift)
    reason = severity_of(verdict)
    assert reason.severity is Severity.BUG and reason.output == "v1", reason
    script = render_issue_script(spec, device="cpu", config=drift, reason=reason, verdict=verdict)
    assert script is not None and "model(x0.clone())" in script.text
    with pytest.raises(AssertionError):
        exec(compile(script.text, "issue.py", "exec"), {"__name__": "issue"})  # our own generated code, in a test
    exec(compile(script.text.replace("backend=backend", "backend='eager'"), "issue.py", "exec"), {"__name__": "issue"})
