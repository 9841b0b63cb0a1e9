"""The mechanisms that explain a bug candidate (`divfuzz.fuzzer.engine.explain`), each proven with
a planted backend that has exactly that behaviour, a planted real defect that the mechanism must
not explain, and the real Inductor on the CPU where it shows no such behaviour."""

from __future__ import annotations

import pytest
from dataclasses import replace
import torch

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.build import LAST_DIM_ORDERS, build_callable, log_depth_scan, make_inputs
from divfuzz.generators.surgery import rebuild_spec
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.oracles.accumulation_range import leaves_range_rows
from divfuzz.oracles.mechanisms import MECHANISMS, mechanism_severity
from divfuzz.oracles.severity_policy import key_severity, severity_of
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity

PLANTED = "divfuzz.fuzzer.engine.planted:"


def _unary(op: str, recipe: str, seed: int = 3, *, backward: bool = True, params=(), out=("float32", (4, 8))) -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32", backward),),
                     nodes=(Node("v1", op, ("x0",), params, out[0], out[1]),), outputs=("v1",),
                     recipe=InputRecipe(recipe, seed), backward=backward)


def _judged(spec: GraphSpec, backend: str):
    verdict = execute_case(spec, "cpu", CompileConfig(backend=backend))
    return verdict, severity_of(verdict)


@pytest.mark.parametrize("op", ["ceil", "rsqrt"])
def test_a_backend_that_flushes_subnormals_is_explained_and_rated_suspect_where_the_flush_decides_an_integer_or_an_inf(op):
    """ceil(1e-40) is 1 and ceil(0) is 0; rsqrt(0) is inf: the flush decides a discrete answer,
    and the record is silent on that (PR 185878 calls the flush itself intended): suspect."""
    verdict, reason = _judged(_unary(op, "subnormal"), PLANTED + "flush_subnormals")
    assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", verdict
    assert reason.rule in ("int-valued-wrong", "nan-inf-new"), reason
    assert reason.severity is Severity.SUSPECT and reason.detail.startswith("explained by subnormal-flush")
    assert MECHANISMS["subnormal-flush"].severity is Severity.BY_DESIGN  # a flushed float value is the default


def test_a_real_defect_beside_flushed_subnormals_stays_a_bug():
    """`flush_and_nan` flushes and also plants a NaN on a normal element: the flush explains the
    flushed values, never the NaN."""
    verdict, reason = _judged(_unary("ceil", "subnormal"), PLANTED + "flush_and_nan")
    assert reason.severity is Severity.BUG and reason.rule == "nan-inf-new"
    assert verdict.explanation is None


def test_real_inductor_on_the_cpu_keeps_subnormals_and_needs_no_explanation():
    verdict, reason = _judged(_unary("ceil", "subnormal"), "inductor")
    assert reason is None and verdict.explanation is None


def test_a_nan_on_an_element_fed_by_an_infinite_input_is_range_edge_and_one_fed_by_a_finite_one_is_a_bug():
    """`nan_first` plants a NaN on element 0. Under the inf_divisors recipe, seed 5 puts -inf in
    x[0, 0] (the element depends on it: range edge) and seed 2 a finite 9.8 while the row holds
    infinities elsewhere (an elementwise op: the NaN depends on no edge value: a bug)."""
    fed, reason = _judged(_unary("exp", "inf_divisors", seed=5, backward=False), PLANTED + "nan_first")
    # exp(-inf) is 0 in eager and fp64; compiled NaN there: explained by the infinite input
    assert fed.explanation is not None and fed.explanation.mechanism == "range-edge", fed
    assert reason.severity is MECHANISMS["range-edge"].severity
    clean, reason = _judged(_unary("exp", "inf_divisors", seed=2, backward=False), PLANTED + "nan_first")
    assert clean.explanation is None and reason.severity is Severity.BUG


