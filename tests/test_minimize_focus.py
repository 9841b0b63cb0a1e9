"""The minimizer's first step keeps only what the finding's output needs (issue 52), and an index
pattern that a plainer one equals is rewritten to it (issue 57): the surgery and the step on
pure predicates (fast), then planted bugs on two independent branches, run in a worker."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.fuzzer.triage.analysis import ISSUE_MAX_LINES, analyze_finding
from divfuzz.fuzzer.triage.shrink import FOCUS_PASS, case_predicate, minimize_spec, pass_simplify_index
from divfuzz.generators.build import op_function
from divfuzz.generators.ops import _INDEX_PATTERN, INDEX_PATTERN_SIMPLICITY, INDEX_PATTERNS, index_values
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.surgery import outputs_needed_by, pruned_to_output, rebuild_spec
from divfuzz.records.config import CompileConfig
from divfuzz.reports.markdown import minimized_words

ROWS, DIM = 8, 16


def two_branches(*, backward: bool = False, joined: bool = False) -> GraphSpec:
    """tanh -> sigmoid on a float32 x0 and relu -> gelu on a bfloat16 x1, two outputs that share
    no op; `joined` adds a third output, x0's branch times x1 cast to float32."""
    nodes = [Node("v1", "tanh", ("x0",), (), "float32", (ROWS, DIM)),
             Node("v2", "sigmoid", ("v1",), (), "float32", (ROWS, DIM)),
             Node("v3", "relu", ("x1",), (), "bfloat16", (ROWS, DIM)),
             Node("v4", "gelu", ("v3",), (), "bfloat16", (ROWS, DIM))]
    outputs = ["v2", "v4"]
    if joined:
        nodes += [Node("v5", "cast", ("x1",), (("to", "float32"),), "float32", (ROWS, DIM)),
                  Node("v6", "mul", ("v1", "v5"), (), "float32", (ROWS, DIM))]
        outputs.append("v6")
    spec = rebuild_spec(GraphSpec(
        inputs=(TensorSpec("x0", (ROWS, DIM), "float32", requires_grad=backward),
                TensorSpec("x1", (ROWS, DIM), "bfloat16", requires_grad=backward)),
        nodes=tuple(nodes), outputs=tuple(outputs), backward=backward, recipe=InputRecipe("normal", 3)))
    assert spec is not None
    return spec


# ---- the surgery --------------------------------------------------------------------------------


def test_a_forward_output_keeps_only_its_own_ops_and_input_and_no_backward():
    spec = two_branches(backward=True)
    pruned = pruned_to_output(spec, "v4", keep_backward=False)
    assert pruned.op_names == ("relu", "gelu") and pruned.outputs == ("v4",)
    assert [t.name for t in pruned.inputs] == ["x1"] and not pruned.backward
    assert not any(t.requires_grad for t in pruned.inputs)
    kept = pruned_to_output(spec, "v4", keep_backward=True)
    assert kept.backward and [t.requires_grad for t in kept.inputs] == [True]


def test_a_gradient_keeps_every_output_its_input_reaches_and_drops_the_other_gradients():
    spec = two_branches(backward=True, joined=True)
    assert outputs_needed_by(spec, "grad:x1") == ("v4", "v6")
    assert outputs_needed_by(spec, "grad:x0") == ("v2", "v6")
    pruned = pruned_to_output(spec, "grad:x1", keep_backward=True, other_gradients=False)
    assert pruned.outputs == ("v4", "v6") and "sigmoid" not in pruned.op_names
    assert pruned.backward and {t.name: t.requires_grad for t in pruned.inputs} == {"x0": False, "x1": True}
    # A later edit's rebuild keeps the dropped gradient dropped.
    assert {t.name: t.requires_grad for t in rebuild_spec(pruned).inputs} == {"x0": False, "x1": True}


def test_an_output_the_spec_lacks_prunes_nothing():
    spec = two_branches()
    assert outputs_needed_by(spec, "-") == () and pruned_to_output(spec, "-", keep_backward=False) is None


# ---- the step, on pure predicates ---------------------------------------------------------------


def test_the_first_step_prunes_to_the_findings_output():
    result = minimize_spec(two_branches(backward=True), lambda s: "gelu" in s.op_names, budget_s=30, output="v4")
    assert result.passes[0] == (FOCUS_PASS, 1), result.passes
    assert result.spec.op_names == ("gelu",) and result.spec.outputs == ("v4",)
    assert result.focus.startswith("kept only what output v4 needs: 4 -> 2 ops, 2 -> 1 outputs, backward dropped"), result.focus
    assert "kept only what output v4 needs" in result.to_dict()["focus"] and result.focus in result.describe()


def test_a_pruned_graph_that_loses_the_finding_falls_back_and_says_why():
    # The "finding" needs both outputs: the pruned graph is judged, loses it, and is not taken.
    both = lambda s: len(s.outputs) == 2 and {"sigmoid", "gelu"} <= set(s.op_names)  # noqa: E731
    result = minimize_spec(two_branches(), both, budget_s=30, output="v4")
    assert FOCUS_PASS not in dict(result.passes) and result.spec.outputs == ("v2", "v4")
    assert "lost the finding" in result.focus, result.focus


