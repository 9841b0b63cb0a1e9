"""Quality tests of the judgement through the campaign path: a spec, executed as a case is
(`divfuzz.fuzzer.engine.execute.execute_case`: eager, compiled, fp64), judged by `severity_of`.

Issue 8's classes, in spec form: an fp32 floor division by a decimal constant, off by 1 under
Inductor, is a `bug` (one real Inductor compile); an E8M0 flip whose pre-image sits next to a
power of two at x near 1 is a boundary flip, not `int-gross` (a planted flip: no Inductor).
"""

from __future__ import annotations

import torch

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.build import make_inputs
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity


def _one_op(op: str, params: dict, out_dtype: str, *, recipe: InputRecipe, shape=(32, 100)) -> GraphSpec:
    return validate_spec(GraphSpec(
        inputs=(TensorSpec("x0", shape, "float32"),),
        nodes=(Node("v1", op, ("x0",), tuple(sorted(params.items())), out_dtype, shape),),
        outputs=("v1",), recipe=recipe,
    ))


def test_fp32_floor_division_by_a_tenth_off_by_one_is_a_bug_through_the_campaign_path():
    # Measured on this CPU (torch 2.13): on 6,400 tenths, x // 0.1 differs on 2,828 elements and
    # eager matches the fp64 floor division on 2,578 of them (e.g. -395.6: eager -3957, Inductor -3956).
    spec = _one_op("div", {"divisor": 0.1, "mode": "floor"}, "float32", recipe=InputRecipe("decimal_grid", 0))
    v = execute_case(spec, "cpu", CompileConfig())
    fc = v.outputs[0].float_cmp
    assert fc is not None and fc.n_diff > 100, v
    reason = severity_of(v)
    assert reason.severity is Severity.BUG, reason
    assert finding_of(v) is not None


def test_the_decimal_grid_recipe_puts_floor_divisions_on_their_jumps():
    """Without the recipe no drawn input sits on x // 0.1's jumps: the campaign could not find the class."""
    x = make_inputs(_one_op("div", {"divisor": 0.1, "mode": "floor"}, "float32", recipe=InputRecipe("decimal_grid", 5)))[0]
    on_jump = (x.double() / 0.1 - torch.round(x.double() / 0.1)).abs() < 1e-2  # fp32 rounding of k * 0.1: at most 1.2e-3 here
    assert on_jump.float().mean() > 0.99


def _seed_with_first_element_near_one() -> int:
    spec = _one_op("e8m0_encode", {"mode": "ceil", "to": "uint8"}, "uint8", recipe=InputRecipe("near_pow2", 0))
    for seed in range(500):
        x0 = make_inputs(spec.with_recipe(InputRecipe("near_pow2", seed)))[0].view(-1)[0].item()
        if abs(abs(x0) - 1.0) < 1e-5 and abs(x0) != 1.0:
            return seed
    raise AssertionError("no near_pow2 seed puts element 0 next to 1")


def test_e8m0_flip_next_to_a_power_of_two_at_x_near_one_is_a_boundary_flip_through_the_campaign_path():
    seed = _seed_with_first_element_near_one()
    spec = _one_op("e8m0_encode", {"mode": "ceil", "to": "uint8"}, "uint8", recipe=InputRecipe("near_pow2", seed))
    # The planted backend flips element 0 of the uint8 output by one: a last-bit change of log2 at
    # x = 1 +- a few ULPs would do the same. Its pre-image is within a few ULPs of 0.
    v = execute_case(spec, "cpu", CompileConfig(backend="divfuzz.fuzzer.engine.planted:uint8_flip"))
    ic = v.outputs[0].int_cmp
    assert ic.flips == 1 and ic.boundary_flips == 1 and ic.gross_flips == 0, ic
    assert ic.min_boundary_ulps is not None and ic.min_boundary_ulps < 16
    assert finding_of(v).kind.value == "int-boundary"
    reason = severity_of(v)
    assert reason.severity is not Severity.BUG and reason.rule != "int-gross", reason
