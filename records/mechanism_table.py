"""The mechanisms divfuzz explains, each with the severity PyTorch's public record gives it.

One row per mechanism: how a divergence arises (a fused kernel skipping eager's bf16 rounding, a
kernel flushing subnormals, the order of a sum, ...), the severity it has by default, the
severity it has where the rounding it involves *decides* a discrete outcome (a comparison, a
boolean, an integer, an index, a sign or a NaN/Inf: `DECISIVE_RULES`), and the public decisions
that ground both, each with the issue or PR, who said it, a short quote and the day it was read.
The severity policy (`divfuzz.oracles.mechanisms`, `divfuzz.oracles.severity_policy`), the
report, `issue.md` and docs/findings.md all read this table; a test fails when a mechanism an
experiment can name, a known-bugs entry names or a precision switch implies has no row here.

Invariants:
- a row names a mechanism, never an op, a shape or a test's case;
- where the record is split or silent on a case, the row says so (`record`) and the severity it
  gives there is `suspect`, never `bug`;
- a crash, a compile error, a hang and a dtype or shape change are never explained by any row
  (`divfuzz.oracles.mechanisms.EXPLAINABLE_RULES`).
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from divfuzz.records.severity import Severity

# The day the groundings below were last read against their threads.
CHECKED = "2026-12-02"


@dataclass(frozen=True)
class Grounding:
    """One public decision: `ref` ("pytorch/pytorch#183761", "pytorch/pytorch PR 195223"), who
    decided (a maintainer's handle, or "the PR"), what they said (a short quote or the PR's own
    words), what it decides ("intended", "bug", "split" or "silent") and when it was read."""

    ref: str
    who: str
    says: str
    decides: str
    checked: str = CHECKED

    def line(self) -> str:
        """One line a report prints: `ref` (who): "says"."""
        return f"{self.ref} ({self.who}): \"{self.says}\""


@dataclass(frozen=True)
class Mechanism:
    """A mechanism and what it is worth (see the module docstring).

    `severity` is its severity by default; `decisive` its severity where the rounding it involves
    decides a discrete outcome (`DECISIVE_RULES`), None when that changes nothing; `record` is
    "settled", or "split"/"silent" where the public record disagrees or says nothing about a case
    (then the case it is about reads `suspect`); `record_note` says which case."""

    id: str
    severity: Severity
    title: str  # what a reader sees on the first screen
    reason: str  # why it has that severity, in one or two sentences
    grounding: tuple[Grounding, ...]
    decisive: Severity | None = None
    record: str = "settled"
    record_note: str = ""
    # Device types where the record gives the default case another severity (the public
    # decisions were taken per device), as (device type, severity) pairs.
    on_devices: tuple[tuple[str, Severity], ...] = ()

    def severity_for(self, rule: str, device_type: str = "") -> Severity:
        """Its severity on a finding rated by `rule` on `device_type` ("" when not known):
        `decisive` where the rule says the output is a discrete decision (`DECISIVE_RULES`), else
        the device's (`on_devices`), else `severity`."""
        if self.decisive is not None and rule in DECISIVE_RULES:
            return self.decisive
        return dict(self.on_devices).get(device_type, self.severity)

    def grounding_text(self) -> str:
        """The groundings as one line each, for a report's "why"."""
        return "; ".join(g.line() for g in self.grounding)


# Rules that say the output is a discrete decision: an integer, a boolean, an index, or where
# NaN/Inf lands (and with what sign). A rounding that decides one of these is not elidable noise
# (PyTorch PR 195223 keeps eager's rounding before comparisons and booleans by default; the
# E8M0 encoding's integer flips, issue 178045, were fixed as a bug by PR 178698). Rules that say
# the answer is ill-conditioned are not here: there the conditioning, not the rounding, decides.
DECISIVE_RULES = frozenset({
    "int-valued-wrong", "int-gross", "int-flip", "int-boundary", "int-valued-boundary", "int-eager-inexact",
    "compiled-fp64-correct", "nan-inf-new", "nan-inf-wrong", "nan-inf-lost",
})
# Not `nan-inf-moved`: there eager's NaN/Inf is not fp64's (eager's float16 square overflowed where
# fp64 and compiled stay finite), so a switch that restores eager's rounding restores a value further
# from fp64; for a float value the record judges against fp64 (issue 143182: "only submit an issue if
# compile diverges more from fp64 than eager"; PR 131595: eliding the roundings "should be closer to
# fp64 ref numerics"). A comparison on such a value is a boolean, judged by the integer rules above.
# Not the sign of a zero by itself: PR 196031 keeps eager's signed zeros only under
# numerics="strict", so a rounding that flips one decides nothing the default promises.
# ... and these say the same, but the conditioning of the input decides as much as the rounding:
# a rounding that decides them is `suspect` (the record does not say which of the two is to blame).
CONDITIONED_DECISIVE_RULES = frozenset({"int-ill-conditioned", "int-valued-ill-conditioned", "nan-inf-ill-conditioned",
                                        "nan-inf-range-edge"})


