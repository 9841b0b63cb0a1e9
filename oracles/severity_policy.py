"""How much a finding is worth a maintainer's time: `bug`, `suspect`, `by-design`, `noise` (or
`eager-worse`, about eager).

One policy, used by every path (campaign, replay, gate, `minimize SPEC`, `minimize --module`). It is
a pure function of a verdict's measures (and, once attribution has run, of the culprit), and it
returns its reason as data (`SeverityReason`): a stable rule id, the output it is about, and a
sentence with the numbers. This module imports no torch: verdicts are read by their attributes.

The rules follow what PyTorch's maintainers apply (`torch._dynamo.utils.same` with an fp64
reference; the numerical-accuracy notes; issues closed as expected), in this order:
- a compiled output of another dtype or shape than eager's is a `bug` before any value is judged;
- wrong answers are `bug`s: errors, crashes, hangs; NaN/Inf where eager and fp64 are finite; integer
  results (or integer-valued floats: floor, trunc, floor division) where compiled disagrees with
  both eager and fp64 away from a rounding boundary; elements where compiled is grossly further
  from fp64 than eager, in their own ULPs *and* at the output's scale (`divfuzz.oracles.compare`);
- but a bug rule an ill-conditioned input can fake (`CONDITIONED_RULES`) is `suspect` when every
  element it names moves as far in fp64 when the inputs move by one ULP (`divfuzz.oracles.conditioning`);
- compiled closer to fp64 than eager over the output, with no grossly worse element, is `noise`:
  `same()` accepts it, and so do maintainers. Eager grossly further from fp64 than compiled is
  `eager-worse`, a finding about eager that is never counted with the compiler's;
- fused kernels that skip eager's intermediate bf16/fp16 roundings are documented behaviour, and
  `emulate_precision_casts` exists to undo them: what that knob removes is `by-design`;
- a difference `same()` accepts (RMSE up to 2x eager's, 3x for bf16/fp16) is `noise` when it is a
  few ULPs on a handful of elements (at most 1%), or when its dtype has no precision knob
  (fp32/fp64: reduction order, decompositions); anything else that diverges is `suspect`.

Perf verdicts (`--oracle perf`, `divfuzz.oracles.perf`): compiled slower than eager with the whole
confidence interval past twice the noise margin and at least 10 % is a `bug` (PyTorch labels
compiled-slower-than-eager a performance bug); any other slowdown the rule finds is `suspect`; a slowdown no
larger than the compiled wrapper's measured fixed per-call cost (guards, autograd wrapper) on a
graph too small to pay it back is `by-design` (`mode="reduce-overhead"` is the documented answer).
"""

from __future__ import annotations

from divfuzz.oracles.findings import finding_of
from divfuzz.oracles.mechanisms import mechanism_severity, switch_mechanism_severity
from divfuzz.oracles.perf import is_slower
from divfuzz.records.outcomes import COMPILER_FAILURES, Status
from divfuzz.records.severity import ORDER, BucketSeverity, Severity, SeverityReason


# A difference of at most this many ULPs (bf16/fp16/fp32 output) counts as "a few ULPs".
FEW_ULPS = 4
# ... on "a handful of elements": at most this fraction of the output. More is systematic (a fused
# kernel skipping a rounding everywhere), worth attributing: a knob may explain it (by-design).
NOISE_FRACTION = 0.01
# same()'s RMSE multipliers: compiled's RMSE vs fp64 may be this multiple of eager's.
SAME_MULTIPLIER = {"float32": 2.0, "float64": 2.0, "bfloat16": 3.0, "float16": 3.0}
# ... 3x for any tensor of fewer elements than this (same(): noise dominates small tensors) ...
SAME_SMALL_TENSOR = 1000
# ... plus same()'s absolute slack, tol / 10 with its default tol of 1e-4, here relative to the fp64
# output's RMS (same() assumes O(1) outputs). Applied to fp32/fp64 only (`NO_PRECISION_KNOB`): a
# bf16/fp16 difference is far above it and belongs to attribution.
SAME_SLACK_RELATIVE = 1e-5
# When eager itself is this far from fp64 (relative to the output's scale) somewhere in the output,
# the input is ill-conditioned for this graph in this precision (a norm over a near-constant row):
# compiled being further still is `suspect`, not proof of a wrong answer.
ILL_CONDITIONED_RELATIVE = 2.0**-6
_MANTISSA_BITS = {"float32": 23, "float64": 52, "bfloat16": 7, "float16": 10}

# Output dtypes with no documented precision knob behind a systematic difference (nothing like
# emulate_precision_casts for bf16/fp16 roundings): a difference there that same() accepts and that
# has no grossly-worse element is reduction order or a decomposition, `noise`, not worth a repro.
NO_PRECISION_KNOB = frozenset({"float32", "float64"})
# Bug rules an ill-conditioned input can fake: checked against perturbed inputs (`divfuzz.oracles.judge`).
CONDITIONED_RULES = frozenset({"nan-inf-new", "nan-inf-lost", "float-gross-worse", "int-valued-wrong", "int-gross"})
# An output is ill-conditioned when at least this share of the elements a bug rule names move in
# fp64 as far as compiled differs (a few random draws miss some ill-conditioned elements) ...
ILL_MAJORITY = 0.5
# ... unless eager, in the same precision, gets at least this share of the differing discrete
# answers exactly right: then the precision suffices, and compiled's miss is the compiler's.
EAGER_EXACT_FRACTION = 0.9
# The other side of that guard: where, of the elements on which the two differ, eager in the same
# precision misses the integer computed in fp64 on at least this share as many as compiled misses
# it, the integers are decided
# by rounding in that precision (a floor of a long cancelling sum, an argmax over sums that are
# equal in exact arithmetic): compiled's misses are the same roundings taken another way. A
# compiler that misses more than twice as often as eager is still the compiler's. Grounding:
# issue 143182 (judge compiled by fp64 against eager's own error), 99879 (ties after a reduction:
# no index is guaranteed), 189787 (a floor of a sum at a boundary is a numerics discrepancy).
EAGER_MISS_SHARE = 0.5