def test_a_gradient_taken_through_values_made_nan_by_infinite_inputs_is_range_edge_on_real_inductor():
    """H100 seed 131 (bucket 1314), and the CPU alike: infinities of opposite sign summed by a
    scatter_add make NaN, which a max_pool2d, a one-element log_softmax and a matmul carry to the
    output. Eager's gradient is 0, compiled's NaN on the 12 elements behind the NaN: a gradient
    through undefined values. The dependence run carries NaN backward through the marked values
    (a `torch.where` fill would cut the gradient there and find none of the 12 dependent)."""
    spec = GraphSpec(
        inputs=(TensorSpec("x0", (2, 24), "float16", True), TensorSpec("v8_weight", (1, 8), "float16", True, "fan_in")),
        nodes=(Node("v1", "scatter_add", ("x0",), (("pattern", "cyclic"), ("size", 2)), "float16", (2, 2)),
               Node("v6", "max_pool2d", ("v1",), (("kernel", 2), ("stride", 1)), "float16", (1, 1)),
               Node("v7", "log_softmax", ("v6",), (), "float16", (1, 1)),
               Node("v8", "matmul", ("v7", "v8_weight"), (("out_features", 8),), "float16", (1, 8)),
               Node("v9", "scatter_add", ("v8",), (("pattern", "repeat"), ("size", 1)), "float16", (1, 1))),
        outputs=("v9",), recipe=InputRecipe("inf_divisors", 0), backward=True)
    verdict, reason = _judged(spec, "inductor")
    assert reason is not None and reason.output == "grad:x0" and "NaN/Inf in compiled" in reason.detail, verdict
    assert verdict.explanation is not None and verdict.explanation.mechanism == "range-edge", verdict
    assert reason.severity is MECHANISMS["range-edge"].severity is Severity.SUSPECT


def test_a_reduction_over_a_row_holding_an_infinity_carries_it_to_its_output():
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32"),),
                     nodes=(Node("v1", "sum", ("x0",), (("keepdim", False),), "float32", (4,)),
                            Node("v2", "sigmoid", ("v1",), (), "float32", (4,))),
                     outputs=("v2",), recipe=InputRecipe("inf_divisors", 2))
    verdict, reason = _judged(spec, PLANTED + "nan_first")  # row 0 holds an infinity (seed 2)
    assert verdict.explanation is not None and verdict.explanation.mechanism == "range-edge", verdict


def _max_graph(recipe: str, seed: int = 1) -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32", True),),
                     nodes=(Node("v1", "max_dim", ("x0",), (("keepdim", False),), "float32", (4,)),),
                     outputs=("v1",), recipe=InputRecipe(recipe, seed), backward=True)


def test_a_gradient_split_among_tied_maxima_is_explained_by_the_ties():
    """`split_ties` takes max as amax, whose backward shares the gradient among tied maxima: the
    ties recipe puts every row's maximum at two positions, so the gradient differs there."""
    verdict, reason = _judged(_max_graph("ties"), PLANTED + "split_ties")
    assert reason is not None and reason.output == "grad:x0", verdict
    assert verdict.explanation is not None and verdict.explanation.mechanism == "tie"
    assert reason.severity is Severity.NOISE


def test_ties_never_explain_a_wrong_forward_value_and_distinct_values_need_no_explanation():
    verdict, reason = _judged(_max_graph("ties"), PLANTED + "nan_first")  # a NaN max over tied rows
    assert verdict.explanation is None and reason.severity is Severity.BUG
    verdict, reason = _judged(_max_graph("normal"), PLANTED + "split_ties")  # no ties: amax's gradient is max's
    assert reason is None


def test_the_table_never_explains_a_crash_or_a_type_change_and_keys_carry_the_mechanism():
    assert mechanism_severity("subnormal-flush", "output-type-mismatch") is None
    assert mechanism_severity("range-edge", "compile-error") is None
    assert mechanism_severity("no-such-mechanism", "nan-inf-new") is None
    key = BucketKey("nan-inf", "float32", "cuda", ("rsqrt",), rule="nan-inf-new", mechanism="subnormal-flush")
    assert key_severity(key) is Severity.SUSPECT  # the flush decides an inf: the record is silent there
    assert key_severity(replace(key, rule="float-gross-worse")) is Severity.BY_DESIGN  # a flushed float value: the default
    assert key_severity(BucketKey("nan-inf", "float32", "cuda", ("rsqrt",), rule="nan-inf-new")) is Severity.BUG
    assert key_severity(BucketKey("type-mismatch", "-", "cuda", ("x",), rule="output-type-mismatch",
                                  mechanism="subnormal-flush")) is Severity.BUG


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["ceil", "rsqrt", "floor"])
def test_real_inductor_on_cuda_flushes_subnormals_and_the_flush_explains_it(op):
    """Compiled CUDA kernels flush float32 subnormals to zero by default (PR 185878, issue 125557):
    on subnormal inputs the real Inductor differs from eager, and the flush experiment explains it."""
    spec = _unary(op, "subnormal", backward=False)
    verdict = execute_case(spec, "cuda", CompileConfig(backend="inductor"))
    reason = severity_of(verdict)
    assert reason is not None, verdict  # CUDA's compiled kernels flush the subnormal inputs
    assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", (reason, verdict)
    # The table's answer: a flushed float value is the default; an integer it decides (ceil, floor) is suspect.
    assert reason.severity is mechanism_severity("subnormal-flush", reason.rule, "cuda") is not None, reason
    assert reason.severity is not Severity.BUG


