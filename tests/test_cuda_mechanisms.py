"""The mechanisms the public record decides per device, on CUDA (marked `gpu`: skipped without one).

- A floor division whose quotient is subnormal inside the op (the smallest normals divided by 3):
  the kernel flushes the quotient to zero and floors -0.0 where eager gives -1. The flush decides
  an integer, which the record does not settle (PR 185878 calls the flush intended): suspect,
  explained by subnormal-flush, never a new bug.
- float16 x // 7.0 at exact multiples of 7 (-182 // 7): an approximate division floors one below;
  a bug, explained by approximate-division and known as pytorch#177740 (PR 177926).
"""

from __future__ import annotations

import pytest
import torch

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.known_bugs import RootCausePattern, default_known_bugs
from divfuzz.records.severity import Severity

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _floor_division(dtype: str, divisor: float, recipe: str) -> GraphSpec:
    """x // divisor on an input of `dtype` (its values rounded to it when made, so that eager's
    operands are fp64's and the reference is exact)."""
    shape = (8, 64)
    spec = GraphSpec(inputs=(TensorSpec("x0", shape, dtype),),
                     nodes=(Node("v1", "div", ("x0",), (("divisor", divisor), ("mode", "floor")), dtype, shape),),
                     outputs=("v1",), recipe=InputRecipe(recipe, 0), backward=False)
    validate_spec(spec)
    return spec


def test_a_floor_division_whose_quotient_is_subnormal_is_the_flush_and_no_bug():
    verdict = execute_case(_floor_division("float32", 3.0, "subnormal"), "cuda", CompileConfig())
    reason = severity_of(verdict)
    assert reason is None or reason.severity is not Severity.BUG, (reason, verdict.explanation)
    if reason is not None and reason.rule == "int-valued-wrong":
        assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", verdict


def test_an_approximate_floor_division_is_a_known_bug_by_its_mechanism():
    verdict = execute_case(_floor_division("float16", 7.0, "decimal_grid"), "cuda", CompileConfig())
    reason = severity_of(verdict)
    if reason is None:
        pytest.skip("this torch divides exactly (PR 177926 is in it)")
    assert reason.severity is Severity.BUG and verdict.explanation is not None, (reason, verdict)
    assert verdict.explanation.mechanism == "approximate-division", verdict.explanation
    pattern = RootCausePattern(("div",), frozenset({"float16"}), False, reason.rule, device_type="cuda",
                               mechanism="approximate-division")
    assert default_known_bugs().match(pattern).bug.issue == 177740
