"""The judgement rules of issue 20 on tensors shaped like each class of divergence (no compile):
compiled-closer is noise, errors at the output's scale, the mirror finding about eager,
conditioning, types first, a missing reference. Rules over classes: nothing here names an op.
"""

from dataclasses import replace

import torch

from divfuzz.oracles.conditioning import CONDITIONING_DRAWS, ZERO_DRAW, IntermediateNudge, perturb_inputs
from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.outcomes import FindingKind
from divfuzz.records.severity import Severity


def _one(eager, compiled, ref, **kw):
    return verdict_of(judge_outputs([("y", eager)], [("y", compiled)], [("y", ref)] if ref is not None else None, **kw))


def _randn(n, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_compiled_closer_on_many_elements_and_many_ulps_is_noise():
    """A fused kernel that keeps fp32 where eager rounds to bf16 in between: compiled is closer to
    fp64 on a third of the elements, by up to tens of ULPs. same() accepts it; so does the policy."""
    ref = _randn(4096, 1)
    compiled = ref.to(torch.bfloat16)
    drift = (_randn(4096, 2) * 0.01).clamp(-0.025, 0.025)  # up to ~6 bf16 ULPs
    eager = (ref * (1 + drift * (torch.arange(4096) % 3 == 0))).to(torch.bfloat16)
    v = _one(eager, compiled, ref)
    fc = v.outputs[0].float_cmp
    assert fc.n_diff > 1000 and fc.max_ulp > 4 and fc.triage == "compiled-closer"
    r = severity_of(v)
    assert r.severity is Severity.NOISE and r.rule == "compiled-closer"


def test_fp32_difference_within_same_is_noise_but_bf16_stays_suspect():
    """Reassociated reductions in fp32 move many elements by tens of ULPs, compiled a little worse
    than eager but within same()'s RMSE margin: noise. The same shape of difference in bf16 stays
    suspect (a precision knob may explain it: attribution decides)."""
    ref = _randn(4096, 3)
    for dtype, rule, sev in ((torch.float32, "within-same", Severity.NOISE), (torch.bfloat16, "many-ulps", Severity.SUSPECT)):
        ints = torch.int32 if dtype == torch.float32 else torch.int16
        base = ref.to(dtype).view(ints)

        def jitter(seed):  # a different reduction order: up to 5 ULPs either way on 1/4 of the elements
            g = torch.Generator().manual_seed(seed)
            step = torch.randint(-5, 6, (4096,), generator=g) * (torch.randint(0, 4, (4096,), generator=g) == 0)
            return (base.to(torch.int64) + step).to(ints).view(dtype)

        eager, compiled = jitter(10), jitter(11)
        v = _one(eager, compiled, ref)
        fc = v.outputs[0].float_cmp
        assert fc.n_gross_worse == 0 and fc.n_diff > 400 and fc.max_ulp > 4
        assert fc.rmse_compiled <= 2.0 * fc.rmse_eager
        r = severity_of(v)
        if fc.triage == "compiled-closer":
            rule, sev = "compiled-closer", Severity.NOISE
        assert (r.severity, r.rule) == (sev, rule), (dtype, r)


def test_error_near_zero_after_cancellation_is_not_gross_at_the_outputs_scale():
    """One element near zero in an O(1) output: thousands of its own ULPs off, a fraction of a ULP
    at the tensor's scale. Not gross. The same absolute error on an O(1) element is gross."""
    ref = _randn(32768, 4)
    ref[100] = 3e-9  # cancellation left a tiny value here
    eager = ref.to(torch.bfloat16)
    compiled = eager.clone()
    compiled[100] = torch.tensor(3e-9 + 1e-2, dtype=torch.float64).to(torch.bfloat16)
    near_zero = _one(eager, compiled, ref)
    fc = near_zero.outputs[0].float_cmp
    assert fc.max_excess_ulps > 1000  # in its own ULPs, enormous
    assert fc.n_gross_worse == 0 and fc.max_excess_scale_ulps < 2
    assert severity_of(near_zero).severity is not Severity.BUG

    compiled2 = eager.clone()
    compiled2[200] = (ref[200] + 0.5).to(torch.bfloat16)  # wrong by half the output's scale
    gross = _one(eager, compiled2, ref)
    assert gross.outputs[0].float_cmp.n_gross_worse == 1
    assert severity_of(gross).rule == "float-gross-worse"


def test_eager_grossly_worse_is_a_finding_about_eager_never_the_compilers():
    ref = _randn(2048, 5)
    compiled = ref.to(torch.float32)
    eager = compiled.clone()
    eager[7] = eager[7] + 1.0  # eager badly wrong at one element, compiled right
    v = _one(eager, compiled, ref)
    assert v.outputs[0].float_cmp.n_eager_gross_worse == 1
    r = severity_of(v)
    assert r.severity is Severity.EAGER_WORSE and r.rule == "eager-gross-worse"
    assert not r.severity.at_least(Severity.NOISE)  # below every compiler severity
    assert finding_of(v) is not None  # it still gets a bucket (reported apart)


def test_conditioning_downgrades_a_gross_element_only_when_fp64_itself_moves_as_far():
    ref = _randn(1024, 6)
    eager = ref.to(torch.float32)
    compiled = eager.clone()
    compiled[3] += 2.0
    calls = []

    def moves(by):
        def perturbed(draw):
            calls.append(draw)
            moved = ref.clone()
            moved[3] += by
            return [("y", moved)]
        return perturbed

    # fp64 moves as far, but eager, in the same precision, gets every element to within a rounding:
    # the precision suffices, and compiled's miss is the compiler's (a bug).
    accurate = _one(eager, compiled, ref, perturbed_reference=moves(3.0))
    fc = accurate.outputs[0].float_cmp
    assert fc.conditioning_draws == CONDITIONING_DRAWS and fc.n_gross_ill_conditioned == 1
    assert severity_of(accurate).rule == "float-gross-worse"
    assert calls == list(range(CONDITIONING_DRAWS))
    # ... where eager is off too (64 ULPs on another element), the input is ill-conditioned.
    off = eager.clone()
    off[5] = torch.nextafter(off[5], torch.tensor(float("inf")))
    for _ in range(63):
        off[5] = torch.nextafter(off[5], torch.tensor(float("inf")))
    ill = _one(off, compiled, ref, perturbed_reference=moves(3.0))
    assert severity_of(ill).rule == "gross-worse-ill-conditioned" and severity_of(ill).severity is Severity.SUSPECT

    well = _one(eager, compiled, ref, perturbed_reference=moves(1e-7))
    assert well.outputs[0].float_cmp.n_gross_ill_conditioned == 0
    assert severity_of(well).rule == "float-gross-worse"


def test_conditioning_is_not_run_without_a_bug_candidate():
    ref = _randn(256, 7)
    eager = ref.to(torch.bfloat16)
    compiled = ref.to(torch.float32).to(torch.bfloat16)

    def never(draw):
        raise AssertionError("no bug candidate: no fp64 rerun")

    assert _one(eager, compiled, ref, perturbed_reference=never).status.value == "ok"


def test_integer_flip_far_from_a_boundary_is_suspect_when_fp64_flips_too_and_eager_is_no_better():
    """The LayerNorm-over-a-near-constant-row class: the integer computed in fp64 moves when the
    inputs move one ULP, and eager misses it as compiled does. Where eager gets the sensitive answer
    exactly (the floor-division class), the precision suffices and the flip stays a bug."""
    eager = torch.tensor([3, 4, 5, 6], dtype=torch.int32)
    compiled = torch.tensor([3, 9, 5, 6], dtype=torch.int32)
    far = torch.full((4,), 1000.0, dtype=torch.float64)

    def judge(ref, moved):
        return verdict_of(judge_outputs([("q", eager)], [("q", compiled)], [("q", ref)], {"q": far},
                                        perturbed_reference=lambda d: [("q", moved)]))

    neither = torch.tensor([3, 7, 5, 6], dtype=torch.int32)  # fp64 says 7: eager and compiled both miss
    # eager misses fp64 wherever the two differ: suspect before any conditioning draw is needed
    assert severity_of(judge(neither, neither + (torch.arange(4) == 1))).rule == "int-eager-inexact"
    # conditioning decides where eager is right on some flips and the fp64 integer moves on most
    mixed = torch.tensor([3, 9, 5, 6, 1, 1, 1], dtype=torch.int32)
    e7 = torch.tensor([3, 4, 5, 6, 2, 2, 2], dtype=torch.int32)
    r7 = torch.tensor([3, 7, 5, 6, 2, 2, 2], dtype=torch.int32)  # eager right on 3 of the 4 flips, compiled on none
    moved = verdict_of(judge_outputs([("q", e7)], [("q", mixed)], [("q", r7)], {"q": torch.full((7,), 1000.0, dtype=torch.float64)},
                                     perturbed_reference=lambda d: [("q", r7 - ((torch.arange(7) >= 4) | (torch.arange(7) == 1)).int())]))
    assert severity_of(moved).rule == "int-ill-conditioned"
    # fp64 steady, but eager misses it wherever the two differ: no side computes the integer, and
    # the compiler is not shown to be the one at fault (EAGER_MISS_SHARE)
    assert severity_of(judge(neither, neither)).rule == "int-eager-inexact"
    exact = eager.clone()  # eager is exactly right where fp64 is sensitive: still the compiler's bug
    r = severity_of(judge(exact, exact + (torch.arange(4) == 1)))
    assert (r.severity, r.rule) == (Severity.BUG, "int-gross")
    assert severity_of(judge(exact, exact)).rule == "int-gross"  # ... and where fp64 is steady


def test_an_output_of_another_dtype_or_shape_is_a_bug_before_any_value():
    e = torch.ones(4, 4, dtype=torch.float16)
    for c, words in ((e.float(), "float16 [4, 4] eager, float32 [4, 4] compiled"),
                     (e.reshape(16), "float16 [4, 4] eager, float16 [16] compiled")):
        v = verdict_of(judge_outputs([("y", e)], [("y", c)], [("y", e.double())]))
        assert v.outputs[0].mismatch == words and v.outputs[0].float_cmp is None
        r = severity_of(v)
        assert (r.severity, r.rule) == (Severity.BUG, "output-type-mismatch")
        assert finding_of(v).kind is FindingKind.TYPE_MISMATCH
    missing = verdict_of(judge_outputs([("y", e), ("z", e)], [("y", e)], None))
    assert missing.outputs[1].mismatch.endswith("missing in compiled")
    extra = verdict_of(judge_outputs([("y", e)], [("y", e), ("w", e)], None))
    assert extra.outputs[1].name == "w" and "missing in eager" in extra.outputs[1].mismatch


def test_a_missing_reference_never_makes_eager_the_reference():
    ref = _randn(512, 8)
    eager = ref.to(torch.bfloat16)
    compiled = ref.float().mul(1 + 2**-9).to(torch.bfloat16)
    v = verdict_of(judge_outputs([("y", eager)], [("y", compiled)], None))
    fc = v.outputs[0].float_cmp
    assert fc.triage == "unknown" and fc.n_gross_worse == 0 and fc.n_diff > 0
    assert severity_of(v).rule in ("unreferenced", "few-ulps-unreferenced")
    assert severity_of(v).severity is not Severity.BUG


def test_perturbation_moves_each_value_one_ulp_keeps_ties_and_is_replayable():
    x = torch.tensor([1.0, 1.0, 2.0, -0.5, 2.0, 7.0], dtype=torch.bfloat16).requires_grad_()
    idx = torch.tensor([0, 2, 1])
    a = perturb_inputs([x, idx], 0)
    b = perturb_inputs([x, idx], 0)
    assert torch.equal(a[0], b[0]) and a[1] is idx and a[0].requires_grad
    moved = a[0].detach()
    assert moved[0] == moved[1] and moved[2] == moved[4]  # ties stay ties
    steps = (moved.view(torch.int16).int() - x.detach().view(torch.int16).int()).abs()
    assert torch.all(steps == 1)  # exactly one ULP each (same sign, no zero crossing here)
    directions = {tuple((perturb_inputs([x], d)[0].detach() > x.detach()).tolist()) for d in range(CONDITIONING_DRAWS)}
    assert len(directions) > 1  # the draws differ


def test_the_first_two_draws_move_every_input_and_intermediate_the_opposite_ways():
    """A value whose sign is rounding noise (a norm over a constant row, then a linear and a square
    root: H100 seed 229) turns NaN in one direction only; mirrored draws try both for every value,
    where two independent coin flips per value miss one side a quarter of the time."""
    x = torch.randn(64, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(torch.float32)
    up0 = perturb_inputs([x], 0)[0] > x
    up1 = perturb_inputs([x], 1)[0] > x
    assert bool((up0 != up1).all())

    def nudged(draw):
        nudge = IntermediateNudge({"v": ("a",)}, {"a": "float32", "v": "float32"}, draw)
        nudge("a", torch.ones(64, dtype=torch.float64))
        return nudge("v", x.double())

    assert bool(((nudged(0) > x.double()) != (nudged(1) > x.double())).all())


def test_a_compiler_returning_another_dtype_is_a_type_mismatch_bug_end_to_end():
    """The planted `wrong_dtype` backend returns the right values in another dtype (the class of a
    rewrite pass that drops a cumsum's explicit dtype): the real engine files it as a bug."""
    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.records.config import CompileConfig
    from seed_specs import unary_bf16

    v = execute_case(unary_bf16("gelu", rows=8, dim=16), "cpu", CompileConfig(backend="divfuzz.fuzzer.engine.planted:wrong_dtype"))
    assert v.outputs[0].mismatch == "bfloat16 [8, 16] eager, float32 [8, 16] compiled"
    r = severity_of(v)
    assert (r.severity, r.rule) == (Severity.BUG, "output-type-mismatch")
    assert finding_of(v).kind is FindingKind.TYPE_MISMATCH
    clean = execute_case(unary_bf16("gelu", rows=8, dim=16), "cpu", CompileConfig(backend="divfuzz.fuzzer.engine.planted:eager_in_disguise"))
    assert clean.status.value == "ok"


def test_an_inf_at_the_edge_of_the_range_is_rounding_not_a_new_nan_inf():
    """A product whose exact value lands within a few ULPs of the largest float: compiled rounds it
    up to Inf, eager down. Not a wrong answer. Far from the edge, the same Inf is a bug."""
    big = torch.finfo(torch.float16).max
    ref = torch.tensor([1.0, big * (1 - 2**-12), 2.0], dtype=torch.float64)
    eager = ref.to(torch.float16)
    compiled = eager.clone()
    compiled[1] = float("inf")
    v = _one(eager, compiled, ref)
    assert v.outputs[0].float_cmp.n_nonfinite_new == 0 and severity_of(v).rule != "nan-inf-new"
    compiled2 = eager.clone()
    compiled2[0] = float("inf")
    assert severity_of(_one(eager, compiled2, ref)).rule == "nan-inf-new"


def test_a_new_nan_is_suspect_when_fp64_itself_goes_nan_a_ulp_away():
    """rsqrt of a mean that cancels to about zero: the fp64 value turns NaN when the inputs move one
    ULP, so compiled's NaN there is the input's conditioning, not the compiler's."""
    ref = torch.tensor([2.0, 3.0e3, 0.5], dtype=torch.float64)
    eager = ref.to(torch.float32)
    compiled = eager.clone()
    compiled[1] = float("nan")

    def turns_nan(draw):
        moved = ref.clone()
        moved[1] = float("nan")
        return [("y", moved)]

    ill = _one(eager, compiled, ref, perturbed_reference=turns_nan)
    assert severity_of(ill).rule == "nan-inf-ill-conditioned" and severity_of(ill).severity is Severity.SUSPECT
    steady = _one(eager, compiled, ref, perturbed_reference=lambda d: [("y", ref * (1 + 1e-7))])
    assert severity_of(steady).rule == "nan-inf-new"


def test_a_new_nan_on_inputs_at_the_ranges_edge_is_suspect_and_on_ordinary_inputs_a_bug():
    """The mean of three fp32 values near 3.4e38 (the `near_overflow` recipe): summed in one order
    they overflow to Inf, then Inf - Inf = NaN; in another they stay finite. fp64 cannot say which
    order is right, so compiled's NaN is the range's edge (suspect). The same NaN on ordinary
    inputs, or on an fp16 output whose inputs are a few hundred (a square not upcast), is a bug."""
    x = torch.tensor([3.0e38, 2.9e38, -3.3e38], dtype=torch.float32)
    ref = x.double().mean().reshape(1)
    eager = ref.to(torch.float32)
    compiled = torch.full_like(eager, float("nan"))
    edge = severity_of(_one(eager, compiled, ref, inputs=[x]))
    assert (edge.severity, edge.rule) == (Severity.SUSPECT, "nan-inf-range-edge"), edge
    assert severity_of(_one(eager, compiled, ref, inputs=[x / 1e36])).rule == "nan-inf-new"
    assert severity_of(_one(eager, compiled, ref)).rule == "nan-inf-new"  # no inputs given: not measured
    # The output's dtype bounds the edge too: fp32 inputs near fp16's largest value, an fp16 output.
    h_ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    h_eager = h_ref.to(torch.float16)
    h_compiled = h_eager.clone()
    h_compiled[0] = float("inf")
    near_fp16 = torch.tensor([30000.0, -60000.0])
    assert severity_of(_one(h_eager, h_compiled, h_ref, inputs=[near_fp16])).rule == "nan-inf-range-edge"
    assert severity_of(_one(h_eager, h_compiled, h_ref, inputs=[near_fp16.half() / 200])).rule == "nan-inf-new"


def test_the_range_edge_rule_end_to_end_with_the_planted_nan_backend():
    """The real engine on the planted `nan_first` backend (a NaN in the first float output): on the
    `near_overflow` recipe the new NaN is the range's edge, on the `normal` recipe a bug."""
    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.records.config import CompileConfig
    from seed_specs import unary_bf16

    planted = CompileConfig(backend="divfuzz.fuzzer.engine.planted:nan_first")
    edge = severity_of(execute_case(unary_bf16("relu", rows=8, dim=16, recipe="near_overflow"), "cpu", planted))
    assert (edge.severity, edge.rule) == (Severity.SUSPECT, "nan-inf-range-edge"), edge
    ordinary = severity_of(execute_case(unary_bf16("relu", rows=8, dim=16), "cpu", planted))
    assert (ordinary.severity, ordinary.rule) == (Severity.BUG, "nan-inf-new"), ordinary


def test_a_nan_at_the_ranges_edge_costs_no_fp64_reruns():
    """The range's edge is read from the inputs before conditioning: a NaN it explains is not a bug
    candidate, so the perturbed fp64 references are never run for it."""
    x = torch.tensor([3.0e38, 2.9e38, -3.3e38], dtype=torch.float32)
    ref = x.double().mean().reshape(1)
    eager = ref.to(torch.float32)
    compiled = torch.full_like(eager, float("nan"))
    calls = []

    def perturbed(draw):
        calls.append(draw)
        return [("y", ref)]

    assert severity_of(_one(eager, compiled, ref, perturbed_reference=perturbed, inputs=[x])).rule == "nan-inf-range-edge"
    assert calls == []
    assert severity_of(_one(eager, compiled, ref, perturbed_reference=perturbed, inputs=[x / 1e36])).rule == "nan-inf-new"
    assert calls == list(range(CONDITIONING_DRAWS))


def test_a_value_within_a_rounding_step_of_zero_at_its_operands_scale_moves_to_zero_in_the_zero_draw():
    """A difference of nearly equal terms may round to exactly zero in another evaluation; a value
    as large as its operands never becomes zero, and no other draw zeroes anything."""
    def nudged(draw):
        nudge = IntermediateNudge({"v": ("a",)}, {"a": "float32", "v": "float32"}, draw)
        nudge("a", torch.full((4,), 30.0, dtype=torch.float64))
        return nudge("v", torch.tensor([1.3e-6, -2e-6, 5.0, 30.0], dtype=torch.float64))

    step = torch.finfo(torch.float32).eps
    zeroed = nudged(ZERO_DRAW)
    assert zeroed[:2].tolist() == [0.0, 0.0]
    assert bool((zeroed[2:] != 0).all()) and float((zeroed[2:] - torch.tensor([5.0, 30.0])).abs().max()) <= step * 30 * 1.01
    for draw in range(CONDITIONING_DRAWS):
        if draw != ZERO_DRAW:
            assert bool((nudged(draw) != 0).all())



def test_a_new_nan_where_eager_is_itself_far_from_fp64_is_suspect_and_where_eager_is_accurate_a_bug():
    """sqrt(E[x^2] - E[x]^2) in float32 over rows whose variance cancels: eager's finite answers
    there are thousands of ULPs off fp64, so which rows end NaN is rounding (the NaN counterpart of
    the eager-exact guards; issues 118090, 143182). Where eager is within a few ULPs, compiled's
    NaN is the compiler's."""
    ref = torch.tensor([1.0e-3, 2.0e-3, 0.5, 0.75], dtype=torch.float64)
    compiled = ref.to(torch.float32)
    compiled[:2] = float("nan")
    unstable = ref.to(torch.float32)
    unstable[:2] = torch.tensor([3.1e-3, 4.4e-4])  # the cancelled rows, far off in eager too
    v = _one(unstable, compiled, ref)
    assert v.outputs[0].float_cmp.n_nonfinite_new == 2 and v.outputs[0].float_cmp.n_nonfinite_eager_near == 0
    r = severity_of(v)
    assert (r.severity, r.rule) == (Severity.SUSPECT, "nan-inf-ill-conditioned") and "unstable in float32" in r.detail
    accurate = _one(ref.to(torch.float32), compiled, ref)
    assert accurate.outputs[0].float_cmp.n_nonfinite_eager_near == 2
    assert (severity_of(accurate).severity, severity_of(accurate).rule) == (Severity.BUG, "nan-inf-new")


def test_a_new_nan_in_a_float32_output_of_a_bfloat16_computation_holds_eager_to_bfloat16():
    """A float32 output computed through bfloat16 (an autocast region): eager is thousands of
    float32 ULPs off fp64 everywhere, as bfloat16 allows. Held to the graph's working precision,
    eager is accurate at compiled's NaN, which stays a bug; held to float32 it would read unstable."""
    ref = torch.linspace(0.5, 2.0, 64, dtype=torch.float64)
    eager = ref.to(torch.bfloat16).to(torch.float32)  # up to half a bf16 ULP off: ~2**15 float32 ULPs
    compiled = eager.clone()
    compiled[3] = float("nan")
    held_to_bf16 = verdict_of(judge_outputs([("y", eager)], [("y", compiled)], [("y", ref)], working_dtype="bfloat16"))
    assert held_to_bf16.outputs[0].float_cmp.n_nonfinite_eager_near == 1 and severity_of(held_to_bf16).rule == "nan-inf-new"
    held_to_fp32 = _one(eager, compiled, ref)
    assert severity_of(held_to_fp32).rule == "nan-inf-ill-conditioned"


def test_a_stored_verdict_from_before_the_eager_measure_keeps_its_nan_bug():
    """A FloatComparison stored without `n_nonfinite_eager_near` reads it as not measured (-1):
    its new NaN stays the bug it was judged."""
    from divfuzz.records.verdict import FloatComparison

    v = _one(torch.tensor([1.0, 2.0]), torch.tensor([float("nan"), 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64))
    d = v.outputs[0].float_cmp.to_dict()
    del d["n_nonfinite_eager_near"]
    old = FloatComparison.from_dict(d)
    assert old.n_nonfinite_eager_near == -1
    assert severity_of(replace(v, outputs=(replace(v.outputs[0], float_cmp=old),))).rule == "nan-inf-new"
