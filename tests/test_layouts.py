"""Input layouts (`divfuzz.generators.layouts`): part of a spec, seen alike by eager, compiled and
the fp64 reference, printed by repro.py and issue.py; output strides judged beside the values;
a planted compiler that ignores strides is caught on every layout that has them."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.build import make_inputs, reference_inputs
from divfuzz.generators.features import program_features
from divfuzz.generators.layouts import CONTIGUOUS, LAYOUTS, STORAGE_OFFSET, layout_problem
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import load_spec, validate_spec
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import SpecError
from divfuzz.records.severity import Severity
from divfuzz.reports.issue_inputs import input_lines
from divfuzz.reports.repro import render_repro

PLANTED = "divfuzz.fuzzer.engine.planted:"
SHAPES = {2: (8, 6), 3: (4, 3, 10), 4: (2, 3, 4, 5)}


def _exp(layout: str, rank: int = 2, backend: str = "inductor") -> GraphSpec:
    shape = SHAPES[rank]
    return validate_spec(GraphSpec(inputs=(TensorSpec("x0", shape, "float32", layout=layout),),
                                   nodes=(Node("v1", "exp", ("x0",), (), "float32", shape),), outputs=("v1",)))


def _fitting(layout: str) -> int:
    return next(rank for rank in (2, 3, 4) if layout_problem(layout, SHAPES[rank]) is None)


def test_a_spec_without_layouts_is_written_as_before_and_loads_unchanged():
    spec = _exp(CONTIGUOUS)
    data = spec.to_dict()
    assert data["schema_version"] == 1 and "layout" not in data["inputs"][0]
    # a stored spec of before: no layout key anywhere
    assert load_spec(json.dumps(data)) == spec and load_spec(json.dumps(data)).inputs[0].layout == CONTIGUOUS
    laid_out = _exp("transposed")
    assert laid_out.to_dict()["schema_version"] == 2 and laid_out.to_dict()["inputs"][0]["layout"] == "transposed"
    assert laid_out.digest() != spec.digest()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(graph_specs(max_ops=4), st.data())
def test_any_laid_out_spec_round_trips_through_json_and_validates(spec, data):
    inputs = tuple(t if t.init != "data" else
                   TensorSpec(t.name, t.shape, t.dtype, t.requires_grad, t.init,
                              data.draw(st.sampled_from([n for n in LAYOUTS if layout_problem(n, t.shape) is None])))
                   for t in spec.inputs)
    spec = GraphSpec(inputs, spec.nodes, spec.outputs, spec.recipe, spec.autocast, spec.backward)
    try:
        spec = validate_spec(spec)
    except SpecError:  # an input that also serves as a node's mutated argument refuses an overlapping layout
        return
    assert GraphSpec.from_json(spec.to_json()) == spec
    assert load_spec(spec.to_json()) == spec


def test_a_layout_outside_the_vocabulary_or_its_shape_is_refused():
    data = _exp(CONTIGUOUS).to_dict()
    data["inputs"][0]["layout"] = "diagonal"
    with pytest.raises(SpecError, match="inputs\\[0\\].layout"):
        load_spec(json.dumps(data))
    data["inputs"][0]["layout"] = "channels_last"  # a 2-D input
    with pytest.raises(SpecError, match="needs a 4-D shape"):
        load_spec(json.dumps(data))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_inputs_and_their_fp64_copies_are_laid_out_alike(layout):
    spec = _exp(layout, _fitting(layout))
    [x] = make_inputs(spec)
    [r] = reference_inputs([x])
    assert r.dtype == torch.float64 and r.stride() == x.stride() and r.storage_offset() == x.storage_offset()
    assert torch.equal(r, x.double())
    if layout == "offset":
        assert x.storage_offset() == STORAGE_OFFSET and x.is_contiguous()
    elif layout == "expanded":
        assert x.stride(0) == 0
    else:
        assert not x.is_contiguous()
    if layout in ("strided", "offset"):  # the bytes between or before the elements are NaN
        storage = torch.as_strided(x, (x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
        assert int(storage.isnan().sum()) == storage.numel() - x.numel()
    assert program_features(spec) == {"layout"}


def test_an_output_of_other_strides_is_data_of_its_own_kind_and_never_a_bug():
    e = torch.randn(6, 8)
    c = e.t().contiguous().t()
    [out] = judge_outputs([("v1", e)], [("v1", c)], [("v1", e.double())])
    assert out.strides == "(8, 1) eager, (1, 6) compiled" and out.float_cmp.n_diff == 0
    verdict = verdict_of([out])
    assert verdict.status.value == "diverged"
    assert finding_of(verdict).kind.value == "stride-mismatch"
    reason = severity_of(verdict)
    assert reason.severity is Severity.SUSPECT and reason.rule == "stride-mismatch", reason  # its own rule, never a bug
    # a size-1 dim's stride means nothing; a gradient's strides are no promise
    row = torch.randn(1, 8)
    assert judge_outputs([("v1", row)], [("v1", row.reshape(8, 1).t())], None)[0].strides is None
    assert judge_outputs([("grad:x0", e)], [("grad:x0", c)], None)[0].strides is None


@pytest.mark.parametrize("layout", ["transposed", "permuted", "strided", "expanded", "channels_last", "offset"])
def test_a_compiler_that_ignores_strides_is_caught_on_every_layout(layout):
    spec = _exp(layout, _fitting(layout))
    verdict = execute_case(spec, "cpu", CompileConfig(backend=PLANTED + "ignores_strides"))
    assert severity_of(verdict).severity is Severity.BUG, verdict
    assert execute_case(spec, "cpu", CompileConfig(backend="eager")).status.value == "ok"


def _run_repro(text: str) -> int:
    module = types.ModuleType("divfuzz_layout_repro")
    sys.modules[module.__name__] = module
    argv = sys.argv
    try:
        sys.argv = ["repro.py"]
        exec(compile(text, "repro.py", "exec"), module.__dict__)  # our own generated code, in a test
        return module.main()
    finally:
        sys.argv = argv
        del sys.modules[module.__name__]


def test_repro_and_issue_inputs_show_the_layout_and_repro_fails_while_the_planted_bug_is_there():
    spec = _exp("transposed")
    bad = CompileConfig(backend=PLANTED + "ignores_strides")
    text = render_repro(spec, device="cpu", config=bad, title="t")
    assert "x0 = x0.t().contiguous().t()  # layout: transposed" in text
    assert _run_repro(text) == 1
    assert _run_repro(render_repro(spec, device="cpu", config=CompileConfig(backend="eager"), title="t")) == 0
    lines = input_lines(_exp("offset"), "cpu").lines
    assert any("as_strided" in line for line in lines)
    namespace: dict = {"torch": torch}
    exec("\n".join(lines), namespace)  # our own generated lines, in a test
    assert torch.equal(namespace["x0"], make_inputs(_exp("offset"))[0]) and namespace["x0"].storage_offset() == STORAGE_OFFSET
