"""The severity policy on hand-built tensors: no compile, fast.

Each test builds eager / compiled / fp64 outputs the way a real divergence class looks and asserts
the severity and rule `divfuzz.oracles.severity_policy` gives it (the classes of issue 8).
"""

import subprocess
import sys

import torch

from divfuzz.oracles.boundary import distance_to_grid_ulps, distance_to_value_ulps
from divfuzz.oracles.compare import compare_float, compare_int
from divfuzz.records.severity import Severity
from divfuzz.oracles.severity_policy import RULE_SEVERITY, key_severity, parse_severity, same_rejects, severity_of, switch_severity
from divfuzz.records.verdict import OutputVerdict, Verdict
from divfuzz.records.outcomes import Status
from divfuzz.oracles.findings import finding_of


def _float_verdict(eager, compiled, ref):
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(eager, compiled, ref)),))


def _int_verdict(eager, compiled, dist, ref=None):
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("q", int_cmp=compare_int(eager, compiled, dist, reference=ref)),))


def test_severity_module_imports_no_torch():
    code = "import sys, divfuzz.oracles.severity_policy; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=".").returncode == 0


def test_errors_are_bugs():
    for status in (Status.CRASH, Status.HANG, Status.COMPILE_ERROR, Status.RUNTIME_ERROR):
        r = severity_of(Verdict(status, error_type="X"))
        assert r.severity is Severity.BUG and r.rule == status.value


def test_equal_outputs_have_no_severity():
    a = torch.randn(8)
    assert severity_of(_float_verdict(a, a.clone(), a.double())) is None


def test_fp32_floor_division_off_by_one_is_a_bug():
    # Measured on torch 2.13 CPU: torch.div(x, 0.1, rounding_mode="floor") at x = -199.8 gives
    # eager -1999 (= fp64), Inductor -1998.
    x = (torch.arange(-2000, 2000, dtype=torch.float32) * 0.1)
    eager = torch.div(x, 0.1, rounding_mode="floor")
    ref = torch.div(x.double(), 0.1, rounding_mode="floor")
    compiled = eager.clone()
    compiled[1] += 1.0  # one element off by 1: the RMSE over 4000 elements barely moves
    fc = compare_float(eager, compiled, ref)
    assert fc.integral and fc.n_int_wrong == 1
    v = _float_verdict(eager, compiled, ref)
    r = severity_of(v)
    assert r.severity is Severity.BUG and r.rule == "int-valued-wrong"
    assert finding_of(v) is not None  # and it gets a bucket, though fp32


def test_integer_valued_flips_on_both_sides_are_boundary_not_bug():
    # floor(softmax(x).sum(-1) * 1000), measured on torch 2.13 CPU: 30 rows compiled-wrong, 34
    # eager-wrong, every pre-image within ULPs of 1000.
    ref = torch.full((8,), 1000.0, dtype=torch.float64)
    eager = torch.tensor([999.0, 999.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0])
    compiled = torch.tensor([1000.0, 1000.0, 999.0, 999.0, 1000.0, 1000.0, 1000.0, 1000.0])
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is Severity.SUSPECT and r.rule == "int-valued-boundary"


def test_integer_valued_flip_where_eager_is_off_fp64_is_not_a_bug():
    ref = torch.tensor([3.0, 4.0, 5.0], dtype=torch.float64)
    eager = torch.tensor([3.0, 3.0, 5.0])  # eager sits on the other side of a knife-edge
    compiled = torch.tensor([3.0, 4.0, 5.0])  # compiled matches fp64
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is not Severity.BUG


def test_a_few_grossly_wrong_fp32_elements_are_a_bug_though_rmse_passes():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(100_000, generator=g, dtype=torch.float64) * 100
    eager = ref.float()
    compiled = eager.clone()
    compiled[:3] = compiled[:3] * 1.001  # 3 elements ~8000 ULPs off
    fc = compare_float(eager, compiled, ref)
    assert fc.n_gross_worse == 3
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is Severity.BUG and r.rule == "float-gross-worse"