# Documented precision switches: what one removes is a skipped rounding, not a defect.
PRECISION_KNOBS = ("emulate_precision_casts",)



def parse_severity(text: str) -> Severity:
    """`--min-severity` values; raises ValueError naming the value and the choices."""
    try:
        return Severity(text)
    except ValueError:
        raise ValueError(f"Expected a severity in {[s.value for s in ORDER]} but got {text!r}") from None


def _same_multiplier(fc) -> float:
    """same()'s multiplier: 3 for tensors under 1,000 elements (noise dominates them), else per dtype."""
    return 3.0 if fc.numel < SAME_SMALL_TENSOR else SAME_MULTIPLIER.get(fc.dtype, 2.0)


def _same_slack(fc) -> float:
    """same()'s absolute slack (tol / 10), taken at the output's scale for dtypes without a precision knob."""
    return SAME_SLACK_RELATIVE * fc.reference_rms if fc.dtype in NO_PRECISION_KNOB else 0.0


def same_rejects(fc) -> bool:
    """What `torch._dynamo.utils.same` with an fp64 reference would refuse: compiled's RMSE vs fp64
    beyond the multiplier times eager's plus the slack (`SAME_*`), at the output's scale."""
    return fc.rmse_compiled > _same_multiplier(fc) * fc.rmse_eager + _same_slack(fc)


def same_margin(fc) -> tuple[float, float]:
    """(multiplier, absolute slack): how far `same_rejects` lets compiled's RMSE vs fp64 exceed
    eager's for this output (issue.py's `rmse-worse` check prints these numbers)."""
    return _same_multiplier(fc), _same_slack(fc)


def _ill_conditioned(measured: int, ill: int, total: int, eager_exact: int = 0, judged: int = 0, ill_inner: int = 0) -> bool:
    """Conditioning was measured (`measured` draws > 0) and at least `ILL_MAJORITY` of the `total`
    elements a bug rule names are ill-conditioned, and, for discrete answers, eager does not get the
    exact answer on `EAGER_EXACT_FRACTION` of the `judged` ones: where eager, in the same precision,
    computes a sensitive answer exactly (a floor division on its grid), the precision suffices and
    compiled's miss is still the compiler's. Unless the intermediates alone, each moved by one
    rounding step, move that many (`ill_inner`): then the answer hangs on values eager itself
    computes with rounding (an argmin over a layer norm of near-constant rows, fed by an
    interpolation one ULP off), and eager matching fp64 there is luck, not precision."""
    if measured <= 0 or total <= 0 or ill < ILL_MAJORITY * total:
        return False
    if ill_inner >= ILL_MAJORITY * total:
        return True
    return not (judged and eager_exact >= EAGER_EXACT_FRACTION * judged)


def _eager_misses_as_often(eager_missed: int, compiled_missed: int) -> bool:
    """Of the differing elements, eager misses fp64's integer on at least `EAGER_MISS_SHARE` as many
    as compiled (both measured: -1 is a verdict stored before the counts existed, judged as before)."""
    return eager_missed > 0 and compiled_missed > 0 and eager_missed >= EAGER_MISS_SHARE * compiled_missed


# A new NaN/Inf on inputs within this fraction of the dtype's largest finite value is the range's
# edge: four such values overflow when summed, so one evaluation order gives Inf (then Inf - Inf =
# NaN) where another stays finite, and fp64 (which has the range) says nothing about which order
# is right. Seen on the H100: `mean` of three fp32 values near 3.4e38 is NaN compiled, finite
# eager. Inputs a user's model holds are far below it; a compiler that overflows on ordinary
# magnitudes (an fp16 square not upcast) is still `nan-inf-new`.
RANGE_EDGE_FRACTION = 0.25