_JANSEL_183761 = Grounding(
    "pytorch/pytorch#183761 (CPU, float16)", "jansel",
    "looks like intended Inductor behavior rather than a compiler bug. By default Inductor may elide fp16/bf16 "
    "downcast-upcast pairs across fused pointwise ops ... The exact-eager mode is TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1",
    "intended")
_PR_185847 = Grounding(
    "pytorch/pytorch PR 185847 (issue 185337, CPU)", "eellison",
    "This makes emulate_precision_casts produce eager-faithful results for explicit lowp casts on CPU (matching CUDA). "
    "Default-config behavior is unchanged.", "intended")
_ISSUE_181568 = Grounding(
    "pytorch/pytorch#181568 (CPU, bfloat16)", "the PT2 repro agent (karthickai)",
    "Re-running with TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 reduces max_abs_diff to 0.0 ... so the documented "
    "emulate_precision_casts mitigation fixes the divergence (closed, no fix)", "intended")
_PR_180575 = Grounding(
    "pytorch/pytorch PR 180575 (issue 179561, CUDA)", "jansel",
    "[inductor] Fix fp32=>bf16=>fp32 cast being lost (a CUDA test of x.to(lowp_dtype).float()); issue 176565, a lone "
    "CUDA cast pair, closed as correctness(silent); merge not visible", "bug")
_PR_131595 = Grounding(
    "pytorch/pytorch PR 131595 (emulate_precision_casts)", "eellison",
    "For multiple, fused pointwise nodes, inductor will elide the intermediary upcasts and downcasts / Typically this "
    "should be closer to fp64 ref numerics. However, it can be useful for debugging to emulate the eager numerics.",
    "intended")
_ISSUE_159239 = Grounding(
    "pytorch/pytorch#159239", "eellison",
    "emulate_precision_casts will attempt to give more similar results, but we do not guarantee bitwise equivalence.",
    "intended")
_PR_195223 = Grounding(
    "pytorch/pytorch PR 195223 (issue 195214)", "PetrIvan (the PR); merge not visible, eellison's reply cut off",
    "an otherwise small floating-point difference becomes a discrete semantic mismatch at an exact comparison - "
    "different masks, counts, or downstream gradients", "bug")
_ISSUE_183607 = Grounding(
    "pytorch/pytorch#183607 (open)", "a report, 2026-09-22",
    "fp16 y = x*x is inf when stored but torch.isinf(y) is False on the default config (2.14.0 and a 2.15 nightly); "
    "emulate_precision_casts fixes it", "bug")
_ISSUE_178045 = Grounding(
    "pytorch/pytorch#178045", "PR 178698 (Fixes #178045; merge not visible)",
    "ceil(log2(x)) -> clamp -> uint8 (the E8M0 scale) differs by up to 6 after fusion", "bug")
_DISCRETE_NOTE = ("no maintainer has called a skipped rounding that flips a comparison, an integer or a NaN/Inf "
                  "intended; each such report has a fix proposed (PR 195223, PR 178698), though no merge is visible")