def test_tens_of_fp32_ulps_on_one_element_are_not_gross():
    """A reassociated fp32 reduction moves results by tens of ULPs; `same()`'s 1e-4 tolerance is
    about 2**10 fp32 ULPs. Seen on an H100: log_softmax of a bf16 activation, one element 29 ULPs
    worse than an exact eager, was rated a bug under a 16-ULP floor."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(65_536, generator=g, dtype=torch.float64)
    eager = ref.float()
    compiled = eager.clone()
    compiled[7] = eager[7] * (1 + 29 * 2.0**-23)
    fc = compare_float(eager, compiled, ref)
    assert fc.n_diff == 1 and fc.n_gross_worse == 0
    assert severity_of(_float_verdict(eager, compiled, ref)).severity is not Severity.BUG


def test_fp32_result_of_bf16_computation_made_much_worse_is_a_bug():
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = ref.to(torch.bfloat16).float()  # eager: accurate to bf16, in fp32
    compiled = eager.clone()
    compiled[::512] = (ref[::512] * 1.1).float()  # some elements 10% off: far beyond bf16 rounding
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is Severity.BUG and r.rule == "float-gross-worse"


def test_fp32_result_of_bf16_computation_rounded_otherwise_is_not_gross():
    g = torch.Generator().manual_seed(2)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = ref.to(torch.bfloat16).float()
    compiled = (ref + 2.0**-10 * ref.abs()).to(torch.bfloat16).float()  # another bf16 rounding
    fc = compare_float(eager, compiled, ref)
    assert fc.n_diff > 0 and fc.n_gross_worse == 0


def _bump_bf16(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """`t` with the elements at `idx` moved one bf16 ULP away from zero."""
    bits = t.clone().view(torch.int16)
    bits[idx] += 1
    return bits.view(torch.bfloat16)


def test_one_ulp_on_a_handful_of_elements_closer_or_same_is_noise():
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(1 << 16, generator=g, dtype=torch.float64)
    idx = torch.arange(5) * 1000
    compiled = ref.to(torch.bfloat16)  # compiled rounds once, correctly
    eager = _bump_bf16(compiled, idx)  # eager rounded twice: 1 ULP off on 5 elements
    v = _float_verdict(eager, compiled, ref)
    assert v.outputs[0].float_cmp.triage == "compiled-closer"
    r = severity_of(v)
    assert r.severity is Severity.NOISE and r.rule == "compiled-closer"
    # same distance: fp64 halfway between the two
    same_e = ref.float()
    same_c = same_e.clone()
    same_c[idx] = same_e[idx].nextafter(torch.tensor(float("inf")))
    r2 = severity_of(_float_verdict(same_e, same_c, same_e.double() + (same_c.double() - same_e.double()) / 2))
    assert r2.severity is Severity.NOISE and r2.rule == "few-ulps"


def test_precision_knob_makes_it_by_design_but_never_hides_a_bug():
    g = torch.Generator().manual_seed(4)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = ref.to(torch.bfloat16)
    compiled = (ref * (1 + 2.0**-5)).to(torch.bfloat16)  # many ULPs, compiled-worse by RMSE
    v = _float_verdict(eager, compiled, ref)
    assert severity_of(v).severity is Severity.SUSPECT
    switch = "emulate_precision_casts"  # what attribution names as removing it (`CulpritKey.switch`)
    by_design = severity_of(v, switch=switch)
    assert by_design.severity is Severity.BY_DESIGN and by_design.rule == "precision-knob"
    assert by_design.detail.startswith("emulate_precision_casts removes it; ")
    # the same severity a bucket of this case gets from its key (its rule under the culprit's switch)
    assert switch_severity(severity_of(v).rule, switch) is Severity.BY_DESIGN
    # another switch, not a precision knob, leaves it suspect
    assert severity_of(v, switch="freezing").severity is Severity.SUSPECT
    bug = Verdict(Status.COMPILE_ERROR, error_type="X")
    assert severity_of(bug, switch=switch).severity is Severity.BUG
    assert switch_severity(severity_of(bug).rule, switch) is Severity.BUG


def test_nan_where_eager_and_fp64_are_finite_is_a_bug():
    eager = torch.tensor([1.0, 2.0, 3.0])
    compiled = torch.tensor([1.0, float("nan"), 3.0])
    r = severity_of(_float_verdict(eager, compiled, eager.double()))
    assert r.severity is Severity.BUG and r.rule == "nan-inf-new"


def test_boundary_distance_near_zero_stays_small():
    # log2(x) for x one ULP above 1 is ~1.7e-7: 1.4 ULPs of fp32 at 1, not millions at 1.7e-7.
    x = torch.tensor([1.0], dtype=torch.float32).nextafter(torch.tensor([2.0]))
    pre = torch.log2(x)
    d = distance_to_grid_ulps(pre, offset=0.0)
    assert d.item() < 2.0
    assert distance_to_value_ulps(torch.tensor([1e-9]), 0.0).item() < 1.0
    # far from a boundary stays far
    assert distance_to_grid_ulps(torch.tensor([3.5]), offset=0.0).item() == 0.5 / 2.0**-22


def test_e8m0_flip_next_to_power_of_two_is_a_boundary_flip_not_gross():
    x = torch.tensor([1.0, 1.0, 4.0], dtype=torch.float32).nextafter(torch.tensor(8.0))
    pre = torch.log2(x.abs() + 1e-7)  # eager's own pre-image, in fp32
    eager = (torch.clamp(torch.ceil(pre), -127, 127) + 127).to(torch.uint8)
    compiled = eager.clone()
    compiled[0] -= 1  # compiled's log2 landed on the other side of 0
    ic = compare_int(eager, compiled, distance_to_grid_ulps(pre, offset=0.0))
    assert ic.boundary_flips == 1 and ic.gross_flips == 0
    r = severity_of(_int_verdict(eager, compiled, distance_to_grid_ulps(pre, offset=0.0)))
    assert r.rule == "int-boundary" and r.severity is not Severity.BUG
    f = finding_of(_int_verdict(eager, compiled, distance_to_grid_ulps(pre, offset=0.0)))
    assert f.kind.value == "int-boundary"


def test_nan_cast_to_uint8_is_not_a_finding():
    pre = torch.tensor([float("nan"), 2.0, 3.0])
    eager = torch.tensor([0, 2, 3], dtype=torch.uint8)
    compiled = torch.tensor([255, 2, 3], dtype=torch.uint8)  # what NaN -> uint8 happens to give
    v = _int_verdict(eager, compiled, distance_to_grid_ulps(pre, offset=0.5))
    assert v.outputs[0].int_cmp.undefined_flips == 1
    assert finding_of(v) is None
    assert severity_of(v).rule == "undefined-cast"


def test_int8_flip_where_compiled_matches_fp64_is_noise():
    pre = torch.tensor([10.4999, 20.2])  # eager's pre-image, 10.4999 rounds to 10
    eager = torch.tensor([10, 20], dtype=torch.int8)
    compiled = torch.tensor([11, 20], dtype=torch.int8)
    ref = torch.tensor([11, 20], dtype=torch.int8)  # fp64 pre-image was 10.5000001: rounds to 11
    v = _int_verdict(eager, compiled, distance_to_grid_ulps(pre, offset=0.5), ref)
    ic = v.outputs[0].int_cmp
    assert ic.fp64_triage == "compiled-correct"
    r = severity_of(v)
    assert r.severity is Severity.NOISE and r.rule == "compiled-fp64-correct"


def test_int_flip_far_from_boundary_wrong_in_compiled_is_a_bug():
    pre = torch.tensor([10.2, 20.2])
    eager = torch.tensor([10, 20], dtype=torch.int8)
    compiled = torch.tensor([12, 20], dtype=torch.int8)
    ref = eager.clone()
    r = severity_of(_int_verdict(eager, compiled, distance_to_grid_ulps(pre, offset=0.5), ref))
    assert r.severity is Severity.BUG and r.rule == "int-gross"


def test_severity_order_and_parsing():
    assert [s.value for s in sorted(Severity, key=lambda s: s.rank)] == ["bug", "suspect", "by-design", "noise", "eager-worse"]
    assert Severity.BUG.at_least(Severity.SUSPECT) and not Severity.NOISE.at_least(Severity.SUSPECT)
    assert parse_severity("by-design") is Severity.BY_DESIGN
    try:
        parse_severity("high")
    except ValueError as e:
        assert "'high'" in str(e) and "bug" in str(e)
    else:
        raise AssertionError("parse_severity accepted 'high'")


def test_reason_round_trips_and_old_verdicts_still_load():
    r = severity_of(Verdict(Status.HANG))
    assert type(r).from_dict(r.to_dict()) == r
    a = torch.randn(8)
    d = compare_float(a, a + 1, a.double()).to_dict()
    for k in ("n_gross_worse", "max_excess_ulps", "eager_max_err_ulps", "integral", "n_int_wrong", "n_nonfinite_new"):
        d.pop(k)
    assert type(compare_float(a, a, a.double())).from_dict(d).n_gross_worse == 0


def test_a_near_zero_element_does_not_hide_gross_errors_elsewhere():
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(10_000, generator=g, dtype=torch.float64)
    ref[0] = 1e-30  # cancellation: eager's error there is huge in ULPs of 1e-30
    eager = ref.float()
    eager[0] = 1e-8
    compiled = eager.clone()
    compiled[5:8] = compiled[5:8] * 1.01
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is Severity.BUG and r.rule == "float-gross-worse"


def test_integer_values_that_the_format_forces_or_zeros_are_not_an_integer_valued_output():
    """Seen on an H100: a bf16 LayerNorm of constant rows (eager and fp64 exactly 0, compiled 0.0019)
    and an fp16 output at |x| > 1024 (where every fp16 value is an integer) were rated
    'integer-valued wrong' bugs. Neither is a floor or floor division off by a whole step."""
    zeros = torch.zeros(160, dtype=torch.bfloat16)
    off = zeros.clone()
    off[::3] = 0.0019
    fc = compare_float(zeros, off, zeros.double())
    assert not fc.integral and fc.n_int_wrong == 0
    assert severity_of(_float_verdict(zeros, off, zeros.double())).rule != "int-valued-wrong"
    big = (torch.arange(1536, dtype=torch.float64) * 2 + 2048).to(torch.float16)
    moved = big.clone()
    moved[::7] += 2
    fc = compare_float(big, moved, big.double())
    assert not fc.integral and fc.n_int_wrong == 0


def test_a_compiled_result_further_than_an_already_ill_conditioned_eager_is_suspect():
    """When eager itself is percents off fp64 (a norm over a near-constant row), compiled being
    further still is suspect, not proof of a bug (seen on an H100: group_norm, eager 7e5 fp32 ULPs off)."""
    g = torch.Generator().manual_seed(4)
    ref = torch.randn(100, generator=g, dtype=torch.float64)
    eager = (ref * (1 + 0.05 * torch.randn(100, generator=g, dtype=torch.float64))).float()  # eager ~5% off
    compiled = eager.clone()
    compiled[0] = (ref[0] * 2.0).float()
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert r.severity is Severity.SUSPECT and r.rule == "gross-worse-ill-conditioned"


def test_every_rule_the_policy_emits_has_the_severity_it_is_emitted_with():
    """`RULE_SEVERITY` (a key's severity starts there) holds each rule's severity as the policy's
    source emits it: a rule names one severity."""
    import ast
    import inspect

    import divfuzz.oracles.severity_policy

    emitted: dict[str, set[str]] = {}
    for n in ast.walk(ast.parse(inspect.getsource(divfuzz.oracles.severity_policy))):
        if (isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SeverityReason" and len(n.args) > 1
                and isinstance(n.args[0], ast.Attribute) and isinstance(n.args[1], ast.Constant)):
            emitted.setdefault(n.args[1].value, set()).add(n.args[0].attr)
    failures = {status.value for status in (Status.CRASH, Status.HANG, Status.COMPILE_ERROR, Status.RUNTIME_ERROR)}
    assert all(len(names) == 1 for names in emitted.values()), emitted
    assert {rule: Severity[names.pop()] for rule, names in emitted.items()} | dict.fromkeys(failures, Severity.BUG) == RULE_SEVERITY


def test_a_keys_severity_is_its_rule_under_its_culprits_switch():
    from divfuzz.records.buckets import BucketKey, CulpritKey

    raw = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps")
    assert key_severity(raw) is Severity.SUSPECT
    knob = CulpritKey("inductor", switch="emulate_precision_casts")
    assert key_severity(raw.with_culprit(knob)) is Severity.BY_DESIGN
    assert key_severity(raw.with_culprit(CulpritKey("inductor", "lowerings", "aten.gelu"))) is Severity.SUSPECT
    assert key_severity(raw.with_culprit(CulpritKey("inductor", switch="freezing"))) is Severity.SUSPECT
    # a precision knob turns suspect and noise rules of a float difference into by-design, not what
    # is noise by its nature (compiled closer, within same(), an undefined cast), nor a wrong answer,
    # nor a finding about eager; where the skipped rounding decides a discrete answer (an integer, a
    # comparison, NaN/Inf: DECISIVE_RULES) it is a bug (PR 195223), and `suspect` where the input's
    # conditioning decides it as much (the record does not say which is to blame)
    from divfuzz.records.mechanism_table import CONDITIONED_DECISIVE_RULES, DECISIVE_RULES

    knob = "emulate_precision_casts"
    for rule, severity in RULE_SEVERITY.items():
        under = switch_severity(rule, knob)
        if rule in ("undefined-cast", "compiled-closer", "within-same"):
            assert under is Severity.NOISE, rule
        elif rule in DECISIVE_RULES:
            assert under is Severity.BUG, rule
        elif rule in CONDITIONED_DECISIVE_RULES:
            assert under is Severity.SUSPECT, rule
        elif severity in (Severity.SUSPECT, Severity.NOISE, Severity.BY_DESIGN):
            assert under is Severity.BY_DESIGN, rule
        elif severity is Severity.EAGER_WORSE:
            assert under is Severity.EAGER_WORSE, rule
    for rule in ("int-boundary", "int-flip", "compiled-fp64-correct"):
        assert RULE_SEVERITY[rule] is not Severity.BUG and switch_severity(rule, knob) is Severity.BUG, rule
    # ... but not a NaN/Inf eager itself misplaced (fp64 disagrees with eager there): by-design
    assert switch_severity("nan-inf-moved", knob) is Severity.BY_DESIGN
    for rule in ("int-valued-wrong", "nan-inf-new", "int-gross", "output-type-mismatch", "compile-error", "crash", "hang"):
        assert switch_severity(rule, knob) is Severity.BUG, rule
        # and a key's severity under the switch is what `severity_of` says of such a finding under it
        assert key_severity(BucketKey("x", "-", "cpu", ops=("x",), rule=rule, culprit=CulpritKey("inductor", switch=knob))) \
            is Severity.BUG, rule
    # an unknown rule (a newer store's) or none is suspect
    assert key_severity(BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",))) is Severity.SUSPECT
    assert switch_severity("a-rule-of-a-newer-divfuzz", None) is Severity.SUSPECT
    assert key_severity(BucketKey("hang", "-", "cpu", ops=("gelu",), detail="Timeout", rule="hang")) is Severity.BUG


def test_a_decomposition_at_fault_for_a_compiled_worse_result_is_a_bug_and_nothing_else_moves():
    """Eager's kernel defines the op: a decomposition named as the culprit of a result further from
    fp64 than eager's (many ULPs, compiled-worse; or rejected by same()) is a defect (PR 177163).
    The same rule under a lowering, or a decomposition whose result is as far as eager's, stays suspect."""
    from divfuzz.records.buckets import BucketKey, CulpritKey

    worse = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("layer_norm", "linear"), rule="many-ulps-worse")
    decomposition = CulpritKey("aot_eager_decomp_partition", "decomposition", "aten.native_layer_norm")
    assert key_severity(worse) is Severity.SUSPECT
    assert key_severity(worse.with_culprit(decomposition)) is Severity.BUG
    assert key_severity(worse.with_culprit(CulpritKey("inductor", "lowerings", "aten.gelu"))) is Severity.SUSPECT
    as_far = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("layer_norm", "linear"), rule="many-ulps")
    assert key_severity(as_far.with_culprit(decomposition)) is Severity.SUSPECT
    knob = CulpritKey("inductor", "inductor_emulate_precision_casts", switch="emulate_precision_casts")
    assert key_severity(worse.with_culprit(knob)) is Severity.BY_DESIGN