def _float_reason(name: str, fc) -> SeverityReason | None:
    if fc.n_nonfinite_new and fc.input_peak_fraction >= RANGE_EDGE_FRACTION:
        return SeverityReason(Severity.SUSPECT, "nan-inf-range-edge", name,
                              f"{fc.n_nonfinite_new}/{fc.numel} {fc.dtype} elements are NaN/Inf in compiled where eager and fp64 are "
                              f"finite, but the inputs reach {fc.input_peak_fraction:.2g} of the dtype's largest value: partial "
                              f"results overflow in one evaluation order and not in another")
    if fc.n_nonfinite_new and _ill_conditioned(fc.conditioning_draws, fc.n_nonfinite_ill_conditioned, fc.n_nonfinite_new):
        return SeverityReason(Severity.SUSPECT, "nan-inf-ill-conditioned", name,
                              f"{fc.n_nonfinite_new}/{fc.numel} {fc.dtype} elements are NaN/Inf in compiled where eager and fp64 are "
                              f"finite, but the fp64 value itself is NaN/Inf when the inputs move by one ULP: an ill-conditioned input")
    if fc.n_nonfinite_new and 0 <= fc.n_nonfinite_eager_near < EAGER_EXACT_FRACTION * fc.n_nonfinite_new:
        # The NaN counterpart of the eager-exact guards: a formula unstable in the working
        # precision (E[x^2] - E[x]^2, acos of a rounded cosine) gives NaN on whichever rows its
        # rounding decides; eager, off itself there, is no reference for which (issues 118090,
        # 143182: compiled must diverge more from fp64 than eager; 188430: closed won't fix).
        return SeverityReason(Severity.SUSPECT, "nan-inf-ill-conditioned", name,
                              f"{fc.n_nonfinite_new}/{fc.numel} {fc.dtype} elements are NaN/Inf in compiled where eager and fp64 are "
                              f"finite, but eager is within {FEW_ULPS} ULPs of fp64 on only {fc.n_nonfinite_eager_near} of them: "
                              f"the computation is unstable in {fc.dtype}, and rounding decides which elements end NaN/Inf")
    if fc.n_nonfinite_new:
        return SeverityReason(Severity.BUG, "nan-inf-new", name,
                              f"{fc.n_nonfinite_new}/{fc.numel} {fc.dtype} elements are NaN/Inf in compiled where eager and fp64 are finite")
    if fc.n_nan_lost > 0 and fc.inputs_nonfinite == 0 and fc.input_peak_fraction < RANGE_EDGE_FRACTION:
        # A NaN the graph's own definition gives on finite inputs (the mean of an empty tensor,
        # 0/0, the angle of rsqrt's NaN), which eager and fp64 agree on, and compiled returns a
        # number there: var_mean of an empty tensor giving mean 0. (issue 197108, labelled for
        # release triage, root-caused to the Welford lowering's identity); rsqrt -> angle giving 1
        # for NaN (issue 143978, open). No maintainer has called a lost NaN intended, and no
        # evaluation order makes a NaN finite without its inputs' help. With a NaN or an infinity
        # among the inputs, or inputs at the edge of the range (a cast to float16 of values past
        # 65504 is inf, then inf - inf is NaN, where a fused kernel that skipped the cast stays
        # finite: issue 183607's class, open without a decision), it stays `nan-inf-wrong` below
        # (propagation and the range's edge: split).
        if _ill_conditioned(fc.conditioning_draws, fc.n_nan_lost_ill_conditioned, fc.n_nan_lost):
            # eager and fp64 agree on a NaN that a one-ULP move of the inputs makes finite in fp64 (a
            # variance a hair below zero): the rounding, not the definition, gives it (issue 188430's
            # class, closed won't fix)
            return SeverityReason(Severity.SUSPECT, "nan-inf-ill-conditioned", name,
                                  f"{fc.n_nan_lost}/{fc.numel} {fc.dtype} elements are NaN in eager and fp64 and a number in "
                                  f"compiled, but the fp64 value is finite when the inputs move by one ULP: an ill-conditioned input")
        return SeverityReason(Severity.BUG, "nan-inf-lost", name,
                              f"{fc.n_nan_lost}/{fc.numel} {fc.dtype} elements are NaN in eager and fp64, with every input finite, "
                              f"and a number in compiled: the compiled graph loses a NaN its definition gives")
    if fc.nan_inf_mismatch and fc.n_naninf_eager_exact > 0:
        # Where eager's NaN or infinity is exactly fp64's (NaN as NaN, an infinity of the same
        # sign) and compiled gives another value there, the record is split: a -0.0 whose sign a
        # fused add loses, then reciprocal's +inf for eager's -inf, is open with no maintainer
        # answer (issue 189799), and PR 196031 matches eager's signed zeros only under
        # numerics="strict" ("the default path is unchanged"); an infinity from the inputs or an
        # overflow is the range edge's (issue 173793, split). Suspect; where a precision switch
        # removes it, the rounding decided it (`switch_severity`: a bug).
        return SeverityReason(Severity.SUSPECT, "nan-inf-wrong", name,
                              f"{fc.n_naninf_eager_exact}/{fc.numel} {fc.dtype} elements are NaN/Inf in eager exactly as in fp64 "
                              f"(NaN as NaN, an infinity of the same sign), and compiled gives another value there")
    eager_misses = _eager_misses_as_often(fc.n_int_eager_missed, fc.n_int_compiled_missed)
    if fc.integral and fc.n_int_wrong and fc.triage == "compiled-worse" and not eager_misses:
        if fc.n_int_wrong_boundary >= fc.n_int_wrong:
            # Eager's own input to the rounding op lies a few ULPs from the jump: any implementation
            # whose input differs by a rounding step may land on the other side (a boundary, not a
            # wrong answer). Never a floor division: its pre-image is not a value eager computes.
            return SeverityReason(Severity.SUSPECT, "int-valued-boundary", name,
                                  f"{fc.n_int_wrong}/{fc.numel} integer-valued {fc.dtype} elements differ from eager and fp64, but "
                                  f"each one's pre-image (eager's input to the rounding) lies within a few ULPs of where it jumps")
        if _ill_conditioned(fc.conditioning_draws, fc.n_int_wrong_ill_conditioned, fc.n_int_wrong, fc.n_int_wrong, fc.n_diff,
                            fc.n_int_wrong_ill_inner):
            return SeverityReason(Severity.SUSPECT, "int-valued-ill-conditioned", name,
                                  f"{fc.n_int_wrong}/{fc.numel} integer-valued {fc.dtype} elements differ from eager and fp64, but the fp64 "
                                  f"value itself moves as far when the inputs move by one ULP: an ill-conditioned input")
        return SeverityReason(Severity.BUG, "int-valued-wrong", name,
                              f"{fc.n_int_wrong}/{fc.numel} integer-valued {fc.dtype} elements differ from both eager and fp64 (eager matches fp64), max diff {fc.max_abs_diff:g}")
    if fc.integral and fc.n_int_wrong:
        # Eager misses fp64 about as often as compiled does: the pre-images sit on rounding
        # boundaries (e.g. floor(softmax(x).sum() * 1000)), a last-bit difference made visible.
        counts = (f"of the differing elements, eager misses the fp64 integer on {fc.n_int_eager_missed}, compiled on {fc.n_int_compiled_missed}"
                  if eager_misses else f"{fc.n_worse} compiled-worse, {fc.n_closer} compiled-closer")
        return SeverityReason(Severity.SUSPECT, "int-valued-boundary", name,
                              f"{fc.n_int_wrong}/{fc.numel} integer-valued {fc.dtype} elements flip, but eager misses fp64 as often "
                              f"({counts}): pre-images at rounding boundaries")
    eager_relative = fc.eager_max_err_ulps * 2.0 ** -_MANTISSA_BITS.get(fc.dtype, 23)
    if fc.n_gross_worse and eager_relative > ILL_CONDITIONED_RELATIVE:
        return SeverityReason(Severity.SUSPECT, "gross-worse-ill-conditioned", name,
                              f"{fc.n_gross_worse}/{fc.numel} {fc.dtype} elements are much further from fp64 in compiled "
                              f"(up to {fc.max_excess_ulps:.3g} ULPs more), but eager itself is off by {fc.eager_max_err_ulps:.3g} ULPs "
                              f"({eager_relative:.2g} relative): an ill-conditioned input")
    if fc.n_gross_worse and fc.eager_max_err_ulps > FEW_ULPS and _ill_conditioned(
            fc.conditioning_draws, fc.n_gross_ill_conditioned, fc.n_gross_worse):
        # Only while eager, in the same precision, is off too: where eager computes the sensitive
        # elements to within a few ULPs, the precision suffices and compiled's miss is the
        # compiler's (as `EAGER_EXACT_FRACTION` says for discrete answers).
        return SeverityReason(Severity.SUSPECT, "gross-worse-ill-conditioned", name,
                              f"{fc.n_gross_worse}/{fc.numel} {fc.dtype} elements are much further from fp64 in compiled "
                              f"(up to {fc.max_excess_ulps:.3g} ULPs more), but the fp64 value itself moves as far (up to "
                              f"{fc.max_reference_shift:.3g}) when the inputs move by one ULP: an ill-conditioned input")
    if fc.n_gross_worse:
        return SeverityReason(Severity.BUG, "float-gross-worse", name,
                              f"{fc.n_gross_worse}/{fc.numel} {fc.dtype} elements are grossly further from fp64 in compiled "
                              f"(up to {fc.max_excess_ulps:.3g} ULPs more than eager, whose worst is {fc.eager_max_err_ulps:.3g}; "
                              f"{fc.max_excess_scale_ulps:.3g} ULPs more at the output's scale)")
    if fc.n_zero_sign_wrong and not fc.n_gross_worse and not name.startswith("grad:"):
        # A zero of the other sign where eager's is fp64's: the record is split. minimum(-0.0,
        # +0.0) (issue 185610, PR 185765) and frac(-0.0) (issue 183606, PR 183640) were fixed as
        # bugs, but PR 196031 matches neg's signed zeros only under numerics="strict" ("the default
        # path is unchanged"), and a GELU's -0.0 against a tiny negative was closed as not planned
        # (issue 189804). Suspect, never a bug by itself; a sign that then decides an infinity
        # or an integer is judged there. A gradient's zero is not even that: its sign is how the
        # autograd formula masks (g * 0 or where(mask, g, 0)), and p - lr * g is the same for either.
        return SeverityReason(Severity.SUSPECT, "zero-sign-wrong", name,
                              f"{fc.n_zero_sign_wrong}/{fc.numel} {fc.dtype} zeros have the other sign in compiled, where eager's "
                              f"is fp64's")
    if fc.nan_inf_mismatch:
        return SeverityReason(Severity.SUSPECT, "nan-inf-moved", name,
                              f"{fc.nan_inf_mismatch}/{fc.numel} {fc.dtype} elements change NaN/Inf placement (eager or fp64 not finite there)")
    if not fc.n_diff:
        return None
    multiplier = _same_multiplier(fc)
    spread = f"{fc.n_diff}/{fc.numel} {fc.dtype} elements differ, max {fc.max_ulp} ULP"
    if fc.n_eager_gross_worse:
        return SeverityReason(Severity.EAGER_WORSE, "eager-gross-worse", name,
                              f"{spread}; eager is grossly further from fp64 than compiled on {fc.n_eager_gross_worse} elements "
                              f"(eager's worst {fc.eager_max_err_ulps:.3g} ULPs): a finding about eager, not the compiler")
    few = fc.max_ulp <= FEW_ULPS and fc.n_diff <= NOISE_FRACTION * fc.numel
    if fc.triage == "unknown":
        if few:
            return SeverityReason(Severity.NOISE, "few-ulps-unreferenced", name, f"{spread}; no fp64 reference")
        return SeverityReason(Severity.SUSPECT, "unreferenced", name, f"{spread}; no fp64 reference to say which side is right")
    if fc.triage == "compiled-closer":
        return SeverityReason(Severity.NOISE, "compiled-closer", name,
                              f"{spread}; compiled is closer to fp64 over the output, and no element is grossly further")
    if few and fc.triage == "compiled-worse" and same_rejects(fc):
        # A few ULPs on a handful of elements is noise whatever the RMSE ratio says: where eager
        # equals fp64 rounded (RMSE 0), same() would reject any difference at all. On the H100
        # (seed 241) 2 float16 elements 1 ULP off in 40,960 read rmse-worse, and a decomposition
        # named as their culprit made them a bug (`DECOMPOSITION_DEFECT_RULES`).
        return SeverityReason(Severity.NOISE, "few-ulps", name,
                              f"{spread}; compiled further from fp64 on that handful only (RMSE {fc.rmse_compiled:.3g} against "
                              f"eager's {fc.rmse_eager:.3g})")
    if fc.triage == "compiled-worse" and same_rejects(fc):
        return SeverityReason(Severity.SUSPECT, "rmse-worse", name,
                              f"{spread}; compiled RMSE vs fp64 {fc.rmse_compiled:.3g} > {_same_multiplier(fc):g}x eager's {fc.rmse_eager:.3g}"
                              f" + {_same_slack(fc):.3g}")
    if few:
        return SeverityReason(Severity.NOISE, "few-ulps", name,
                              f"{spread}; compiled {fc.triage} and within same()'s {multiplier:g}x RMSE margin")
    if fc.dtype in NO_PRECISION_KNOB:
        return SeverityReason(Severity.NOISE, "within-same", name,
                              f"{spread}; compiled {fc.triage}, within same()'s {multiplier:g}x RMSE margin and no element grossly "
                              f"further ({fc.max_excess_scale_ulps:.3g} ULPs more at most, at the output's scale)")
    # "many-ulps-worse" when compiled is the side further from fp64, by more than a few ULPs
    # somewhere: a decomposition named as the culprit of such a finding is a defect
    # (`DECOMPOSITION_DEFECT_RULES`). A few ULPs on many elements is "many-ulps" (elements, not
    # ULPs): the order of an accumulation (four float16 rows index_add-ed into one, 2 ULPs apart
    # on the H100) is no decomposition's defect, and same() accepts it.
    if fc.triage == "compiled-worse" and fc.max_ulp > FEW_ULPS:
        return SeverityReason(Severity.SUSPECT, "many-ulps-worse", name, f"{spread}; fp64 triage {fc.triage}")
    return SeverityReason(Severity.SUSPECT, "many-ulps", name, f"{spread}; fp64 triage {fc.triage}")