def test_the_gradient_prune_tries_with_the_other_gradients_when_it_needs_them():
    spec = two_branches(backward=True, joined=True)
    needs_x0_grad = lambda s: s.backward and any(t.name == "x0" and t.requires_grad for t in s.inputs)  # noqa: E731
    result = minimize_spec(spec, lambda s: needs_x0_grad(s) and "gelu" in s.op_names, budget_s=30, output="grad:x1")
    assert result.passes[0] == (FOCUS_PASS, 1) and "sigmoid" not in result.spec.op_names
    assert "gradients" not in result.focus and "3 -> 2 outputs" in result.focus, result.focus


# ---- index patterns -----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", INDEX_PATTERNS)
def test_index_values_are_what_each_patterns_template_computes(pattern):
    assert set(INDEX_PATTERN_SIMPLICITY) == set(INDEX_PATTERNS)
    for n, m in ((1, 1), (3, 1), (5, 2), (8, 3), (16, 16)):
        template = eval(_INDEX_PATTERN[pattern].format(n=n, m=m, dev="'cpu'"), {"torch": torch})  # our own template
        extent = "gather"  # gather's pattern takes n = size and m = the input's last dim
        assert index_values(extent, {"pattern": pattern, "size": n}, (2, m)) == tuple(template.tolist()), (n, m)


@pytest.mark.parametrize("op", ["gather", "index_select", "scatter_add", "index_add"])
def test_index_values_follow_each_ops_own_extents(op):
    rows, width, size = 6, 5, 3
    for pattern in INDEX_PATTERNS:
        params = {"pattern": pattern, "size": size}
        values = index_values(op, params, (rows, width))
        fn = op_function(get_op(op), 1, params)
        if op in ("gather", "index_select"):  # the input holds its own column numbers: the output is the index
            got = fn(None, torch.arange(width, dtype=torch.float32).expand(rows, width))[0].tolist()
            assert tuple(int(v) for v in got) == values, pattern
        else:  # ones accumulated: each slot counts how often the index names it
            x = torch.ones(rows, width)
            got = fn(None, x)
            counts = got[0] if op == "scatter_add" else got[:, 0]
            assert tuple(int(c) for c in counts.tolist()) == tuple(Counter(values)[k] for k in range(size)), pattern


def _scatter(size: int, pattern: str) -> GraphSpec:
    spec = rebuild_spec(GraphSpec(
        inputs=(TensorSpec("x0", (4, 8), "float32"),),
        nodes=(Node("v1", "scatter_add", ("x0",), (("pattern", pattern), ("size", size)), "float32", (4, size)),),
        outputs=("v1",)))
    assert spec is not None
    return spec


def test_a_trivially_constant_index_is_rewritten_to_the_constant_pattern():
    spec = _scatter(1, "strided")  # (arange * 5 + 3) % 1: every index is 0
    assert "* 5 + 3) % 1" in get_op("scatter_add").code(["x0"], spec.nodes[0].kwargs)
    [cand] = list(pass_simplify_index(spec))
    assert cand.nodes[0].kwargs["pattern"] == "constant"
    result = minimize_spec(spec, lambda s: "scatter_add" in s.op_names, budget_s=30)
    assert result.spec.nodes[0].kwargs["pattern"] == "constant" and "simplify_index" in dict(result.passes)
    # A pattern no plainer one equals is left alone (strided into 3 slots: 3, 2, 1, 0, ...).
    assert list(pass_simplify_index(_scatter(3, "strided"))) == []
    assert list(pass_simplify_index(_scatter(1, "constant"))) == []


# ---- planted bugs in a worker -------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker():
    w = Worker("cpu")
    yield w
    w.stop()


@pytest.mark.parametrize("backend, branch", [
    ("divfuzz.fuzzer.engine.planted:ulp_bump", ("v4", {"relu", "gelu"}, "x1")),   # the first bfloat16 output
    ("divfuzz.fuzzer.engine.planted:nan_first", ("v2", {"tanh", "sigmoid"}, "x0")),  # the first floating output
])
def test_a_planted_bug_on_one_branch_minimizes_to_that_branchs_ops(worker, backend, branch):
    output, ops, source = branch
    spec = two_branches()
    config = CompileConfig(backend=backend)
    judged = judge(worker.run(CaseRequest(spec, "cpu", config), 120), strict=False)
    reason = judged.reason
    assert judged.finding is not None and reason.output == output, reason
    pred = case_predicate(worker, device="cpu", config=config, kind=judged.finding.kind.value, timeout_s=120,
                          severity=reason.severity.value, rule=reason.rule, output=reason.output,
                          mechanism=judged.mechanism)
    result = minimize_spec(spec, pred, budget_s=60, output=reason.output)
    assert result.passes[0] == (FOCUS_PASS, 1), result.describe()
    assert set(result.spec.op_names) <= ops and [t.name for t in result.spec.inputs] == [source], result.spec.to_json()
    # The pruned and shrunk graph keeps the finding's rule and severity, judged as the input was.
    kept = judge(worker.run(CaseRequest(result.spec, "cpu", config), 120)).reason
    assert (kept.rule, kept.severity, kept.output) == (reason.rule, reason.severity, reason.output)