def test_a_cases_reason_names_the_output_its_bucket_is_about_when_as_severe():
    """A dtype change of one output and a grossly wrong value of another are both bugs: the case
    is bucketed as the dtype change (`finding_of`), so its reason names that output too, and the
    minimizer, which keeps the kind and the reason's output, can drop the other."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(1000, generator=g, dtype=torch.float64) * 100
    eager = ref.float()
    compiled = eager.clone()
    compiled[:3] = compiled[:3] * 1.001
    gross = OutputVerdict("v3", float_cmp=compare_float(eager, compiled, ref))
    changed = OutputVerdict("v6", mismatch="float32 [2] eager, bfloat16 [2] compiled")
    for outputs in ((gross, changed), (changed, gross)):
        verdict = Verdict(Status.DIVERGED, outputs=outputs)
        assert finding_of(verdict).output == "v6"
        reason = severity_of(verdict)
        assert reason.severity is Severity.BUG and reason.output == "v6" and reason.rule == "output-type-mismatch"
    # A more severe reason on another output still wins: the tie-break is only among equals.
    noisy = OutputVerdict("v6", float_cmp=compare_float(eager, eager.clone(), ref))
    assert severity_of(Verdict(Status.DIVERGED, outputs=(gross, noisy))).output == "v3"


def test_a_few_ulps_on_many_elements_is_no_decompositions_defect_and_more_than_a_few_is():
    """A decomposition is at fault for a compiled-worse result by more than a few ULPs (or one
    same() rejects): four float16 rows index_add-ed into one, 2 ULPs off on 5% of the row (the
    order of an accumulation, H100 seed 163), reads `many-ulps` and stays suspect under it; 6 ULPs
    reads `many-ulps-worse`, a bug under the decomposition."""
    for n, k, ulps, rule, under_decomposition in ((200, 10, 2, "many-ulps", Severity.SUSPECT),
                                                  (1000, 5, 6, "many-ulps-worse", Severity.BUG)):
        ref = torch.linspace(1.0, 2.0, n, dtype=torch.float64)
        eager = ref.to(torch.float16)
        compiled = eager.clone()
        compiled.view(torch.int16)[:k] += ulps  # further from fp64 on k of n elements, same() accepting it
        v = _float_verdict(eager, compiled, ref)
        assert severity_of(v).rule == rule and severity_of(v).severity is Severity.SUSPECT, severity_of(v)
        assert severity_of(v, subsystem="decomposition").severity is under_decomposition


def test_a_few_ulps_on_a_handful_of_elements_is_noise_even_where_eager_equals_fp64_rounded():
    """H100 seed 241: a float16 batch norm's output equal to fp64 rounded in eager (RMSE 0), and
    compiled 1 ULP off on 2 of 40,960 elements: same() rejects any difference against an RMSE of 0,
    and a decomposition named as the culprit of `rmse-worse` made it a bug line. Past a few ULPs
    the same handful is still rmse-worse."""
    eager = torch.linspace(3e4, 6e4, 40960, dtype=torch.float64).to(torch.float16)
    ref = eager.double()  # eager is fp64 rounded: its RMSE is 0
    compiled = eager.clone()
    compiled[7] = torch.nextafter(compiled[7], torch.tensor(7e4, dtype=torch.float16))
    compiled[900] = torch.nextafter(compiled[900], torch.tensor(0.0, dtype=torch.float16))
    fc = compare_float(eager, compiled, ref)
    assert fc.rmse_eager == 0 < fc.rmse_compiled and fc.max_ulp == 1 and fc.n_diff == 2 and same_rejects(fc)
    r = severity_of(_float_verdict(eager, compiled, ref))
    assert (r.severity, r.rule) == (Severity.NOISE, "few-ulps"), r
    far = eager.clone()
    far[7] = (far[7].double() + 8 * 32).to(torch.float16)  # 8 ULPs at 3e4
    far[900] = (far[900].double() - 8 * 32).to(torch.float16)
    r = severity_of(_float_verdict(eager, far, ref))
    assert r.rule in ("rmse-worse", "many-ulps-worse") and r.severity is Severity.SUSPECT, r


def test_an_integer_with_no_pre_image_is_a_bug_where_fp64_agrees_with_eager_and_stays_under_one_ulp_moves():
    """Integers computed by integer ops (a sum of uint8 abs values, issue 187018) or the indices of a
    pooling (issue 197434) have no pre-image to measure a boundary by: the conditioning draws stand
    in. fp64 equal to eager on every flip and unmoved by the draws: a wrong answer; compiled equal
    to fp64, or fp64 on neither side: not that."""
    from divfuzz.records.verdict import IntComparison, OutputVerdict, Verdict
    from divfuzz.records.outcomes import Status

    def judged(**kw):
        ic = IntComparison(dtype="int64", numel=32, flips=27, max_step=55, boundary_flips=0, gross_flips=0, unknown_flips=27,
                           min_boundary_ulps=None, fp64_known=True, **kw)
        return severity_of(Verdict(Status.DIVERGED, outputs=(OutputVerdict("output 0", int_cmp=ic),)))

    stable = judged(eager_correct=27, conditioning_draws=3, gross_ill_conditioned=0)
    assert stable.severity is Severity.BUG and stable.rule == "int-gross", stable
    unmeasured = judged(eager_correct=27)
    assert unmeasured.severity is Severity.SUSPECT and unmeasured.rule == "int-flip"  # the draws decide, once measured
    from divfuzz.oracles.severity_policy import needs_conditioning
    from divfuzz.records.verdict import IntComparison, OutputVerdict
    ic = IntComparison(dtype="int64", numel=32, flips=27, max_step=55, boundary_flips=0, gross_flips=0, unknown_flips=27,
                       min_boundary_ulps=None, fp64_known=True, eager_correct=27)
    assert needs_conditioning(OutputVerdict("output 0", int_cmp=ic))
    assert judged(compiled_correct=27).severity is Severity.NOISE
    assert judged(eager_correct=20, neither_correct=7).severity is not Severity.BUG


def test_a_zero_of_the_other_sign_where_eager_shares_fp64_s_sign_is_suspect_never_noise_nor_a_bug():
    """-0.0 and +0.0 are ULP-equal, yet 1 / z tells them apart: minimum(-0.0, +0.0) returning +0.0
    was fixed as a bug (issue 185610), neg's signed zero only under numerics="strict" (PR 196031):
    split, so suspect. Where fp64's zero has compiled's sign, it is less than that."""
    import torch
    from divfuzz.oracles.judge import judge_outputs, verdict_of

    eager, ref = torch.tensor([-0.0, 1.0]), torch.tensor([-0.0, 1.0], dtype=torch.float64)
    reason = severity_of(verdict_of(judge_outputs([("o", eager)], [("o", torch.tensor([0.0, 1.0]))], [("o", ref)])))
    assert reason is not None and reason.severity is Severity.SUSPECT and reason.rule == "zero-sign-wrong", reason
    other = severity_of(verdict_of(judge_outputs([("o", eager)], [("o", torch.tensor([0.0, 1.0]))], [("o", ref.abs())])))
    assert other is None or other.rule != "zero-sign-wrong", other
    # A gradient's zero takes its sign from how the autograd formula masks: never a bug.
    grad = severity_of(verdict_of(judge_outputs([("grad:x0", eager)], [("grad:x0", torch.tensor([0.0, 1.0]))],
                                                [("grad:x0", ref)])))
    assert grad is None or grad.severity is not Severity.BUG, grad
