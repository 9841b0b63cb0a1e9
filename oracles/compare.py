"""Judging one output: eager vs compiled, each against the float64 reference.

`compare_float` and `compare_int` are pure: tensors in, a frozen comparison out. They reduce on the
tensors' own device and read back one small vector of scalars.
"""

from __future__ import annotations

import torch

from divfuzz.oracles.boundary import MANTISSA_BITS, ulp_of
from divfuzz.oracles.severity_policy import FEW_ULPS
from divfuzz.oracles.ulp import nan_inf_mismatch, ulp_distance
from divfuzz.records.verdict import FloatComparison, IntComparison

# Upper edges (inclusive) of the ULP histogram's bins; the last bin is open.
ULP_BIN_EDGES = (1, 2, 4, 16, 256)
ULP_BIN_LABELS = ("1", "2", "3-4", "5-16", "17-256", ">256")

# Triage: compiled is "worse" (or "closer") when its summed error over the differing elements is
# more than this factor away from eager's.
TRIAGE_FACTOR = 1.05
# An integer flip whose pre-image lies within this many ULPs of a rounding boundary is "boundary".
BOUNDARY_ULPS = 32.0
# Per element, compiled is "grossly worse" when its error vs fp64, in ULPs of the output dtype at the
# reference (floored at 2**-10 of the tensor's mean magnitude), exceeds both GROSS_MIN_ULPS and GROSS_FACTOR x the largest such error eager makes
# anywhere in the tensor: a handful of badly wrong elements cannot hide in an RMSE over all of them,
# and an output whose eager side is itself only accurate to bf16 (an fp32 result of a bf16
# computation) is measured on that scale.
# The floor is per dtype: in bf16/fp16 16 ULPs is a 6%/1.6% relative error; in fp32 a reassociated
# reduction or decomposition moves results by tens of ULPs routinely, and PyTorch's own accuracy
# checks (`torch._dynamo.utils.same`, tol 1e-4) accept about 1e-4 relative, which is 2**10 fp32 ULPs.
GROSS_MIN_ULPS_BY_DTYPE = {"float32": 1024.0, "float64": 1024.0, "bfloat16": 16.0, "float16": 16.0}
GROSS_MIN_ULPS = 16.0  # any other floating dtype
GROSS_FACTOR = 4.0
# A NaN/Inf in compiled where the exact value lies within this many ULPs of the dtype's largest
# finite value is rounding at the edge of the range (a product that lands on the largest float),
# not a wrong answer: `n_nonfinite_new` leaves it out.
OVERFLOW_EDGE_ULPS = 4.0
# Gross needs the same excess twice: in each element's own ULPs (above) and at the output's scale,
# in ULPs of the dtype at max(|fp64|, RMS of the fp64 output over the whole tensor). A value near
# zero after cancellation has a huge error in its own ULPs and a negligible one at the scale of the
# tensor around it (measured: DESIGN.md, "Errors at the output's scale"). The mirror measure, eager
# grossly further from fp64 than compiled on both scales, is a finding about eager
# (`n_eager_gross_worse`), never about the compiler.
# A deterministic sample of the differing elements' errors vs fp64, (eager, compiled) in ULPs of the
# output dtype (the unit of the gross measures), for the report's per-element scatter: the elements
# where compiled exceeds eager most (ties to the lower index), then an even stride over the
# differing elements; at most the sum of the two, each value kept to 3 significant digits.
ERROR_SAMPLE_TOP = 32
ERROR_SAMPLE_STRIDE = 32


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def compare_float(eager: torch.Tensor, compiled: torch.Tensor, reference: torch.Tensor | None,
                  *, perturbed: list[torch.Tensor] | None = None, boundary_ulps: torch.Tensor | None = None,
                  perturbed_inner: list[torch.Tensor] | None = None, working_dtype: str | None = None) -> FloatComparison:
    """Eager vs compiled in ULPs, plus which of the two is closer to the float64 reference.

    Besides the aggregate triage and RMSEs (what `torch._dynamo.utils.same` looks at), it measures
    per element: how much further from fp64 compiled is than eager (in ULPs of the output dtype
    at the reference value), how many elements are grossly worse, whether an integer-valued
    output (floor, trunc, floor division) is wrong where eager matches fp64, and where compiled
    alone produced NaN/Inf, and a sample of (eager, compiled) per-element errors in ULPs
    (`ERROR_SAMPLE_*`). Every measure is a tensor until one `tolist()` reads them all.

    `reference` None (no fp64 run of this output) compares eager with compiled alone: the ULP
    measures and NaN/Inf placement, triage "unknown", no per-element verdict. `perturbed` are the
    fp64 references on inputs moved by about one ULP (`divfuzz.oracles.conditioning`): where they move the
    reference by at least compiled's difference from eager, a gross or integer-valued-wrong element
    is ill-conditioned (`n_*_ill_conditioned`). `boundary_ulps`, for the output of a rounding op,
    is each element's pre-image distance from where it jumps (`divfuzz.oracles.boundary`): an
    integer-valued-wrong element within `BOUNDARY_ULPS` of it counts in `n_int_wrong_boundary`.
    `perturbed_inner` are references with the intermediates alone moved: the integer-valued-wrong
    elements they move as far count in `n_int_wrong_ill_inner`. `working_dtype`, the coarsest
    float dtype the computation passes through (a bf16 autocast region before a float32 output),
    is the precision eager is held to where compiled alone is NaN/Inf (`n_nonfinite_eager_near`).
    The caller has made dtypes and shapes agree
    (`divfuzz.oracles.judge` judges a mismatch before any value).
    """
    compiled = compiled.to(eager.device)
    if reference is not None:
        reference = reference.to(device=eager.device, dtype=torch.float64)
    dist = ulp_distance(eager, compiled).flatten()
    differs = dist > 0
    naninf = nan_inf_mismatch(eager, compiled)
    zero_sign = ((eager == 0) & (compiled == 0) & (torch.signbit(eager) != torch.signbit(compiled))).flatten()
    if not bool(differs.any() | naninf.any() | zero_sign.any()):  # the common case: bitwise equal, nothing to triage
        return _equal_float(eager)
    dtype = _dtype_name(eager)
    if reference is None:
        return _unreferenced_float(eager, compiled, dist, naninf, dtype)
    e64 = eager.to(torch.float64).flatten()
    c64 = compiled.to(torch.float64).flatten()
    r64 = reference.flatten()
    finite = torch.isfinite(e64) & torch.isfinite(c64) & torch.isfinite(r64)
    err_e = torch.where(finite, (e64 - r64).abs(), torch.zeros_like(r64))
    err_c = torch.where(finite, (c64 - r64).abs(), torch.zeros_like(r64))
    diff_finite = differs & finite
    err_e_ulps, err_c_ulps = _errors_in_ulps(r64, err_e, err_c, finite, dtype)
    err_e_scale, err_c_scale = _errors_at_scale(r64, err_e, err_c, finite, dtype)
    gross, gross_measures = _gross_measures(err_e_ulps, err_c_ulps, err_e_scale, err_c_scale, diff_finite, dtype)
    (int_wrong, nonfinite_new), integral_measures = _integral_measures(e64, c64, r64, diff_finite, dtype, working_dtype)
    nan_lost = naninf.flatten() & torch.isnan(e64) & torch.isnan(r64) & torch.isfinite(c64)
    measures = {
        "n_diff": differs.sum().to(torch.float64),
        "max_ulp": dist.max().to(torch.float64) if dist.numel() else torch.zeros((), dtype=torch.float64, device=dist.device),
        "n_naninf": naninf.sum().to(torch.float64),
        # eager non-finite exactly as fp64 is (NaN as NaN, inf of the same sign), compiled not so
        "n_naninf_eager_exact": (naninf.flatten() & ~torch.isfinite(e64) & ~nan_inf_mismatch(e64, r64)).sum().to(torch.float64),
        # ... of them, eager's NaN is fp64's and compiled holds a number there (a NaN lost)
        "n_nan_lost": nan_lost.sum().to(torch.float64),
        "n_zero_sign": zero_sign.sum().to(torch.float64),
        "n_zero_sign_wrong": (zero_sign & (r64 == 0) & (torch.signbit(r64) == torch.signbit(e64))).sum().to(torch.float64),
        **_error_measures(e64, c64, r64, err_e, err_c, finite, diff_finite),
        **gross_measures,
        **integral_measures,
        **_conditioning_measures(c64, e64, r64, perturbed, gross, int_wrong, nonfinite_new),
        "n_nan_lost_ill": _finite_when_moved(perturbed, nan_lost, r64),
        "n_int_wrong_ill_inner": _conditioning_measures(c64, e64, r64, perturbed_inner, gross, int_wrong, nonfinite_new)["n_int_wrong_ill"],
        "n_int_wrong_boundary": _near_boundary(int_wrong, boundary_ulps),
        **_histogram(dist),
    }
    values = torch.cat([torch.stack(list(measures.values())), _error_sample(err_e_ulps, err_c_ulps, diff_finite)]).tolist()
    m = dict(zip(measures, values))
    return FloatComparison(
        dtype=dtype,
        numel=eager.numel(),
        n_diff=int(m["n_diff"]),
        max_ulp=int(m["max_ulp"]),
        ulp_histogram=tuple((label, int(m[f"bin {label}"])) for label in ULP_BIN_LABELS),
        nan_inf_mismatch=int(m["n_naninf"]),
        n_naninf_eager_exact=int(m["n_naninf_eager_exact"]),
        n_nan_lost=int(m["n_nan_lost"]),
        n_zero_sign=int(m["n_zero_sign"]),
        n_zero_sign_wrong=int(m["n_zero_sign_wrong"]),
        triage=_triage(m["n_diff"], m["sum_e"], m["sum_c"]),
        n_worse=int(m["n_worse"]),
        n_closer=int(m["n_closer"]),
        rmse_eager=float(m["rmse_e"]),
        rmse_compiled=float(m["rmse_c"]),
        max_abs_diff=float(m["max_abs"]),
        n_gross_worse=int(m["n_gross"]),
        max_excess_ulps=float(m["max_excess"]),
        eager_max_err_ulps=float(m["eager_max"]),
        integral=bool(m["integral"]),
        n_int_wrong=int(m["n_int_wrong"]) if m["integral"] else 0,
        n_nonfinite_new=int(m["n_nonfinite_new"]),
        n_nonfinite_eager_near=int(m["n_nonfinite_eager_near"]),
        n_int_wrong_ill_inner=int(m["n_int_wrong_ill_inner"]) if m["integral"] else 0,
        n_int_eager_missed=int(m["n_int_eager_missed"]) if m["integral"] else -1,
        n_int_compiled_missed=int(m["n_int_compiled_missed"]) if m["integral"] else -1,
        error_sample=_sample_pairs(values[len(measures):]),
        max_excess_scale_ulps=float(m["max_excess_scale"]),
        n_eager_gross_worse=int(m["n_eager_gross"]),
        conditioning_draws=len(perturbed or ()),
        n_gross_ill_conditioned=int(m["n_gross_ill"]),
        n_int_wrong_ill_conditioned=int(m["n_int_wrong_ill"]) if m["integral"] else 0,
        n_int_wrong_boundary=int(m["n_int_wrong_boundary"]) if m["integral"] else 0,
        n_nonfinite_ill_conditioned=int(m["n_nonfinite_ill"]),
        n_nan_lost_ill_conditioned=int(m["n_nan_lost_ill"]),
        max_reference_shift=float(m["max_ref_shift"]),
        reference_rms=float(m["rms_ref"]),
    )