def _stable_unknown_candidate(ic) -> bool:
    """Integer flips with no pre-image on which fp64 agrees with eager every time: whether they are
    wrong answers or rounding is for the conditioning draws to say (`needs_conditioning`)."""
    defined = ic.flips - ic.undefined_flips
    return bool(ic.unknown_flips and ic.fp64_known and defined and ic.eager_correct == defined)


def needs_conditioning(output) -> bool:
    """Whether the judge should measure `output`'s conditioning (fp64 on inputs moved by one ULP):
    a bug by a rule an ill-conditioned input can fake (`CONDITIONED_RULES`), or integer flips with
    no pre-image that fp64 gives to eager (`_stable_unknown_candidate`), which the draws decide."""
    reason = output_severity(output)
    if reason is not None and reason.severity is Severity.BUG and reason.rule in CONDITIONED_RULES:
        return True
    ic = getattr(output, "int_cmp", None)
    return ic is not None and not ic.conditioning_draws and _stable_unknown_candidate(ic)


def _int_reason(name: str, ic) -> SeverityReason | None:
    defined = ic.flips - ic.undefined_flips
    if ic.flips and not defined:
        return SeverityReason(Severity.NOISE, "undefined-cast", name,
                              f"{ic.flips}/{ic.numel} {ic.dtype} flips all come from NaN/Inf/out-of-range floats cast to an integer (undefined)")
    if not defined:
        return None
    where = f"{defined}/{ic.numel} {ic.dtype} flips, max step {ic.max_step}"
    if ic.fp64_known and ic.compiled_correct == defined:
        return SeverityReason(Severity.NOISE, "compiled-fp64-correct", name, f"{where}; compiled matches the integer computed in fp64 every time")
    wrong = ic.eager_correct + ic.neither_correct if ic.fp64_known else defined
    if _stable_unknown_candidate(ic) and ic.conditioning_draws:
        # No pre-image to measure a boundary by (an integer computed by integer ops, the indices
        # of a pooling), but fp64 agrees with eager on every flip: the conditioning draws then
        # stand in for the distance. Where the fp64 integer stays when the inputs move by one ULP,
        # compiled's other integer is a wrong answer (issue 197434: a max pool's indices on a
        # transposed input; 187018: a sum of uint8 abs values off by 1024).
        if _ill_conditioned(ic.conditioning_draws, ic.gross_ill_conditioned, defined, ic.eager_correct, defined):
            return SeverityReason(Severity.SUSPECT, "int-ill-conditioned", name,
                                  f"{where}; pre-image unknown, but the integer computed in fp64 flips too when the inputs "
                                  f"move by one ULP: an ill-conditioned input")
        return SeverityReason(Severity.BUG, "int-gross", name,
                              f"{where}; pre-image unknown, but the integer computed in fp64 agrees with eager on every flip and "
                              f"stays when the inputs move by one ULP ({ic.conditioning_draws} draws): compiled's integers are wrong")
    if ic.gross_flips and (not ic.fp64_known or wrong) and _ill_conditioned(ic.conditioning_draws, ic.gross_ill_conditioned, ic.gross_flips,
                                                                          ic.eager_correct, defined if ic.fp64_known else 0,
                                                                          ic.gross_ill_inner):
        return SeverityReason(Severity.SUSPECT, "int-ill-conditioned", name,
                              f"{where}; {ic.gross_flips} pre-images far from a rounding boundary, but the integer computed in fp64 "
                              f"flips too when the inputs{' or the values the graph computes' if ic.gross_ill_inner else ''} move by "
                              f"one ULP: an ill-conditioned input")
    if ic.gross_flips and ic.fp64_known and wrong and _eager_misses_as_often(ic.eager_missed, ic.compiled_missed):
        return SeverityReason(Severity.SUSPECT, "int-eager-inexact", name,
                              f"{where}; {ic.gross_flips} pre-images far from a rounding boundary, but of the flips eager misses the "
                              f"integer computed in fp64 on {ic.eager_missed} and compiled on {ic.compiled_missed}: in this "
                              f"precision rounding decides these integers, on both sides")
    if ic.gross_flips and (not ic.fp64_known or wrong):
        return SeverityReason(Severity.BUG, "int-gross", name,
                              f"{where}; {ic.gross_flips} pre-images far from any rounding boundary, compiled disagrees with "
                              f"{'eager and fp64' if ic.fp64_known else 'eager'} ({ic.fp64_triage})")
    if ic.boundary_flips and not ic.gross_flips and not ic.unknown_flips:
        return SeverityReason(Severity.SUSPECT, "int-boundary", name,
                              f"{where}; every pre-image within {ic.min_boundary_ulps:.3g}+ ULPs of a rounding boundary, fp64 verdict {ic.fp64_triage}")
    return SeverityReason(Severity.SUSPECT, "int-flip", name, f"{where}; pre-image unknown, fp64 verdict {ic.fp64_triage}")


