"""A value-selecting op that returns the other of two signed zeros (`signed-zero-selection`): a bug
on CUDA (PR 186933 fixed issue 185610's torch.minimum), suspect on the CPU, where the fix is open and
CPU eager is itself inconsistent (PR 194472); a zero whose sign arithmetic made is no selection's."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.mechanisms import mechanism_severity
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.oracles.signed_zero_selection import selected_zeros
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity

Z = torch.tensor([-0.0, 0.0, -0.0, 0.0])


def test_only_zeros_whose_operands_offer_both_signs_are_counted():
    eager, compiled = torch.tensor([-0.0, -0.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 0.0, 1.0])
    offered = [torch.tensor([-0.0, -0.0, 0.0, 1.0]), torch.tensor([0.0, -0.0, 0.0, 2.0])]
    assert selected_zeros("minimum", offered, eager, compiled) == (2, 1)  # the second pair is -0 and -0
    assert selected_zeros("mul", offered, eager, compiled) == (0, 0)  # arithmetic selects nothing
    assert selected_zeros("amax", [Z], torch.tensor([0.0]), torch.tensor([-0.0])) == (1, 1)
    assert selected_zeros("amax", [Z.abs()], torch.tensor([0.0]), torch.tensor([-0.0])) == (1, 0)


def test_the_record_makes_it_a_bug_on_cuda_and_a_suspect_on_the_cpu():
    assert mechanism_severity("signed-zero-selection", "zero-sign-wrong", "cuda") is Severity.BUG
    assert mechanism_severity("signed-zero-selection", "zero-sign-wrong", "cpu") is Severity.SUSPECT
    assert mechanism_severity("signed-zero-selection", "compile-error", "cuda") is None  # never a failure's


def _binary(op: str, shape: tuple) -> GraphSpec:
    spec = GraphSpec(inputs=(TensorSpec("x0", shape, "float32"), TensorSpec("x1", shape, "float32")),
                     nodes=(Node("v1", op, ("x0", "x1"), (), "float32", shape),),
                     outputs=("v1",), recipe=InputRecipe("signed_zeros", 0), backward=False)
    validate_spec(spec)
    return spec


@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_a_campaign_graph_selecting_between_signed_zeros_is_explained_under_the_real_inductor(op):
    # seven elements: the CPU lowering's scalar tail selects by a < b (a vector's lanes do not)
    verdict = execute_case(_binary(op, (7,)), "cpu", CompileConfig())
    reason = severity_of(verdict)
    if reason is None:
        pytest.skip("this torch's CPU lowering keeps IEEE signed zeros (PR 194472 in it)")
    assert reason.rule == "zero-sign-wrong" and reason.severity is Severity.SUSPECT, reason
    assert verdict.explanation is not None and verdict.explanation.mechanism == "signed-zero-selection", verdict


def test_the_module_path_names_the_same_mechanism(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", "tests/modules/signed_zero_selection.py:minimum_of_zeros",
                                       "--device", "cpu", "--budget", "60s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    if result.output.splitlines()[-1] == "headline: none":
        pytest.skip("this torch's CPU lowering keeps IEEE signed zeros")
    assert "explained by signed-zero-selection" in result.output, result.output
    assert result.output.splitlines()[-1] == "headline: suspect", result.output
    causes = [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]
    assert causes and causes[0]["severity"]["rule"] == "zero-sign-wrong", causes


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_on_cuda_a_selection_between_signed_zeros_is_a_bug(op):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    verdict = execute_case(_binary(op, (8, 64)), "cuda", CompileConfig())
    reason = severity_of(verdict)
    if reason is None:
        pytest.skip("this torch selects IEEE signed zeros (PR 186933 in it)")
    assert reason.severity is Severity.BUG and verdict.explanation.mechanism == "signed-zero-selection", (reason, verdict)