def _cumprod(recipe: str, seed: int) -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (4, 64), "float32", False),),
                     nodes=(Node("v1", "cumprod", ("x0",), (("dtype", None),), "float32", (4, 64)),), outputs=("v1",),
                     recipe=InputRecipe(recipe, seed), backward=False)


def test_a_scan_reassociated_past_the_range_is_range_edge_and_a_nan_on_an_ordinary_row_stays_a_bug():
    """`reassociate_scans` computes cumprod in log-depth order. Under log_uniform seed 18 one row's
    partial products leave float32's range in that order but not in eager's (eager is finite
    everywhere), so the new NaN/Inf there is range-edge arithmetic. `nan_first` puts its NaN on
    row 0, whose partial products stay in range in every order: still a bug."""
    verdict, reason = _judged(_cumprod("log_uniform", 18), PLANTED + "reassociate_scans")
    assert reason is not None and reason.rule == "nan-inf-new", verdict
    assert verdict.explanation is not None and verdict.explanation.mechanism == "range-edge", verdict
    assert "some order of the accumulation" in verdict.explanation.detail
    assert reason.severity is MECHANISMS["range-edge"].severity
    verdict, reason = _judged(_cumprod("log_uniform", 18), PLANTED + "nan_first")
    assert verdict.explanation is None and reason.severity is Severity.BUG


def test_real_inductor_on_the_cpu_keeps_eagers_order_on_that_scan():
    verdict, reason = _judged(_cumprod("log_uniform", 18), "inductor")
    assert reason is None or reason.severity is not Severity.BUG, verdict


def test_which_rows_can_leave_the_range_in_some_order():
    rows = torch.tensor([[1e30, 1e30, 1e-30, 1e-30],   # 1e60 in eager's order itself
                         [1e-30, 1e-30, 1e30, 1e30],   # 1e-60 underflows, then 1e60 overflows: some order hits both
                         [0.0, 1e-30, 1e-30, 2.0],     # the zero makes every prefix zero: nothing to lose
                         [1.5, -2.0, 3.0, 0.5]], dtype=torch.float64)
    assert leaves_range_rows(rows, "prod").tolist() == [True, True, False, False]
    assert leaves_range_rows(torch.full((2, 4), 1e38, dtype=torch.float64), "sum").tolist() == [True, True]
    assert leaves_range_rows(torch.full((2, 4), 1e18, dtype=torch.float64), "sum").tolist() == [False, False]
    assert leaves_range_rows(torch.full((2, 4), 1e19, dtype=torch.float64), "sum_of_squares").tolist() == [True, True]


def test_a_variance_is_excused_only_where_its_centred_squares_leave_the_range():
    """Values near 1e20 with a small spread: their raw squares overflow float32, their squares
    about the mean do not. An algorithm that squares the raw values is not excused (issue 197089
    reports such a var on the CPU as a bug); an RMS norm, which squares raw values by definition, is."""
    rows = 1e20 + torch.arange(8, dtype=torch.float64).reshape(2, 4) * 1e13
    assert leaves_range_rows(rows, "centered_sum_of_squares").tolist() == [False, False]
    assert leaves_range_rows(rows, "sum_of_squares").tolist() == [True, True]
    assert leaves_range_rows(torch.tensor([[1e20, -1e20]], dtype=torch.float64), "centered_sum_of_squares").tolist() == [True]


def _cast_pair(shape=(8, 32)) -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x1", shape, "float32", False),),
                     nodes=(Node("v6", "cast", ("x1",), (("to", "bfloat16"),), "bfloat16", shape),
                            Node("v7", "cast", ("v6",), (("to", "float32"),), "float32", shape)),
                     outputs=("v7",), recipe=InputRecipe("normal", 0), backward=False)


def test_real_inductor_on_the_cpu_drops_an_explicit_cast_and_that_is_intended_by_default_there():
    """torch 2.13's CPU Inductor folds x.to(bfloat16).to(float32) into x (emulate_precision_casts
    restores it). The experiment finds compiled equal to the model without its casts, which the
    record calls intended on the CPU (jansel on issue 183761; PR 185847: "Default-config behavior
    is unchanged"): by-design. On CUDA the record is split (PR 180575 fixed a lost round trip):
    suspect. Where the rounding decides a discrete answer, a bug either way."""
    verdict, reason = _judged(_cast_pair(), "inductor")
    assert verdict.explanation is not None and verdict.explanation.mechanism == "explicit-cast-elided", verdict
    assert verdict.explanation.device_type == "cpu"
    assert reason.rule == "float-gross-worse" and reason.severity is Severity.BY_DESIGN, reason
    key = BucketKey("fp32-ulp", "float32", "cpu", ("cast",), rule=reason.rule, mechanism="explicit-cast-elided")
    assert key_severity(key) is Severity.BY_DESIGN
    assert key_severity(key.with_culprit(CulpritKey("inductor", switch="emulate_precision_casts"))) is Severity.BY_DESIGN
    assert key_severity(replace(key, device_type="cuda")) is Severity.SUSPECT
    assert key_severity(replace(key, rule="int-valued-wrong")) is Severity.BUG