# A slowdown a maintainer acts on: the whole interval past twice the noise margin and at least
# this much (10 %, the size of regression PyTorch's benchmark dashboards flag).
MATERIAL_SLOWDOWN = 0.10


def perf_severity(cmp) -> SeverityReason | None:
    """The severity of one timed phase (`PerfComparison`), or None when compiled is not slower."""
    if not is_slower(cmp):
        return None
    what = (f"{cmp.phase}: compiled {cmp.compiled_median_s * 1e3:.3f} ms vs eager {cmp.eager_median_s * 1e3:.3f} ms, "
            f"{cmp.ratio:.2f}x [{cmp.ratio_low:.2f}, {cmp.ratio_high:.2f}] at {cmp.confidence:.0%}, noise margin {cmp.margin:.0%}")
    if cmp.excess_s <= cmp.overhead_s:
        return SeverityReason(Severity.BY_DESIGN, "wrapper-overhead", cmp.phase,
                              f"{what}; the {cmp.excess_s * 1e6:.0f} us excess is within the compiled wrapper's measured "
                              f"{cmp.overhead_s * 1e6:.0f} us per call: a graph too small to pay it back")
    if cmp.ratio_low > 1.0 + max(2 * cmp.margin, MATERIAL_SLOWDOWN):
        return SeverityReason(Severity.BUG, "slower-beyond-noise", cmp.phase, what)
    return SeverityReason(Severity.SUSPECT, "slower-within-noise", cmp.phase, f"{what}; the interval reaches into the noise margin")