_ROWS = (
    Mechanism(
        "precision-elision", Severity.BY_DESIGN,
        "eager's intermediate bf16/fp16 roundings skipped by a fused kernel",
        "a fused kernel computes in float32 where eager rounds each op's result to bfloat16/float16; Inductor elides "
        "those roundings by default and emulate_precision_casts restores them, so what it removes is the documented "
        "default, except where the skipped rounding decides a comparison, boolean, integer, index, sign or NaN/Inf",
        (_PR_131595, _ISSUE_159239, _ISSUE_181568, _PR_195223, _ISSUE_183607, _ISSUE_178045),
        decisive=Severity.BUG, record_note=_DISCRETE_NOTE,
    ),
    Mechanism(
        "explicit-cast-elided", Severity.BY_DESIGN,
        "an explicit cast's rounding dropped by fusion",
        "the differing outputs equal, within a few ULPs, what the model computes without its explicit casts to a lower "
        "precision: on the CPU Inductor collapses a downcast-upcast pair by default and emulate_precision_casts is the "
        "exact-eager mode; on CUDA the record is split (a lost round trip was fixed as a bug); a bug wherever that "
        "rounding decides a comparison, boolean, integer, index, sign or NaN/Inf",
        (_JANSEL_183761, _PR_185847, _ISSUE_181568, _PR_180575, _PR_195223),
        decisive=Severity.BUG, record="split",
        record_note="on CUDA: PR 180575 fixed a lost fp32 -> bf16 -> fp32 round trip as a bug, while issue 183761 calls "
                    "elision across fused pointwise ops intended; read suspect there",
        on_devices=(("cuda", Severity.SUSPECT),),
    ),
    Mechanism(
        "rounding-decides", Severity.BUG,
        "a low-precision rounding that decides a comparison or an integer, skipped by the compiler",
        "the differing outputs depend on decisions of the graph (a comparison a where selects by, a count, an integer "
        "a rounding op makes) that go the other way once eager's own low-precision values are replaced by the unrounded "
        "ones: compiled decided before the rounding eager made",
        (_PR_195223, _ISSUE_183607, _ISSUE_178045),
        record_note=_DISCRETE_NOTE,
    ),
    Mechanism(
        "subnormal-flush", Severity.BY_DESIGN,
        "subnormal values flushed to zero by the compiled kernels",
        "eager run again with subnormal values (inputs, op results, and a value an op rounds or compares inside it, such "
        "as a floor division's quotient) flushed to signed zero gives compiled's values: compiled GPU kernels flush "
        "subnormals by default, and exact subnormals belong to an opt-in eager-numerics mode",
        (Grounding("pytorch/pytorch PR 185878 (issue 185480)", "jansel",
                   "CUDA Inductor kernels compile with flush-to-zero enabled by default ... Exact subnormal handling belongs "
                   "in the opt-in eager-numerics mode so default kernels do not pay a performance cost", "intended"),
         Grounding("pytorch/pytorch#125557 (open)", "vkuzo's report", "Is this expected? (no maintainer answer)", "silent"),
         Grounding("pytorch/pytorch PR 188546 (issue 188541, open)", "a contributor",
                   "The compiled path returns 0.0 instead of the correct negative subnormal, silently flipping torch.signbit, "
                   "y == 0, and torch.copysign comparisons", "split")),
        decisive=Severity.SUSPECT, record="silent",
        record_note="no maintainer has said whether a flush that decides an integer, a comparison or a NaN/Inf is intended",
    ),
    Mechanism(
        "range-edge", Severity.SUSPECT,
        "arithmetic at the edge of the float range (overflow inside the graph, or inf/NaN from the inputs)",
        "the differing outputs depend on a value that overflows its dtype in eager, sits at the edge of its finite range, "
        "is inf/NaN from the inputs, or comes from a sum or product whose partial results leave the range in some order "
        "of it: the evaluation order decides where inf and NaN land, and fp64, which has the range, cannot say which "
        "order is right",
        (Grounding("PyTorch numerical accuracy notes, 'Extremal values'", "the docs",
                   "an intermediate may overflow the dtype even where the result is representable", "silent"),
         Grounding("pytorch/pytorch#173793 (open, high priority)", "a contributor",
                   "LayerNorm NaN at 1e37: 'strictly working as intended', with the issue kept open", "split")),
        record="split", record_note="no public decision on which evaluation order is right at the edge of the range",
    ),
    Mechanism(
        "reduction-order", Severity.NOISE,
        "the order of a sum, a norm, a softmax or a scan (eager in another order gives compiled's answer)",
        "the differing outputs depend on an op whose result is the same for any order of its reduced elements, or a scan "
        "associated as a parallel prefix, and eager run in another order gives compiled's values: floating-point sums "
        "are not associative and neither eager nor a compiler defines their order; maintainers judge such a difference "
        "against fp64",
        (Grounding("pytorch/pytorch#143182", "eellison",
                   "please compare the results to an fp64 reference input and only submit an issue if compile diverges more "
                   "from fp64 than eager", "intended"),
         Grounding("pytorch/pytorch#141727", "Chillee",
                   "There's never any guarantee of exact matches between compiled code and eager code, due to tiling.",
                   "intended"),
         Grounding("pytorch/pytorch#189787 (open, topic: fuzzer)", "no decision yet",
                   "floor of a softmax's sum, constant-folded to 1.0, flips at a rounding boundary", "silent")),
        decisive=Severity.SUSPECT, record="silent",
        record_note="an integer a sum's order decides at a rounding boundary is open upstream without a decision (issue 189787)",
    ),
    Mechanism(
        "tie", Severity.NOISE,
        "ties under a value-selecting op (max, argmax, sort, topk, median, amax backward)",
        "the differing outputs depend on a value-selecting op whose input holds ties at the selected value: which of the "
        "tied elements is picked, or gets the gradient, is not defined across implementations",
        (Grounding("pytorch/pytorch .github/ISSUE_TEMPLATE/pt2-bug-report.yml", "the template",
                   "Don't compare indices of max/min etc, because that avoids the above requirement", "intended"),
         Grounding("pytorch/pytorch#160840", "zou3519",
                   "the decomposition ... makes it so that those tensors are now slightly different, which leads argmin to "
                   "having different values. So I think this is unfortunately expected.", "intended")),
    ),
    Mechanism(
        "approximate-division", Severity.BUG,
        "an approximate division before a floor or trunc (an exact integer quotient floored one below)",
        "the differing integer outputs are floor or trunc divisions whose exact quotient of eager's operands is an "
        "integer, and compiled gives the next integer: the kernel divided approximately (x / x not exactly 1), which "
        "PyTorch fixed by lowering floor division to floor(div_rn(a, b))",
        (Grounding("pytorch/pytorch PR 177926 (issue 177740)", "dcci",
                   "Triton's / operator uses an approximate reciprocal (rcp.approx + multiply) for fp32 division ... amplified "
                   "by floor() into a full integer off-by-one error. Fix: Replaced the naive floor(div(a, b)) with "
                   "floor(_div_rn(a, b))", "bug"),
         Grounding("pytorch/pytorch#184408 (open, high priority)", "the issue",
                   "trunc division: the floor path was previously fixed to use IEEE-correct division (div_rn)", "bug")),
    ),
    Mechanism(
        "signed-zero-selection", Severity.BUG,
        "a value-selecting op (minimum, maximum, amax, max) choosing the other of two signed zeros",
        "the zeros of the other sign are outputs of an op that returns one of its operands' values, where those operands "
        "offer a zero of each sign: IEEE 754-2019's minimum and maximum order -0 below +0, eager follows it, and a kernel "
        "that selects with a < b treats them as equal; fixed as a bug on CUDA, while on the CPU the fix is open and CPU "
        "eager itself differs between its scalar and SIMD paths",
        (Grounding("pytorch/pytorch PR 186933 (issue 185610, CUDA)", "jansel merged it",
                   "triton_helpers.minimum uses a < b which treats -0.0 == +0.0, causing minimum(-0.0, +0.0) to return +0.0 "
                   "instead of -0.0. Use tl.minimum ... which follows IEEE 754 signed zero semantics", "bug"),
         Grounding("pytorch/pytorch PR 185765 (issue 185610)", "the PR",
                   "fixes a correctness discrepancy between eager mode and Inductor for torch.minimum, torch.maximum, and "
                   "their _with_index (argmin/argmax) variants when handling signed zeros", "bug"),
         Grounding("pytorch/pytorch#194347 (open) and PR 194472 (open, CPU)", "the PR",
                   "CPU eager mode itself is inconsistent here (the scalar tail path keeps the first operand while the SIMD "
                   "path effectively keeps the second), so 'match eager exactly' is not well-defined", "split")),
        record="split", record_note="on the CPU: the fix is open and CPU eager itself is inconsistent; read suspect there",
        on_devices=(("cpu", Severity.SUSPECT),),
    ),
)

MECHANISMS: dict[str, Mechanism] = {row.id: row for row in _ROWS}

# The mechanism a documented precision switch stands for, when attribution names the switch.
SWITCH_MECHANISMS = {"emulate_precision_casts": "precision-elision"}


def markdown_table() -> str:
    """The table as docs/findings.md prints it (a test holds the two equal): one row per
    mechanism, its severity by default and where it decides a discrete answer, the record's
    state, and its groundings."""
    lines = ["| mechanism | severity | where it decides a discrete answer | record | grounded in |",
             "| --- | --- | --- | --- | --- |"]
    for row in _ROWS:
        severity = row.severity.value + "".join(f"; {s.value} on {d}" for d, s in row.on_devices)
        decisive = row.decisive.value if row.decisive is not None else row.severity.value
        record = row.record + (f": {row.record_note}" if row.record_note else "")
        grounds = "; ".join(f"{g.ref} ({g.who}, {g.decides})" for g in row.grounding)
        lines.append(f"| `{row.id}` | {severity} | {decisive} | {record} | {grounds} |")
    return "\n".join(lines)