@pytest.mark.parametrize("backend", ["nan_first", "drift"])
def test_a_defect_that_is_not_a_dropped_cast_is_not_called_one(backend):
    verdict, reason = _judged(_cast_pair(), PLANTED + backend)
    assert reason.severity is Severity.BUG and verdict.explanation is None, verdict


def test_a_flush_in_one_kernel_beside_one_without_is_still_explained():
    """`flush_first_output` flushes v1's subnormal input and computes v2 as eager does: judged
    against an eager run flushed everywhere, v2 would read wrong (ceil gives 1, the flushed run 0);
    judged element by element against the run compiled agrees with, only v1's flips are flushed
    ones. Seen on the H100: a ceil flushed while a remainder beside it did not."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32", False), TensorSpec("x1", (4, 8), "float32", False)),
                     nodes=(Node("v1", "ceil", ("x0",), (), "float32", (4, 8)), Node("v2", "ceil", ("x1",), (), "float32", (4, 8))),
                     outputs=("v1", "v2"), recipe=InputRecipe("subnormal", 3), backward=False)
    verdict, reason = _judged(spec, PLANTED + "flush_first_output")
    assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", verdict
    assert reason.severity is MECHANISMS["subnormal-flush"].severity_for(reason.rule)  # a flushed ceil decides an integer: suspect


@pytest.mark.gpu
def test_real_inductor_on_cuda_a_ceil_that_flushes_beside_a_remainder_that_does_not_is_explained():
    """Campaign seed 51 on the H100 (torch 2.11): ceil of subnormal inputs gave 0 (flushed) while
    a remainder of other subnormals beside it kept eager's values; it read as a new bug."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (1, 2), "float32", False), TensorSpec("x1", (1, 480), "float32", False)),
                     nodes=(Node("v5", "remainder", ("x0",), (("divisor", 2.5),), "float32", (1, 2)),
                            Node("v7", "ceil", ("x1",), (), "float32", (1, 480))),
                     outputs=("v5", "v7"), recipe=InputRecipe("subnormal", 0), backward=False)
    verdict = execute_case(spec, "cuda", CompileConfig(backend="inductor"))
    reason = severity_of(verdict)
    assert reason is not None, verdict
    assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", (reason, verdict)


@pytest.mark.gpu
def test_real_inductor_on_cuda_a_square_root_of_a_norms_rounding_noise_is_ill_conditioned():
    """Campaign seed 229 on the H100 (torch 2.11): a layer norm over a constant bfloat16 row is 0
    in eager and fp64, rounding noise in the fused kernel; a linear of it then a square root made
    NaN in compiled, a bug line. Its sign is rounding: the mirrored conditioning draws make the
    fp64 reference NaN on either sign, and the finding is suspect."""
    spec = GraphSpec(
        inputs=(TensorSpec("x0", (1, 6), "bfloat16", False), TensorSpec("x1", (1, 6), "bfloat16", False),
                TensorSpec("v4_weight", (2, 6), "bfloat16", False, "fan_in")),
        nodes=(Node("v1", "layer_norm", ("x1",), (("affine", False), ("eps", 1e-05)), "bfloat16", (1, 6)),
               Node("v3", "where_cmp", ("x0", "v1"), (("against", "scalar"), ("cmp", "eq"), ("threshold", 1.0)), "bfloat16", (1, 6)),
               Node("v4", "linear", ("v3", "v4_weight"), (("bias", False), ("out_features", 2)), "bfloat16", (1, 2)),
               Node("v6", "sqrt", ("v4",), (), "bfloat16", (1, 2))),
        outputs=("v6",), recipe=InputRecipe("near_constant", 0))
    verdict = execute_case(spec, "cuda", CompileConfig(backend="inductor"))
    reason = severity_of(verdict)
    assert reason is not None and "NaN/Inf" in reason.detail, verdict  # the divergence this test is about
    assert reason.severity is Severity.SUSPECT, (reason, verdict)


@pytest.mark.gpu
def test_real_inductor_on_cuda_a_dropped_cast_is_named_and_kept_suspect():
    """On CUDA the record is split (PR 180575 kept x.to(bfloat16).to(float32)'s rounding there,
    jansel calls elision the default): named, and suspect, never a bug."""
    verdict = execute_case(_cast_pair(), "cuda", CompileConfig(backend="inductor"))
    reason = severity_of(verdict)
    if reason is None:
        pytest.skip("this torch keeps x.to(bfloat16).to(float32)'s rounding (PR 180575)")
    assert verdict.explanation is not None and verdict.explanation.mechanism == "explicit-cast-elided", (reason, verdict)
    assert reason.severity is Severity.SUSPECT