def output_severity(output) -> SeverityReason | None:
    """The severity of one `OutputVerdict`, or None when it does not diverge. A dtype or shape
    mismatch is a bug before any value is compared."""
    if getattr(output, "mismatch", None):
        return SeverityReason(Severity.BUG, "output-type-mismatch", output.name,
                              f"compiled returns another type: {output.mismatch}")
    reasons = []
    if output.int_cmp is not None:
        reasons.append(_int_reason(output.name, output.int_cmp))
    if output.float_cmp is not None:
        reasons.append(_float_reason(output.name, output.float_cmp))
    if getattr(output, "strides", None):
        # A returned tensor's strides are a contract only where an op documents them (a view,
        # memory_format): a difference is worth a look, never a wrong answer by itself.
        reasons.append(SeverityReason(Severity.SUSPECT, "stride-mismatch", output.name,
                                      f"compiled returns other strides than eager: {output.strides}"))
    reasons = [r for r in reasons if r is not None]
    return min(reasons, key=_worst_first) if reasons else None


def _worst_first(reason: SeverityReason) -> int:
    """The severity order, except that a finding about eager outranks plain noise: it says more."""
    return len(ORDER) if reason.severity is Severity.NOISE else reason.severity.rank


def _worst_first_about(finding):
    """`_worst_first`, and among reasons of one severity the one about `finding`'s output first:
    a case is bucketed by its finding (`divfuzz.oracles.findings.finding_of`), so its reason names
    the same output whenever that output is as severe as any. Otherwise a bucket of one kind (a
    dtype change of one output) carries the rule of another output, and its minimizer, which keeps
    both the kind and the rule's output, can drop neither."""
    about = finding.output if finding is not None else None
    return lambda reason: (_worst_first(reason), reason.output != about)


_COMPILER_FAILURE_RULES = {status.value: kind.value for status, kind in COMPILER_FAILURES.items()}

# Every rule's severity: a rule names one severity (a test holds this table equal to what the
# rules above emit). A key's severity starts here (`key_severity`).
RULE_SEVERITY: dict[str, Severity] = {
    **{rule: Severity.BUG for rule in _COMPILER_FAILURE_RULES.values()},
    "output-type-mismatch": Severity.BUG, "nan-inf-new": Severity.BUG, "nan-inf-wrong": Severity.SUSPECT, "nan-inf-lost": Severity.BUG,
    "zero-sign-wrong": Severity.SUSPECT,
    "int-valued-wrong": Severity.BUG,
    "float-gross-worse": Severity.BUG, "int-gross": Severity.BUG, "slower-beyond-noise": Severity.BUG,
    "nan-inf-range-edge": Severity.SUSPECT, "nan-inf-ill-conditioned": Severity.SUSPECT,
    "int-valued-ill-conditioned": Severity.SUSPECT, "int-valued-boundary": Severity.SUSPECT,
    "gross-worse-ill-conditioned": Severity.SUSPECT, "nan-inf-moved": Severity.SUSPECT, "unreferenced": Severity.SUSPECT,
    "rmse-worse": Severity.SUSPECT, "many-ulps": Severity.SUSPECT, "many-ulps-worse": Severity.SUSPECT, "int-ill-conditioned": Severity.SUSPECT,
    "int-eager-inexact": Severity.SUSPECT,
    "int-boundary": Severity.SUSPECT, "int-flip": Severity.SUSPECT, "slower-within-noise": Severity.SUSPECT,
    "stride-mismatch": Severity.SUSPECT, "recompile": Severity.SUSPECT,
    "precision-knob": Severity.BY_DESIGN, "wrapper-overhead": Severity.BY_DESIGN,
    "few-ulps-unreferenced": Severity.NOISE, "compiled-closer": Severity.NOISE, "few-ulps": Severity.NOISE,
    "within-same": Severity.NOISE, "undefined-cast": Severity.NOISE, "compiled-fp64-correct": Severity.NOISE,
    "eager-gross-worse": Severity.EAGER_WORSE,
}
# Rules a documented precision switch does not turn into by-design: what is already noise
# (compiled closer, within same(), an undefined cast) stays noise.
_SWITCH_KEEPS = frozenset({"undefined-cast", "compiled-closer", "within-same"})
# The one bug rule a precision switch does turn into by-design: a float result further from fp64
# because a fused kernel skipped eager's intermediate roundings is precision elision, the
# documented default that `emulate_precision_casts` undoes. A discrete answer the skipped rounding
# decides (a NaN/Inf, an integer, an index or a comparison that flips) is a bug, whichever side
# fp64 takes: PyTorch keeps eager's rounding before comparisons by default for that reason (PR
# 195223; `divfuzz.records.mechanism_table`, the `precision-elision` row and `DECISIVE_RULES`).
_ELIDED_ROUNDING_RULES = frozenset({"float-gross-worse"})