def _error_measures(e64, c64, r64, err_e, err_c, finite, diff_finite) -> dict[str, torch.Tensor]:
    """Each side's error vs fp64 (errors count only where all three are finite): how many
    differing elements each side wins, the summed errors over them, RMSEs, the largest gap, and
    the fp64 output's own RMS (its scale)."""
    n_finite = finite.sum().clamp(min=1).to(torch.float64)
    zero = torch.zeros((), dtype=torch.float64, device=e64.device)
    return {
        "n_worse": (diff_finite & (err_c > err_e)).sum().to(torch.float64),
        "n_closer": (diff_finite & (err_c < err_e)).sum().to(torch.float64),
        "sum_e": torch.where(diff_finite, err_e, torch.zeros_like(err_e)).sum(),
        "sum_c": torch.where(diff_finite, err_c, torch.zeros_like(err_c)).sum(),
        "rmse_e": (err_e.pow(2).sum() / n_finite).sqrt(),
        "rmse_c": (err_c.pow(2).sum() / n_finite).sqrt(),
        "rms_ref": (torch.where(finite, r64, torch.zeros_like(r64)).pow(2).sum() / n_finite).sqrt(),
        "max_abs": torch.where(diff_finite, (e64 - c64).abs(), torch.zeros_like(e64)).max() if e64.numel() else zero,
    }