def _round_of_sum(seed: int = 3, *, then_abs: bool = True) -> GraphSpec:
    """abs(round(sum(x, -1))) over rows of tenths (`decimal_grid`): row sums land next to .5, where
    the order of the sum decides the rounding. The abs after the round hides the round's own
    pre-image from the judge (only an output's own op has one), so the flips read
    int-valued-wrong and the mechanism has to explain them; without it they are boundary flips."""
    nodes = (Node("v1", "sum", ("x0",), (("keepdim", False),), "float32", (256,)),
             Node("v2", "round", ("v1",), (("decimals", 0),), "float32", (256,)))
    if then_abs:
        nodes += (Node("v3", "abs", ("v2",), (), "float32", (256,)),)
    return GraphSpec(inputs=(TensorSpec("x0", (256, 33), "float32", False),), nodes=nodes,
                     outputs=(nodes[-1].name,), recipe=InputRecipe("decimal_grid", seed), backward=False)


def test_a_sum_taken_in_another_order_is_no_bug_and_a_wrong_value_stays_a_bug():
    """`reversed_sums` sums each row backwards: integer flips, and of the flipped elements eager
    misses fp64 about as often as compiled does (`EAGER_MISS_SHARE`), so the judge alone rates them
    rounding at a boundary, and no experiment runs. `drift` scales the output: no order of the sum
    gives that, and it stays a bug."""
    verdict, reason = _judged(_round_of_sum(), PLANTED + "reversed_sums")
    assert (reason.severity, reason.rule) == (Severity.SUSPECT, "int-valued-boundary"), verdict
    assert "eager misses the fp64 integer" in reason.detail and verdict.explanation is None, verdict
    verdict, reason = _judged(_round_of_sum(), PLANTED + "drift")
    assert reason.severity is Severity.BUG and verdict.explanation is None, verdict


def test_a_rounding_whose_own_input_sits_next_to_the_jump_is_a_boundary_flip_not_a_bug():
    """round(sum) as the output: the judge reads eager's input to the round, within a few ULPs of
    .5 on every flipped row, so the flips are rounding at a boundary before any mechanism runs."""
    verdict, reason = _judged(_round_of_sum(then_abs=False), PLANTED + "reversed_sums")
    assert reason.severity is Severity.SUSPECT and reason.rule == "int-valued-boundary", verdict
    assert verdict.explanation is None
    verdict, reason = _judged(_round_of_sum(then_abs=False), PLANTED + "drift")
    assert reason.severity is Severity.BUG, verdict


@pytest.mark.parametrize("seed", [3, 4])
def test_real_inductor_on_the_cpu_rounds_those_sums_without_a_bug(seed):
    verdict, reason = _judged(_round_of_sum(seed), "inductor")
    assert reason is None or reason.severity is not Severity.BUG, verdict