# A decomposition replaces an eager kernel with other aten ops, run eagerly: no fusion, no
# elided rounding. Its output should be as close to fp64 as the kernel's (eager's kernel defines
# the op). When attribution names a decomposition as the culprit of a result further from fp64
# than eager's, by more than a few ULPs (or rejected by same()), the decomposition is the defect:
# that is eellison's bar for a report (issue 143182: "only submit an issue if compile diverges more
# from fp64 than eager"), and jansel fixed Inductor's layer-norm reduction order as "silent wrong
# results" (PR 186582). The layer-norm decomposition itself (issue 168126, open) has had two
# fallback PRs (177163, 183009), both closed unmerged: acknowledged, not yet fixed.
DECOMPOSITION_DEFECT_RULES = frozenset({"many-ulps-worse", "rmse-worse"})
DECOMPOSITION_SUBSYSTEM = "decomposition"


def switch_severity(rule: str, switch: str | None, mechanism: str = "", subsystem: str = "", device_type: str = "") -> Severity:
    """The severity of a finding rated by `rule` once attribution named `switch` as removing it:
    a documented precision knob (`PRECISION_KNOBS`) makes a suspect or noise rule by-design; any
    other switch, or none, leaves the rule's own severity; a `mechanism` that explains the rule
    (`divfuzz.oracles.mechanisms`) gives its own; a decomposition named as the `subsystem` at fault
    makes a compiled-worse rule a bug (`DECOMPOSITION_DEFECT_RULES`). An unknown rule (a newer
    store's, or none fired) is suspect."""
    explained = mechanism_severity(mechanism, rule, device_type) if mechanism else None
    if explained is not None:
        return explained
    if subsystem == DECOMPOSITION_SUBSYSTEM and rule in DECOMPOSITION_DEFECT_RULES:
        return Severity.BUG
    base = RULE_SEVERITY.get(rule, Severity.SUSPECT)
    if switch in PRECISION_KNOBS and rule not in _SWITCH_KEEPS:
        by_switch = switch_mechanism_severity(switch, rule)
        if by_switch is not None and by_switch is not Severity.BY_DESIGN:
            return by_switch  # the skipped rounding decides a discrete answer (`DECISIVE_RULES`)
        if base in (Severity.SUSPECT, Severity.NOISE) or rule in _ELIDED_ROUNDING_RULES:
            return Severity.BY_DESIGN
    return base


def key_severity(key) -> Severity:
    """A bucket key's severity (`divfuzz.records.buckets.BucketKey`): its rule under its culprit's
    switch. Every case in a bucket shares its key's rule, so this is every case's severity too:
    judged once, from the key's fields, wherever a bucket is stored or moved."""
    switch = key.culprit.switch if key.culprit is not None else None
    subsystem = key.culprit.subsystem if key.culprit is not None else ""
    return switch_severity(key.rule, switch or None, key.mechanism, subsystem or "", key.device_type)


def bucket_severity(key, reason: dict | None) -> BucketSeverity:
    """What a bucket of `key` stores: its key's severity (`key_severity`), and `reason` (a case's
    `SeverityReason.to_dict()`, or a raw bucket's stored reason when it is re-keyed) as the bucket
    shows it: under that severity, and, when the key's culprit switch changed it, the switch named
    in front of the case's words (the rule `precision-knob` when it made it by-design, as
    `severity_of` names it under the switch). Judged once per bucket written: the store takes it
    as a value and derives none itself."""
    severity = key_severity(key)
    if reason is None:
        return BucketSeverity(severity, None)
    shown = dict(reason, severity=severity.value)
    if severity.value != reason.get("severity") and key.culprit is not None and key.culprit.switch:
        shown["detail"] = f"{key.culprit.switch} removes it; {reason.get('detail', '')}"
        if severity is Severity.BY_DESIGN:
            shown["rule"] = "precision-knob"
    return BucketSeverity(severity, shown)


def severity_of(verdict, *, switch: str | None = None, subsystem: str | None = None) -> SeverityReason | None:
    """The severity of a `Verdict` (its most severe output), or None when nothing diverges.

    `switch` is the documented switch attribution named as removing the divergence, when known
    (`divfuzz.records.buckets.CulpritKey.switch`): a divergence a precision knob removes is
    `by-design` (noise included: the knob names its cause) unless a bug rule fired (a wrong answer
    stays a bug, its reason says which knob hides it); a perf finding's reason names the switch.
    `subsystem` is the part of the compiler attribution named (`CulpritKey.subsystem`): a
    decomposition at fault for a compiled-worse rule makes it a bug (`DECOMPOSITION_DEFECT_RULES`).
    """
    status = getattr(verdict.status, "value", verdict.status)
    if status in _COMPILER_FAILURE_RULES:
        return SeverityReason(Severity.BUG, _COMPILER_FAILURE_RULES[status], "-",
                              f"the compiler under test failed: {status} {verdict.error_type or ''}".strip())
    if status != Status.DIVERGED.value:
        return None
    if getattr(verdict, "perf", ()):
        # The phase `finding_of` names: the forward when it is slower, else forward+backward.
        rated = [r for r in (perf_severity(p) for p in verdict.perf) if r is not None]
        worst = min(rated, key=lambda r: r.output != "fwd") if rated else None
        if worst is not None and switch:
            return SeverityReason(worst.severity, worst.rule, worst.output, f"{worst.detail}; {switch} removes it")
        return worst
    reasons = [r for r in (output_severity(o) for o in verdict.outputs) if r is not None]
    if getattr(verdict, "recompile", None):
        # A graph compiled for dynamic shapes that compiles again for a size it was marked for:
        # a cost, and a guard worth a look, not a wrong answer (the outputs are judged apart).
        reasons.append(SeverityReason(Severity.SUSPECT, "recompile", "-", f"a shape sibling compiled again: {verdict.recompile}"))
    if not reasons:
        return None
    worst = min(reasons, key=_worst_first_about(finding_of(verdict)))
    explained = explained_reason(worst, getattr(verdict, "explanation", None))
    if explained is not None:
        return explained
    if subsystem == DECOMPOSITION_SUBSYSTEM and worst.rule in DECOMPOSITION_DEFECT_RULES:
        return SeverityReason(Severity.BUG, worst.rule, worst.output,
                              f"{worst.detail}; the decomposition at fault is further from fp64 than the eager kernel it replaces")
    if switch in PRECISION_KNOBS and switch_severity(worst.rule, switch) is Severity.BY_DESIGN:
        return SeverityReason(Severity.BY_DESIGN, "precision-knob", worst.output, f"{switch} removes it; {worst.detail}")
    if switch in PRECISION_KNOBS and worst.severity is Severity.BUG:
        return SeverityReason(worst.severity, worst.rule, worst.output, f"{worst.detail} ({switch} removes it)")
    if switch in PRECISION_KNOBS and switch_severity(worst.rule, switch) is not worst.severity:
        # the skipped rounding decides a discrete answer: no elidable noise (`DECISIVE_RULES`)
        severity = switch_severity(worst.rule, switch)
        return SeverityReason(severity, worst.rule, worst.output,
                              f"{worst.detail}; {switch} removes it, and the rounding it restores decides this "
                              f"{'discrete answer (PR 195223)' if severity is Severity.BUG else 'answer as much as the input does'}")
    return worst