def test_an_analysis_minimizes_to_the_findings_output(worker):
    spec = two_branches()
    config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:nan_first")
    verdict = worker.run(CaseRequest(spec, "cpu", config), 120)
    kind = judge(verdict).finding.kind.value
    analysis = analyze_finding(spec, worker=worker, device="cpu", config=config, kind=kind, budget_s=60, timeout_s=120,
                               case_verdict=verdict)
    assert analysis.minimized is not None and analysis.minimized.focus.startswith("kept only what output v2 needs"), analysis.notes()
    assert set(analysis.spec.op_names) <= {"tanh", "sigmoid"}
    # The bug's issue.py fits, and the record says how long it is; a longer one says why.
    assert analysis.issue_lines is not None and analysis.issue_lines <= ISSUE_MAX_LINES, analysis.issue_lines
    # ... and its issue.py ran in a fresh process under torch's defaults, in the analysis's own time
    # (the campaign's filing writes the folder from this, running nothing itself)
    check = analysis.issue_check
    assert check is not None and check.defaults.outcome.value == "still fails" and check.kept == (), check
    record = analysis.to_dict()["minimized"]
    assert record["issue_lines"] == analysis.issue_lines and "why_long" not in record
    long = replace(analysis, issue_lines=ISSUE_MAX_LINES + 4)
    assert long.why_long().startswith(f"issue.py runs {ISSUE_MAX_LINES + 4} lines (over {ISSUE_MAX_LINES}): ")
    assert long.to_dict()["minimized"]["why_long"] == long.why_long() and long.why_long() in long.notes()


def test_the_reports_minimized_cell_says_why_where_there_is_no_minimized_graph():
    assert minimized_words({"spec": {}, "note": "not minimized: a hang finding costs a whole timeout per candidate"}) == (
        "not minimized: a hang finding costs a whole timeout per candidate")
    record = {"ops_before": 9, "ops_after": 5, "wall_s": 12.0}
    assert minimized_words(record) == "9 → 5 ops, 12 s"
    assert minimized_words(record | {"why_long": "issue.py runs 34 lines (over 30): x"}) == (
        "9 → 5 ops, 12 s; issue.py runs 34 lines (over 30): x")
    assert minimized_words({"spec": {}}) == "" and minimized_words(None) == ""


def test_a_type_change_is_kept_as_that_change_by_the_minimizer():
    """The finding is a float16 output that comes back float32 (`wrong_dtype`); a candidate whose
    output changes otherwise (a shape, another dtype pair) does not keep it (issue 50: a dtype change
    reduced to an int64 change, whose repro exited 0)."""
    from divfuzz.fuzzer.triage.shrink import type_change
    from divfuzz.records.verdict import OutputVerdict, Verdict
    from divfuzz.records.outcomes import Status

    def verdict(mismatch):
        return Verdict(status=Status.DIVERGED, outputs=(OutputVerdict("v1", mismatch=mismatch),))

    assert type_change(verdict("float16 [4, 8] eager, float32 [4, 8] compiled"), "v1") == "dtype float16 -> float32"
    assert type_change(verdict("int64 [4] eager, float32 [4] compiled"), "v1") == "dtype int64 -> float32"
    assert type_change(verdict("float16 [4, 8] eager, float16 [8] compiled"), "v1") == "shape"
    assert type_change(verdict("float16 [4, 8] eager, missing in compiled"), "v1") == "missing"
    assert type_change(verdict(None), "v1") is None and type_change(verdict("x"), "other") is None

    spec = GraphSpec(inputs=(TensorSpec("x0", (ROWS, DIM), "float32"),),
                     nodes=(Node("v1", "cast", ("x0",), (("to", "float16"),), "float16", (ROWS, DIM)),
                            Node("v2", "sigmoid", ("v1",), (), "float16", (ROWS, DIM))),
                     outputs=("v2",), recipe=InputRecipe("normal", 0), backward=False)
    worker = Worker("cpu")
    try:
        config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:wrong_dtype")
        own = worker.run(CaseRequest(spec, "cpu", config), 120)
        changed = type_change(own, "v2")
        assert changed == "dtype float16 -> float32", own
        keeps = case_predicate(worker, device="cpu", config=config, kind="type-mismatch", rule="output-type-mismatch",
                               output="v2", type_changed=changed)
        other = case_predicate(worker, device="cpu", config=config, kind="type-mismatch", rule="output-type-mismatch",
                               output="v2", type_changed="dtype int64 -> float32")
        assert keeps(spec) and not other(spec)
    finally:
        worker.stop()
