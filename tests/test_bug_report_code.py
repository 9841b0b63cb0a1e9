"""report.md's minimal code runs the case as the campaign ran it: a case with a backward pass shows
each input's gradient under the output gradients divfuzz drew, not only the forward."""

from __future__ import annotations

import re

import torch

from divfuzz.fuzzer.engine.graph_run import run_forward_backward
from divfuzz.generators.build import build_callable, make_inputs
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.reports.bug_report import render_bug_report


def _minimal_code(spec: GraphSpec) -> str:
    text = render_bug_report(spec, title="t", reason=None, culprit={"summary": "s"}, versions={"torch": "x"}, device="cpu",
                             config_desc="inductor", verdict=None)
    (block,) = re.findall(r"## Minimal code\n\n```python\n(.*?)\n```", text, flags=re.S)
    return block


def test_a_backward_case_s_minimal_code_runs_the_gradients_divfuzz_compared(capsys):
    # Two outputs that require grad, an input that does not: the output gradients are drawn in
    # output order from one generator, and only x0 gets a gradient.
    spec = GraphSpec(
        inputs=(TensorSpec("x0", (4, 8), "float32", requires_grad=True), TensorSpec("x1", (4, 8), "float32")),
        nodes=(Node("v1", "tanh", ("x0",), (), "float32", (4, 8)),
               Node("v2", "sigmoid", ("v1",), (), "float32", (4, 8))),
        outputs=("v1", "v2"), recipe=InputRecipe("normal", 5), backward=True)
    namespace: dict = {}
    exec(compile(_minimal_code(spec), "report.md", "exec"), namespace)  # real torch.compile (Inductor, CPU)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and all(line.endswith("elements differ") for line in printed), printed  # v1, v2, x0's gradient

    # divfuzz's own eager run of the case: the same outputs and the same gradient, bit for bit.
    named, _ = run_forward_backward(spec, build_callable(spec, "cpu"), make_inputs(spec, "cpu"))
    assert [name for name, _ in named] == ["v1", "v2", "grad:x0"]
    for (name, expected), shown in zip(named, namespace["eager"], strict=True):
        assert torch.equal(expected, shown), name


def test_a_forward_case_s_minimal_code_runs_under_no_grad():
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32"),),
                     nodes=(Node("v1", "tanh", ("x0",), (), "float32", (4, 8)),), outputs=("v1",))
    code = _minimal_code(spec)
    assert "with torch.no_grad():" in code and "autograd" not in code


def test_a_backward_case_with_no_input_that_requires_grad_runs_its_forward_alone(capsys):
    # divfuzz asks for no gradient when no input takes part (`run_forward_backward`); neither may the code.
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32"),),
                     nodes=(Node("v1", "tanh", ("x0",), (), "float32", (4, 8)),), outputs=("v1",), backward=True)
    namespace: dict = {}
    exec(compile(_minimal_code(spec), "report.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].endswith("of 32 elements differ"), printed  # the bits are the CPU's
    assert len(namespace["eager"]) == 1