_UNJUDGED = object()


def case_finding(verdict, *, strict: bool = False, reason=_UNJUDGED):
    """The finding a case is bucketed, minimized and attributed by: the one on the output its
    severity reason names (`severity_of`, or `reason` when the caller has judged it), else the
    verdict's most severe (`finding_of`). A float16 output a few ULPs off beside a float32 floor
    division wrong by one is a float32 bucket about the division: the bug's output decides the
    bucket's kind, so the minimizer keeps the division and nothing else, and the report says what
    is wrong. None when nothing is a finding (then nothing is judged)."""
    overall = finding_of(verdict, strict=strict)
    if overall is None:
        return None
    if reason is _UNJUDGED:
        reason = severity_of(verdict)
    return finding_of(verdict, strict=strict, output=reason.output) if reason is not None else overall


def explained_reason(worst: SeverityReason, explanation) -> SeverityReason | None:
    """`worst` as a mechanism explains it (`divfuzz.oracles.mechanisms`): the same rule and output,
    the mechanism's severity, and the experiment's words; None when no explanation applies."""
    if explanation is None:
        return None
    severity = mechanism_severity(explanation.mechanism, worst.rule, explanation.device_type)
    if severity is None:
        return None
    return SeverityReason(severity, worst.rule, worst.output,
                          f"explained by {explanation.mechanism}: {explanation.detail}; {worst.detail}")


def explaining_mechanism(verdict, reason: SeverityReason | None) -> str:
    """The mechanism of `verdict`'s explanation when it explains `reason`'s rule, else ""."""
    explanation = getattr(verdict, "explanation", None)
    if explanation is None or reason is None or mechanism_severity(explanation.mechanism, reason.rule) is None:
        return ""
    return explanation.mechanism


# Rules that say eager, not compiled, is the side further from fp64: where the fp64 reference
# could not follow eager's type semantics (a whole model run in float64 as Python), they are
# checked again on the captured graphs before they are believed (`divfuzz.fuzzer.triage.capture`).
EAGER_FURTHER_RULES = frozenset({"eager-gross-worse", "compiled-closer", "compiled-fp64-correct"})


def reference_doubtful(verdict, reason: SeverityReason | None) -> bool:
    """Whether a whole model's reading below suspect rests on eager standing far from the fp64
    reference of the user's Python (which cannot round a scalar where eager rounds it): a rule
    that reads eager further (`EAGER_FURTHER_RULES`), or eager itself off fp64 by more than
    `ILL_CONDITIONED_RELATIVE` on the reason's float32 or float64 output (a float32 remainder by
    0.37 of values near 1e7 is thousands of ULPs from the remainder by the double 0.37, so compiled
    being further still reads within same()'s margin). Either way each captured graph is judged
    again against the reference with eager's type semantics before the reading is believed."""
    if reason is None:
        return False
    if reason.rule in EAGER_FURTHER_RULES:
        return True
    fc = next((o.float_cmp for o in verdict.outputs if o.name == reason.output and o.float_cmp is not None), None)
    # float32 and float64 only: a bfloat16 or float16 model's eager is that far from fp64 by its
    # precision alone, and its scalar comparisons read eager further (the rule above) when unrounded
    return (fc is not None and fc.dtype in NO_PRECISION_KNOB
            and fc.eager_max_err_ulps * 2.0 ** -_MANTISSA_BITS[fc.dtype] > ILL_CONDITIONED_RELATIVE)


def worth_reducing(verdict) -> bool:
    """What `minimize --module` reduces and attributes: a divergence rated `suspect` or worse."""
    reason = severity_of(verdict)
    return reason is not None and reason.severity.at_least(Severity.SUSPECT)


def verdict_lines_of(verdict) -> list[str]:
    """One line per output (each side against fp64), then the severity line: what `--module` prints."""
    lines = []
    for o in verdict.outputs:
        if o.mismatch:
            lines.append(f"{o.name}: {o.mismatch}")
        elif o.float_cmp is not None:
            fc = o.float_cmp
            lines.append(f"{o.name}: {fc.dtype} {fc.n_diff}/{fc.numel} differ, max {fc.max_ulp} ULP, fp64 triage {fc.triage}")
        elif o.int_cmp is not None:
            ic = o.int_cmp
            lines.append(f"{o.name}: {ic.dtype} {ic.flips}/{ic.numel} flip, max step {ic.max_step}, fp64 {ic.fp64_triage}"
                         + (f", {ic.undefined_flips} undefined casts" if ic.undefined_flips else ""))
    for p in getattr(verdict, "perf", ()):
        lines.append(p.describe())
    if verdict.error_type:
        lines.append(f"{verdict.error_type}: {verdict.error_message or ''}".rstrip(": "))
    if verdict.error_site:
        lines.append(f"raised at: {verdict.error_site}")
    reason = severity_of(verdict)
    lines.append(f"severity: {reason}" if reason else "severity: none (no divergence)")
    return lines
