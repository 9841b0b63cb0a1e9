"""Oracles on hand-made tensors: each assertion fails if the measure is wrong."""

from __future__ import annotations

import torch

from divfuzz.oracles.boundary import distance_to_grid_ulps, ulp_of
from divfuzz.oracles.compare import compare_float, compare_int
from divfuzz.oracles.ulp import bitwise_equal, nan_inf_mismatch, ulp_distance
from divfuzz.records.outcomes import FindingKind, Status
from divfuzz.records.verdict import OutputVerdict, Verdict
from divfuzz.oracles.findings import finding_of, target_score


def _next_up(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, float("inf")))


def test_one_bf16_ulp_apart():
    a = torch.tensor([1.0, -2.5, 3.0e-3], dtype=torch.bfloat16)
    b = a.clone()
    b.view(torch.int16)[1] += 1  # -2.5 one step away from zero
    d = ulp_distance(a, b)
    assert d.tolist() == [0, 1, 0]
    cmp = compare_float(a, b, a.double())
    assert (cmp.n_diff, cmp.max_ulp, cmp.dtype) == (1, 1, "bfloat16")
    assert dict(cmp.ulp_histogram)["1"] == 1
    assert cmp.triage == "compiled-worse"  # eager equals the reference here


def test_signed_zeros_are_equal_and_adjacent_across_zero():
    pz = torch.tensor([0.0], dtype=torch.float32)
    nz = torch.tensor([-0.0], dtype=torch.float32)
    assert ulp_distance(pz, nz).item() == 0
    tiny = _next_up(pz)
    assert ulp_distance(tiny, -tiny).item() == 2
    assert ulp_distance(pz, tiny).item() == 1
    assert not bitwise_equal(pz, nz)  # bitwise, they differ: determinism checks see it


def test_nan_is_not_an_ulp_difference_but_its_placement_is():
    a = torch.tensor([float("nan"), 1.0, float("inf")])
    b = torch.tensor([float("nan"), float("nan"), float("-inf")])
    assert ulp_distance(a, b).tolist() == [0, 0, ulp_distance(a[2:], b[2:]).item()]
    assert nan_inf_mismatch(a, b).tolist() == [False, True, True]
    cmp = compare_float(a, b, a.double())
    assert cmp.nan_inf_mismatch == 2
    v = Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=cmp),))
    assert finding_of(v).kind is FindingKind.NAN_INF


def test_triage_says_which_side_is_closer_to_fp64():
    ref = torch.tensor([1.0 + 2**-8, 2.0], dtype=torch.float64)  # exactly halfway between bf16 neighbours
    eager = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    compiled = torch.tensor([1.0078125, 2.0], dtype=torch.bfloat16)  # next bf16 above 1.0
    assert compare_float(eager, compiled, ref).triage == "same"
    ref2 = torch.tensor([1.0 + 2**-7, 2.0], dtype=torch.float64)
    assert compare_float(eager, compiled, ref2).triage == "compiled-closer"
    assert compare_float(compiled, eager, ref2).triage == "compiled-worse"


def test_ulp_of_and_boundary_distance():
    x = torch.tensor([1.0, 3.0, 0.75], dtype=torch.float64)
    assert ulp_of(x, "float32").tolist() == [2.0**-23, 2.0**-22, 2.0**-24]
    assert ulp_of(torch.tensor([1.0], dtype=torch.float64), "bfloat16").item() == 2.0**-7
    # 3 + 2 float32 ULPs is 2 ULPs from the integer grid; 2.5 is on the half grid.
    pre = torch.tensor([3.0 + 2 * 2.0**-22, 2.5], dtype=torch.float64)
    assert distance_to_grid_ulps(pre, offset=0.0, dtype="float32")[0].item() == 2.0
    assert distance_to_grid_ulps(pre, offset=0.5, dtype="float32")[1].item() == 0.0


def test_uint8_flip_next_to_a_boundary_and_one_far_from_it():
    eager = torch.tensor([130, 131, 90, 7], dtype=torch.uint8)
    compiled = torch.tensor([131, 131, 93, 7], dtype=torch.uint8)
    # element 0's pre-image was 1 ULP from a rounding boundary; element 2's was far from any.
    dist = torch.tensor([1.0, 500.0, 4.0e6, 9.0], dtype=torch.float64)
    cmp = compare_int(eager, compiled, dist)
    assert (cmp.flips, cmp.max_step, cmp.boundary_flips, cmp.gross_flips) == (2, 3, 1, 1)
    assert cmp.min_boundary_ulps == 1.0
    near_only = compare_int(eager[:2], compiled[:2], dist[:2])
    v = Verdict(Status.DIVERGED, outputs=(OutputVerdict("q", int_cmp=near_only),))
    assert finding_of(v).kind is FindingKind.INT_BOUNDARY
    v = Verdict(Status.DIVERGED, outputs=(OutputVerdict("q", int_cmp=cmp),))
    assert finding_of(v).kind is FindingKind.INT_GROSS


def test_fp32_differences_bucket_only_when_compiled_is_worse_unless_strict():
    ref = torch.linspace(1, 2, 1000, dtype=torch.float64)
    eager = ref.float()
    closer = eager.clone()  # one element moved by one ULP, and it got no worse than eager
    closer[0] = _next_up(closer[:1])[0]
    worse = eager + 1e-3
    v_closer = Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(eager, closer, ref)),))
    v_worse = Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(eager, worse, ref)),))
    assert finding_of(v_closer) is None
    assert finding_of(v_closer, strict=True).kind is FindingKind.FP32_ULP
    assert finding_of(v_worse).kind is FindingKind.FP32_ULP


def test_errors_are_findings_and_verdicts_round_trip():
    v = Verdict(Status.COMPILE_ERROR, error_type="BackendCompilerFailed(PlantedCompileError)", error_message="x")
    f = finding_of(v)
    assert f.kind is FindingKind.COMPILE_ERROR and "PlantedCompileError" in f.triage
    a = torch.randn(64).bfloat16()
    b = a.clone()
    b[3] = -b[3]
    full = Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(a, b, a.double())),))
    assert Verdict.from_dict(full.to_dict()) == full
    assert finding_of(Verdict(Status.NONDETERMINISTIC)) is None


def test_target_score_rewards_findings_in_whole_octaves_and_ignores_fp32_noise():
    ref = torch.linspace(1, 2, 1000, dtype=torch.float64)
    eager = ref.float()
    closer = eager.clone()
    closer[0] = _next_up(closer[:1])[0]
    noise = Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(eager, closer, ref)),))
    assert target_score(noise, finding_of(noise)) == 0.0  # fp32 noise must not steer the search

    def bf16_off_by(ulps: int) -> Verdict:
        a = torch.linspace(1, 2, 64).bfloat16()
        b = a.clone()
        b.view(torch.int16)[5] += ulps
        return Verdict(Status.DIVERGED, outputs=(OutputVerdict("y", float_cmp=compare_float(a, b, a.double())),))

    scores = {u: target_score(bf16_off_by(u), finding_of(bf16_off_by(u))) for u in (1, 2, 3, 4, 7, 8)}
    assert scores == {1: 1.0, 2: 2.0, 3: 2.0, 4: 3.0, 7: 3.0, 8: 4.0}

    e = torch.tensor([3, 4, 5], dtype=torch.uint8)
    flipped = Verdict(Status.DIVERGED, outputs=(OutputVerdict("q", int_cmp=compare_int(e, e + torch.tensor([0, 2, 0], dtype=torch.uint8), None)),))
    assert target_score(flipped, finding_of(flipped)) == 5.0  # 8 x step 2 = 2^4