@pytest.mark.parametrize("op, params, weights", [
    ("layer_norm", (("affine", True), ("eps", 1e-5)), 2), ("rms_norm", (("affine", True), ("eps", 1e-5)), 1),
    ("softmax", (), 0), ("var", (("correction", 1), ("keepdim", True)), 0), ("linear", (("bias", True), ("out_features", 5)), 2),
    ("group_norm", (("affine", True), ("eps", 1e-5), ("groups", 2)), 2),
])
def test_an_order_free_op_in_another_order_computes_the_same_values(op, params, weights):
    """`build_callable(order=...)` permutes an order-free op's reduced dim, in its data and in the
    weights that run along it, and puts a kept dim back: the same values up to rounding (a norm's
    weight left in place, or an output left permuted, would not be)."""
    shape = (6, 4, 16) if op == "group_norm" else (6, 16)
    spec = rebuild_spec(GraphSpec(inputs=(TensorSpec("x0", shape, "float32", False),),
                                  nodes=(Node("v1", op, ("x0",), params, "float32", shape),), outputs=("v1",),
                                  recipe=InputRecipe("normal", 1), backward=False))
    assert len(spec.inputs) == 1 + weights
    inputs = [t + torch.rand_like(t) if i else t for i, t in enumerate(make_inputs(spec))]  # weights far from one
    plain = build_callable(spec)(*inputs)[0]
    for order in LAST_DIM_ORDERS:
        again = build_callable(spec, order=order)(*inputs)[0]
        torch.testing.assert_close(again, plain, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, n", [("float32", 20), ("bfloat16", 48)])
def test_real_inductor_on_cuda_a_remainder_of_subnormal_tensors_is_explained_by_the_flush(dtype, n):
    """Campaign seed 73 on the H100 (torch 2.11): remainder of two subnormal tensors gave NaN in
    compiled where eager was finite. The kernel flushes some operands and not others, so eager
    with everything flushed does not give its bits; the elements depend on subnormals, which the
    default mode leaves to the kernel: subnormal-flush, not a new bug."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (1, n), dtype, False), TensorSpec("x1", (1, n), dtype, False)),
                     nodes=(Node("v8", "remainder_tensor", ("x0", "x1"), (), dtype, (1, n)),),
                     outputs=("v8",), recipe=InputRecipe("subnormal", 0), backward=False)
    verdict = execute_case(spec, "cuda", CompileConfig(backend="inductor"))
    reason = severity_of(verdict)
    assert reason is None or reason.severity is not Severity.BUG, (reason, verdict)
    if reason is not None and reason.rule == "nan-inf-new":
        assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", (reason, verdict)


def _sqrt_of_cumsum(seed: int = 24780739) -> GraphSpec:
    """sqrt(cumsum(x)) over rows whose running sums pass close to 0 (seen on the H100, seed 97: a
    NaN where compiled's parallel scan made a partial sum a hair negative)."""
    return GraphSpec(inputs=(TensorSpec("x0", (32, 2, 64), "float32", False),),
                     nodes=(Node("v2", "cumsum", ("x0",), (("dtype", "float32"),), "float32", (32, 2, 64)),
                            Node("v3", "sqrt", ("v2",), (), "float32", (32, 2, 64))),
                     outputs=("v3",), recipe=InputRecipe("near_half_integer", seed), backward=False)


@pytest.mark.parametrize("backend, explained", [("reassociate_scans", True), ("nan_first", False), ("drift", False)])
def test_a_scan_associated_as_a_parallel_prefix_is_explained_by_the_order_and_planted_defects_are_not(backend, explained):
    """`reassociate_scans` computes cumsum as a log-depth scan: square roots of running sums near 0
    grossly off. Eager's scan associated the same way gives them: reduction order, noise.
    A NaN planted on an ordinary element and a scaled output are no association of any scan.
    (Where the scan makes a running sum a hair negative, the new NaN is met by the judge's
    mirrored conditioning draws first: a sum one rounding step from zero either way.)"""
    verdict, reason = _judged(_sqrt_of_cumsum(4), PLANTED + backend)
    if explained:
        nan_row, nan_reason = _judged(_sqrt_of_cumsum(), PLANTED + backend)
        assert nan_reason.rule == "nan-inf-ill-conditioned" and nan_reason.severity is Severity.SUSPECT, nan_row
        if reason.rule in ("nan-inf-wrong", "nan-inf-ill-conditioned"):
            # a NaN eager shares with fp64, which a one-ULP move of the inputs makes finite (a running
            # sum a hair below zero): suspect by its rule, no experiment needed
            assert reason.severity is Severity.SUSPECT and verdict.explanation is None, verdict
            return
        assert verdict.explanation is not None and verdict.explanation.mechanism == "reduction-order", verdict
        # noise on a float value; where the order decides a NaN eager shares with fp64, suspect (issue 189787 is open)
        assert reason.severity is MECHANISMS["reduction-order"].severity_for(reason.rule) is not Severity.BUG
    else:
        assert reason.severity is Severity.BUG and verdict.explanation is None, verdict


def test_real_inductor_on_the_cpu_scans_that_row_without_a_bug():
    verdict, reason = _judged(_sqrt_of_cumsum(), "inductor")
    assert reason is None or reason.severity is not Severity.BUG, verdict


@pytest.mark.parametrize("combine, reference", [("add", torch.cumsum), ("mul", torch.cumprod), ("logaddexp", torch.logcumsumexp)])
def test_a_log_depth_scan_is_the_same_scan(combine, reference):

    x = torch.rand(3, 37, generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.5
    torch.testing.assert_close(log_depth_scan(x, combine), reference(x, -1))


def _floor_division(of_sum: bool) -> GraphSpec:
    nodes = (Node("v1", "sum", ("x0",), (("keepdim", False),), "float32", (256,)),
             Node("v2", "div", ("v1",), (("divisor", 0.3), ("mode", "floor")), "float32", (256,))) if of_sum else \
        (Node("v2", "div", ("x0",), (("divisor", 0.3), ("mode", "floor")), "float32", (256, 33)),)
    return GraphSpec(inputs=(TensorSpec("x0", (256, 33), "float32", False),), nodes=nodes, outputs=("v2",),
                     recipe=InputRecipe("decimal_grid", 3), backward=False)


def test_a_floor_division_of_a_computed_value_flipped_at_its_jump_is_a_boundary_and_of_an_input_it_is_not():
    """x.sum(-1) // 0.3 under `reversed_sums`: the sum's last bits move, and quotients next to an
    integer flip: a boundary (eager's own dividend sits at the jump). A floor division of a graph
    input has no such excuse: both sides divide the same data, so a wrong quotient is the op's
    (issue 197895's class stays a bug); `drift` stays a bug either way."""
    verdict, reason = _judged(_floor_division(of_sum=True), PLANTED + "reversed_sums")
    assert reason.severity is Severity.SUSPECT and reason.rule == "int-valued-boundary", verdict
    for of_sum in (True, False):
        verdict, reason = _judged(_floor_division(of_sum), PLANTED + "drift")
        assert reason.severity is Severity.BUG and reason.rule == "int-valued-wrong", verdict


def _count_of_a_floor_division_of_subnormals(device: str = "cpu") -> GraphSpec:
    """Campaign seed 131 on the H100 (torch 2.11): floor(x / 2.5) of subnormal x, its sqrt, and a
    count of the roots <= 0.5. Eager's negative subnormals floor to -1 (a NaN root, not counted);
    flushed to -0 they floor to -0 (counted): the count, an integer, differs by how many there are."""
    return GraphSpec(inputs=(TensorSpec("x0", (1, 4), "float32", False),),
                     nodes=(Node("v2", "div", ("x0",), (("divisor", 2.5), ("mode", "floor")), "float32", (1, 4)),
                            Node("v7", "sqrt", ("v2",), (), "float32", (1, 4)),
                            Node("v9", "count_cmp", ("v7",), (("cmp", "le"), ("threshold", 0.5)), "int64", (1,))),
                     outputs=("v9",), recipe=InputRecipe("subnormal", 0), backward=False)


def test_a_count_depends_on_subnormals_that_zero_and_not_nan_shows():
    """floor(|x| / -2.5) of subnormal x is -1 in eager (a NaN root, not counted) and -0 once |x|
    is flushed (counted). The dependence run fills the subnormal values with NaN, and with zero of
    their sign (what a flush makes of them): a NaN root is not counted either, so NaN alone finds
    no count depending on them; the signed zeros change it. The compiled outputs are a flushing
    backend's (planted)."""
    from divfuzz.fuzzer.engine.execute import compile_session, prepare_case
    from divfuzz.fuzzer.engine.explain import depending_elements
    from divfuzz.records.severity import SeverityReason

    spec = GraphSpec(inputs=(TensorSpec("x0", (1, 4), "float32", False),),
                     nodes=(Node("v1", "abs", ("x0",), (), "float32", (1, 4)),
                            Node("v2", "div", ("v1",), (("divisor", -2.5), ("mode", "floor")), "float32", (1, 4)),
                            Node("v7", "sqrt", ("v2",), (), "float32", (1, 4)),
                            Node("v9", "count_cmp", ("v7",), (("cmp", "le"), ("threshold", 0.5)), "int64", (1,))),
                     outputs=("v9",), recipe=InputRecipe("subnormal", 0), backward=False)
    case = prepare_case(spec, "cpu")
    with compile_session(spec, "cpu", CompileConfig(backend=PLANTED + "flush_subnormals"), case.inputs, case.cots,
                         case.clock) as (compiled, failed, _):
        assert failed is None
        assert dict(compiled)["v9"].item() > dict(case.eager)["v9"].item() == 0  # flushed roots are counted
        subnormal = {name: (v != 0) & (v.abs() < torch.finfo(torch.float32).tiny)
                     for name, v in (("x0", case.inputs[0]), ("v1", case.eager_env["v1"]))}
        reason = SeverityReason(Severity.BUG, "int-gross", "v9", "")
        assert depending_elements(case, compiled, reason, subnormal, fills=("nan",)) == (1, 0)
        assert depending_elements(case, compiled, reason, subnormal, fills=("nan", "signed-zero")) == (1, 1)


@pytest.mark.gpu
def test_real_inductor_on_cuda_a_count_of_a_floor_division_of_subnormals_is_explained_by_the_flush():
    """The seed-131 bug line: an int64 count that flips because the CUDA kernel flushes the
    subnormal dividends. Not a bug: subnormal-flush, whichever experiment shows it."""
    verdict = execute_case(_count_of_a_floor_division_of_subnormals(), "cuda", CompileConfig(backend="inductor"))
    assert verdict.status.value == "diverged", verdict  # the flush changes the count
    reason = severity_of(verdict)
    assert reason is None or reason.severity is not Severity.BUG, (reason, verdict)


def test_a_nan_where_an_intermediate_rounds_to_zero_on_its_singularity_is_ill_conditioned():
    """Campaign seed 131 (H100; the CPU shows it too): a bilinear interpolation, then fmod(v1, v1).
    Compiled's interpolation (its decomposition, aot_eager already) gives exactly 0.0 where eager
    gives 1.3e-6 from operands near 30, both within a rounding step; fmod(0, 0) is NaN. The zero
    draw puts the fp64 reference on that singularity too: suspect, not a bug."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 40), "float32"),),
                     nodes=(Node("v1", "interpolate_bilinear", ("x0",), (("align_corners", False), ("scale_factor", 2.0)),
                                 "float32", (1, 8, 80)),
                            Node("v2", "fmod_tensor", ("v1", "v1"), (), "float32", (1, 8, 80))),
                     outputs=("v2",), recipe=InputRecipe("near_half_integer", 10651848))
    verdict = execute_case(spec, "cpu", CompileConfig(backend="aot_eager"))
    assert verdict.status.value == "diverged", verdict  # the NaN this test is about (AVX2 and AVX512 alike)
    reason = severity_of(verdict)
    assert (reason.severity, reason.rule) == (Severity.SUSPECT, "nan-inf-ill-conditioned"), reason


def test_an_argmin_that_hangs_on_an_intermediates_last_bit_is_ill_conditioned_though_eager_matches_fp64():
    """Campaign seed 163 (H100; the CPU shows it too): argmin over a layer norm of near-constant
    rows, fed by a bilinear interpolation whose decomposition (aot_eager already) is one ULP off
    eager's. Eager's argmin matches fp64, but so would any answer the interpolation's last bit
    picks: moving the intermediates alone by a rounding step moves fp64's argmin, so eager's
    agreement is luck, and the flip is suspect, not a bug. A floor division of a graph input,
    whose sensitivity is its input's grid, keeps the eager-exact guard (test_seeds_cpu, the gate)."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (192, 3, 24), "float32"), TensorSpec("v2_weight", (18,), "float32", init="near_one"),
                             TensorSpec("v2_bias", (18,), "float32", init="near_zero")),
                     nodes=(Node("v1", "interpolate_bilinear", ("x0",), (("align_corners", False), ("scale_factor", 0.75)),
                                 "float32", (192, 2, 18)),
                            Node("v2", "layer_norm", ("v1", "v2_weight", "v2_bias"), (("affine", True), ("eps", 1e-12)),
                                 "float32", (192, 2, 18)),
                            Node("v3", "argmin", ("v2",), (("keepdim", True),), "int64", (192, 2, 1))),
                     outputs=("v3",), recipe=InputRecipe("near_constant", 565))
    verdict = execute_case(spec, "cpu", CompileConfig(backend="aot_eager"))
    assert verdict.status.value == "diverged", verdict  # the flip this test is about
    reason = severity_of(verdict)
    assert reason is None or reason.severity is not Severity.BUG, reason
    if reason is not None and reason.rule.startswith("int"):
        ic = verdict.outputs[0].int_cmp
        assert reason.rule == "int-ill-conditioned" and ic.gross_ill_inner >= 1 and ic.eager_correct == ic.flips, (reason, ic)


def test_the_working_precision_is_the_coarsest_float_dtype_a_spec_computes_in():
    from divfuzz.fuzzer.engine.execute import coarsest_float_dtype

    plain = _unary("exp", "normal")
    assert coarsest_float_dtype(plain) == "float32"
    assert coarsest_float_dtype(GraphSpec(inputs=plain.inputs, nodes=plain.nodes, outputs=plain.outputs,
                                          recipe=plain.recipe, autocast="bfloat16")) == "bfloat16"
    assert coarsest_float_dtype(_count_of_a_floor_division_of_subnormals()) == "float32"  # int64 nodes do not count


def test_ties_explain_where_a_gradient_goes_never_a_nan_in_it():
    """A tie decides which tied element receives a finite gradient: it explains a gradient that
    went elsewhere, never a NaN or an infinity in it (issue 57: an all-NaN float16 gradient read
    bug in one bucket and noise "by tie" in another)."""
    from types import SimpleNamespace

    from divfuzz.fuzzer.engine.explain import _ties
    from divfuzz.records.severity import SeverityReason

    spec = _max_graph("ties")
    x = torch.tensor([[2.5, 1.0, 2.5, 0.0]] * 4)  # every row's maximum at two positions
    case = SimpleNamespace(spec=spec, eager=[("grad:x0", torch.zeros(4, 4))], eager_env={"x0": x})
    moved = _ties(case, [], SeverityReason(Severity.BUG, "float-gross-worse", "grad:x0", "-"))
    assert moved is not None and moved.mechanism == "tie"
    assert _ties(case, [], SeverityReason(Severity.BUG, "nan-inf-new", "grad:x0", "-")) is None