def _errors_in_ulps(r64, err_e, err_c, finite, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each side's per-element error vs fp64 in ULPs of the output dtype at the fp64 value.
    Elements near zero relative to the tensor's scale (cancellation) are measured at a floor of
    2**-10 x its mean magnitude, so one of them cannot inflate eager's worst error and hide the rest."""
    n_finite = finite.sum().clamp(min=1).to(torch.float64)
    mag = torch.where(finite, r64.abs(), torch.zeros_like(r64))
    floor = mag.sum() / n_finite * 2.0**-10
    unit = ulp_of(torch.maximum(mag, floor), dtype)
    return err_e / unit, err_c / unit


def _errors_at_scale(r64, err_e, err_c, finite, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each side's per-element error vs fp64 in ULPs of the output dtype at max(|fp64|, the RMS of
    the fp64 output over its finite elements): the error as the tensor around it sees it."""
    n_finite = finite.sum().clamp(min=1).to(torch.float64)
    mag = torch.where(finite, r64.abs(), torch.zeros_like(r64))
    rms = (mag.pow(2).sum() / n_finite).sqrt()
    unit = ulp_of(torch.maximum(mag, rms), dtype)
    return err_e / unit, err_c / unit


def _gross_measures(err_e_ulps, err_c_ulps, err_e_scale, err_c_scale, diff_finite, dtype: str):
    """Per element, on both scales (`_errors_in_ulps`, `_errors_at_scale`): the elements where
    compiled is grossly further from fp64 (`GROSS_*`, on both), the mirror for eager, the largest
    excess of compiled over eager on each scale, eager's own worst error. Returns the gross mask
    too (the conditioning check looks at those elements)."""
    zero = torch.zeros((), dtype=torch.float64, device=err_e_ulps.device)
    gross_min = GROSS_MIN_ULPS_BY_DTYPE.get(dtype, GROSS_MIN_ULPS)

    def worst(x):
        return x.max() if x.numel() else zero

    def grossly_beyond(mine, theirs):
        return mine > torch.clamp(GROSS_FACTOR * worst(theirs), min=gross_min)

    gross = diff_finite & grossly_beyond(err_c_ulps, err_e_ulps) & grossly_beyond(err_c_scale, err_e_scale)
    eager_gross = diff_finite & grossly_beyond(err_e_ulps, err_c_ulps) & grossly_beyond(err_e_scale, err_c_scale)
    minus_inf = torch.full_like(err_c_ulps, -float("inf"))
    excess = torch.where(diff_finite, err_c_ulps - err_e_ulps, minus_inf)
    excess_scale = torch.where(diff_finite, err_c_scale - err_e_scale, minus_inf)
    return gross, {
        "n_gross": gross.sum().to(torch.float64),
        "max_excess": worst(excess).clamp(min=0),
        "eager_max": worst(err_e_ulps).to(torch.float64),
        "max_excess_scale": worst(excess_scale).clamp(min=0),
        "n_eager_gross": eager_gross.sum().to(torch.float64),
    }


def _near_boundary(int_wrong: torch.Tensor, boundary_ulps: torch.Tensor | None) -> torch.Tensor:
    """How many of the `int_wrong` elements have a pre-image within `BOUNDARY_ULPS` of a jump
    (0 without distances, or with distances of another shape)."""
    if boundary_ulps is None or boundary_ulps.numel() != int_wrong.numel():
        return torch.zeros((), dtype=torch.float64, device=int_wrong.device)
    near = boundary_ulps.to(int_wrong.device).flatten() <= BOUNDARY_ULPS
    return (int_wrong & near).sum().to(torch.float64)


def _finite_when_moved(perturbed, mask, r64) -> torch.Tensor:
    """How many `mask` elements (fp64 NaN) some fp64 reference on inputs moved by about one ULP makes
    finite: a NaN that hangs on a rounding (a variance a hair below zero), not the definition's."""
    zero = torch.zeros((), dtype=torch.float64, device=r64.device)
    if not perturbed:
        return zero
    finite = torch.zeros_like(mask)
    for p in perturbed:
        finite |= torch.isfinite(p.to(device=r64.device, dtype=torch.float64).flatten())
    return (mask & finite).sum().to(torch.float64)


def _conditioning_measures(c64, e64, r64, perturbed, gross, int_wrong, nonfinite_new) -> dict[str, torch.Tensor]:
    """How many gross, integer-valued-wrong and new-NaN/Inf elements are ill-conditioned: some fp64
    reference on inputs moved by about one ULP (`perturbed`) lies at least as far from this
    reference as compiled lies from eager (for a NaN/Inf: the moved reference is not finite
    either). Zeros when nothing was perturbed."""
    zero = torch.zeros((), dtype=torch.float64, device=r64.device)
    if not perturbed:
        return {"n_gross_ill": zero, "n_int_wrong_ill": zero, "n_nonfinite_ill": zero, "max_ref_shift": zero}
    shift = torch.zeros_like(r64)
    for p in perturbed:
        moved = (p.to(device=r64.device, dtype=torch.float64).flatten() - r64).abs()
        shift = torch.maximum(shift, torch.where(torch.isfinite(moved), moved, torch.full_like(moved, float("inf"))))
    ill = shift >= torch.nan_to_num((c64 - e64).abs(), nan=float("inf"))
    finite_shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return {
        "n_gross_ill": (gross & ill).sum().to(torch.float64),
        "n_int_wrong_ill": (int_wrong & ill).sum().to(torch.float64),
        "n_nonfinite_ill": (nonfinite_new & ill).sum().to(torch.float64),
        "max_ref_shift": finite_shift.max() if finite_shift.numel() else zero,
    }


def _error_sample(err_e_ulps, err_c_ulps, diff_finite) -> torch.Tensor:
    """Candidate rows (index, kept, eager ULPs, compiled ULPs), flattened: the `ERROR_SAMPLE_TOP`
    largest excesses of compiled over eager (ties go to the lower index), then
    `ERROR_SAMPLE_STRIDE` elements at an even stride over the differing ones. Rows with kept = 0
    (not a differing element) are padding; `_sample_pairs` drops them and repeats on the host.
    Linear passes only (no sort, no host read): the k-th largest excess is a threshold."""
    n = diff_finite.numel()
    k = min(ERROR_SAMPLE_TOP, n)
    excess = torch.where(diff_finite, err_c_ulps - err_e_ulps, torch.full_like(err_c_ulps, -float("inf")))
    kth = torch.topk(excess, k).values[-1]
    at_kth = excess == kth
    top_mask = (excess > kth) | (at_kth & (at_kth.cumsum(0) <= k - (excess > kth).sum()))
    top = _nth_true(top_mask, torch.arange(k, device=excess.device))
    n_diff = diff_finite.sum()
    ranks = torch.arange(ERROR_SAMPLE_STRIDE, device=excess.device) * n_diff // ERROR_SAMPLE_STRIDE
    stride = _nth_true(diff_finite, ranks)
    picked = torch.cat([top, stride])
    kept = diff_finite[picked] & torch.cat([torch.ones_like(top, dtype=torch.bool), ranks < n_diff])
    rows = [picked.to(torch.float64), kept.to(torch.float64), err_e_ulps[picked].to(torch.float64), err_c_ulps[picked].to(torch.float64)]
    return torch.stack(rows, dim=1).flatten()


def _nth_true(mask, ranks):
    """The index of the r-th (from 0) True element of a 1-d mask, for each r (clamped in range)."""
    return torch.searchsorted(mask.cumsum(0), ranks + 1).clamp(max=mask.numel() - 1)


def _sample_pairs(values: list) -> tuple:
    """The (eager, compiled) error pairs of `_error_sample`'s rows: kept rows only, each element
    once, in row order, 3 significant digits (a verdict stays small: at most 64 short pairs)."""
    seen, pairs = set(), []
    for i in range(0, len(values) - 3, 4):
        index, kept, e, c = values[i : i + 4]
        if kept and index not in seen and e == e and c == c and abs(e) != float("inf") and abs(c) != float("inf"):
            seen.add(index)
            pairs.append((float(f"{e:.3g}"), float(f"{c:.3g}")))
    return tuple(pairs)


def _integral_measures(e64, c64, r64, diff_finite, dtype: str, working_dtype: str | None = None):
    """Integer-valued outputs (floor, trunc, floor division): whether eager and fp64 are all
    integers, where compiled is off by a whole step while eager matches fp64; and where compiled
    alone is NaN/Inf. Returns the wrong-element mask too."""
    fin_e = torch.isfinite(e64)
    fin_r = torch.isfinite(r64)
    integral_mask = ~(fin_e & fin_r) | ((e64 == e64.round()) & (r64 == r64.round()))
    # Integer values say something only where the format could hold a fraction (|x| < 2**mantissa
    # bits) and the value is not 0 (an all-zero LayerNorm row is "integral" by accident).
    mantissa_bits = MANTISSA_BITS[dtype]
    informative = fin_e & fin_r & (e64 != 0) & (e64.abs() < 2.0**mantissa_bits)
    # An integer-valued output is wrong by a whole step: compiled is an integer too, and another one.
    int_wrong = diff_finite & (e64 == r64) & (c64 != r64) & (c64 == c64.round()) & (e64.abs() < 2.0**mantissa_bits)
    # NaN/Inf in compiled alone, except where the exact value lies within `OVERFLOW_EDGE_ULPS` of the
    # dtype's largest finite value: rounding at the edge of the range, not a wrong answer.
    edge = torch.finfo(getattr(torch, dtype)).max * (1.0 - OVERFLOW_EDGE_ULPS * 2.0 ** -mantissa_bits)
    nonfinite_new = fin_e & fin_r & ~torch.isfinite(c64) & (r64.abs() < edge)
    # Where compiled alone is NaN/Inf: is eager, in the precision the graph works in (the output's,
    # or a coarser one it passes through), within a few ULPs of fp64 there (floored near zero as
    # `_errors_in_ulps` floors)? Where it is not, the formula is unstable in this precision, and
    # which elements end NaN/Inf is rounding.
    both = fin_e & fin_r
    mag = torch.where(both, r64.abs(), torch.zeros_like(r64))
    coarse = working_dtype if working_dtype in MANTISSA_BITS and MANTISSA_BITS[working_dtype] < mantissa_bits else dtype
    unit = ulp_of(torch.maximum(mag, mag.sum() / both.sum().clamp(min=1).to(torch.float64) * 2.0**-10), coarse)
    eager_near = both & ((e64 - r64).abs() <= FEW_ULPS * unit)
    # Who misses the fp64 integer where the two sides differ (finite on all three): an element
    # where they agree says nothing of the compiler, and counting it would count every gap between
    # eager's semantics and the reference's (a decimal grid divided by 0.1, which eager divides by
    # 0.1 rounded to float32).
    judged = diff_finite & (r64.abs() < 2.0**mantissa_bits)
    return (int_wrong, nonfinite_new), {
        "integral": (integral_mask.all() & informative.any()).to(torch.float64),
        "n_int_wrong": int_wrong.sum().to(torch.float64),
        "n_nonfinite_new": nonfinite_new.sum().to(torch.float64),
        "n_nonfinite_eager_near": (nonfinite_new & eager_near).sum().to(torch.float64),
        "n_int_eager_missed": (judged & (e64 != r64)).sum().to(torch.float64),
        "n_int_compiled_missed": (judged & (c64 != r64)).sum().to(torch.float64),
    }


def _histogram(dist: torch.Tensor) -> dict[str, torch.Tensor]:
    """How many elements fall in each ULP bin (`ULP_BIN_EDGES`), keyed "bin <label>"."""
    edges = torch.tensor((0,) + ULP_BIN_EDGES, device=dist.device)
    bins = [((dist > lo) & (dist <= hi)).sum() for lo, hi in zip(edges[:-1], edges[1:])]
    bins.append((dist > ULP_BIN_EDGES[-1]).sum())
    return {f"bin {label}": b.to(torch.float64) for label, b in zip(ULP_BIN_LABELS, bins)}


def _triage(n_diff: float, sum_e: float, sum_c: float) -> str:
    """Which side is closer to fp64 over the differing elements, by `TRIAGE_FACTOR`."""
    if n_diff == 0:
        return "equal"
    if sum_c > sum_e * TRIAGE_FACTOR:
        return "compiled-worse"
    if sum_c * TRIAGE_FACTOR < sum_e:
        return "compiled-closer"
    return "same"


def _unreferenced_float(eager, compiled, dist, naninf, dtype: str) -> FloatComparison:
    """Eager vs compiled with no fp64 reference: what the ULP distance alone says."""
    n_diff, max_ulp, n_naninf, max_abs, *bins = torch.stack([
        (dist > 0).sum().to(torch.float64),
        dist.max().to(torch.float64),
        naninf.sum().to(torch.float64),
        torch.nan_to_num((eager.to(torch.float64) - compiled.to(torch.float64)).abs(), nan=0.0, posinf=0.0).max(),
        *_histogram(dist).values(),
    ]).tolist()
    return FloatComparison(
        dtype=dtype, numel=eager.numel(), n_diff=int(n_diff), max_ulp=int(max_ulp),
        ulp_histogram=tuple((label, int(b)) for label, b in zip(ULP_BIN_LABELS, bins)),
        nan_inf_mismatch=int(n_naninf), triage="unknown", n_worse=0, n_closer=0,
        rmse_eager=0.0, rmse_compiled=0.0, max_abs_diff=float(max_abs),
    )


def _equal_float(t: torch.Tensor) -> FloatComparison:
    return FloatComparison(
        dtype=_dtype_name(t),
        numel=t.numel(),
        n_diff=0,
        max_ulp=0,
        ulp_histogram=tuple((label, 0) for label in ULP_BIN_LABELS),
        nan_inf_mismatch=0,
        triage="equal",
        n_worse=0,
        n_closer=0,
        rmse_eager=0.0,
        rmse_compiled=0.0,
        max_abs_diff=0.0,
    )


def compare_int(
    eager: torch.Tensor,
    compiled: torch.Tensor,
    boundary_ulps: torch.Tensor | None,
    *,
    reference: torch.Tensor | None = None,
    boundary_threshold: float = BOUNDARY_ULPS,
    perturbed: list[torch.Tensor] | None = None,
    perturbed_inner: list[torch.Tensor] | None = None,
) -> IntComparison:
    """Flips of an integer output, each placed by its pre-image's distance from a rounding boundary.

    `boundary_ulps` (from `divfuzz.oracles.boundary`) is NaN where the pre-image was NaN, Inf or out of
    range: those flips are `undefined_flips` (an undefined cast), neither boundary nor gross.
    `reference`, the integer computed in float64, gives the fp64 verdict over the flips.
    `perturbed` are that integer computed on inputs moved by about one ULP (`divfuzz.oracles.conditioning`):
    a flip far from a boundary whose fp64 integer itself changes under them is ill-conditioned
    (`gross_ill_conditioned`); `perturbed_inner`, with the intermediates alone moved, count in
    `gross_ill_inner`.
    """
    compiled = compiled.to(device=eager.device, dtype=eager.dtype)
    flips = (eager != compiled).flatten()
    step = (eager.to(torch.int64) - compiled.to(torch.int64)).abs().flatten()
    zero = torch.zeros((), dtype=torch.float64, device=eager.device)
    undefined, extra = _boundary_measures(flips, boundary_ulps, boundary_threshold, zero)
    verdict = _fp64_int_measures(eager, compiled, reference, flips & ~undefined, zero)
    missed = _fp64_int_misses(eager, compiled, reference, flips & ~undefined, zero)
    far = flips & (boundary_ulps.to(flips.device).flatten() > boundary_threshold) if boundary_ulps is not None else flips & ~undefined
    ill = _int_ill_conditioned(reference, perturbed, far, zero)
    ill_inner = _int_ill_conditioned(reference, perturbed_inner, far, zero)
    vals = torch.stack(
        [flips.sum().to(torch.float64), step.max().to(torch.float64) if step.numel() else zero, *extra, *verdict, ill, ill_inner,
         *missed]
    ).tolist()
    n_flips, max_step, near_n, far_n, min_d, undefined_n, c_ok_n, e_ok_n, neither_n, ill_n, ill_inner_n, e_miss, c_miss = vals
    known = boundary_ulps is not None
    defined = int(n_flips) - int(undefined_n)
    return IntComparison(
        dtype=_dtype_name(eager),
        numel=eager.numel(),
        flips=int(n_flips),
        max_step=int(max_step),
        boundary_flips=int(near_n) if known else 0,
        gross_flips=int(far_n) if known else 0,
        unknown_flips=0 if known else int(n_flips),
        min_boundary_ulps=(float(min_d) if known and defined > 0 else None),
        undefined_flips=int(undefined_n),
        fp64_known=reference is not None and reference.shape == eager.shape,
        compiled_correct=int(c_ok_n),
        eager_correct=int(e_ok_n),
        neither_correct=int(neither_n),
        conditioning_draws=len(perturbed or ()) if reference is not None else 0,
        gross_ill_conditioned=int(ill_n),
        gross_ill_inner=int(ill_inner_n),
        eager_missed=int(e_miss) if e_miss >= 0 else -1,
        compiled_missed=int(c_miss) if c_miss >= 0 else -1,
    )


def _int_ill_conditioned(reference, perturbed, far, zero) -> torch.Tensor:
    """How many of the `far` flips (far from a boundary, or of unknown distance) have an fp64
    integer that itself changes on inputs moved by about one ULP."""
    if reference is None or not perturbed:
        return zero
    r = reference.flatten().to(torch.float64)
    moved = torch.zeros_like(far)
    for p in perturbed:
        if p.shape == reference.shape:
            moved |= p.flatten().to(device=r.device, dtype=torch.float64) != r
    return (far & moved.to(far.device)).sum().to(torch.float64)


def _boundary_measures(flips, boundary_ulps, boundary_threshold: float, zero) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Where flips are undefined casts (NaN distance), and over the flips: how many sit within
    `boundary_threshold` ULPs of a boundary, how many beyond, the smallest defined distance, how
    many are undefined. All zero when no distances are known."""
    if boundary_ulps is None:
        return torch.zeros_like(flips), [zero, zero, zero, zero]
    d = boundary_ulps.to(flips.device).flatten()
    undefined = flips & torch.isnan(d)
    near = flips & (d <= boundary_threshold)
    far = flips & (d > boundary_threshold)
    min_d = torch.where(flips & ~undefined, d, torch.full_like(d, float("inf"))).min() if d.numel() else zero
    return undefined, [near.sum().to(torch.float64), far.sum().to(torch.float64), min_d.to(torch.float64), undefined.sum().to(torch.float64)]


def _fp64_int_misses(eager, compiled, reference, judged, zero) -> list[torch.Tensor]:
    """Over the `judged` flips whose integer computed in float64 is finite: how many eager's
    integer misses, how many compiled's does (both -1 without a reference of eager's shape). Only
    flips: where the two sides agree, a miss is no difference of the compiler's."""
    if reference is None or reference.shape != eager.shape:
        return [zero - 1, zero - 1]
    r = reference.to(device=eager.device).flatten().double()
    known = judged & torch.isfinite(r)
    return [(known & (eager.flatten().double() != r)).sum().to(torch.float64),
            (known & (compiled.flatten().double() != r)).sum().to(torch.float64)]


def _fp64_int_measures(eager, compiled, reference, judged, zero) -> list[torch.Tensor]:
    """Over the `judged` flips, against the integer computed in float64: how many compiled gets
    right, how many eager gets right, how many neither (all zero without a reference of eager's shape)."""
    if reference is None or reference.shape != eager.shape:
        return [zero, zero, zero]
    r = reference.to(device=eager.device).flatten()
    r = torch.where(torch.isfinite(r.double()), r.double(), torch.full_like(r.double(), float("nan")))
    c_ok = compiled.flatten().double() == r
    e_ok = eager.flatten().double() == r
    return [
        (judged & c_ok).sum().to(torch.float64),
        (judged & e_ok).sum().to(torch.float64),
        (judged & ~c_ok & ~e_ok).sum().to(torch.float64),
    ]
