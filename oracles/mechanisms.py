"""Mechanisms that explain how a divergence arises, and what each is worth: most explain it without
a compiler defect; one (`explicit-cast-elided`) names a defect that a precision switch would
otherwise excuse.

One table, one row per mechanism, each with the severity it gives and the public reason for it
(a maintainer's stance, a PyTorch PR or doc). The experiments that find a mechanism live in
`divfuzz.fuzzer.engine.explain`; `divfuzz.oracles.severity_policy` applies this table to a
verdict that carries an `Explanation` and to a bucket key that names a mechanism. Torch-free.

Invariants:
- a mechanism explains only the rules in `EXPLAINABLE_RULES`: a crash, a compile error, a hang
  and a dtype or shape change are never explained away, whatever an experiment finds;
- what no mechanism explains keeps the severity its rule gives (a bug stays a bug);
- a mechanism's severity decides, whatever switch attribution names (`severity_policy.switch_severity`);
- a row names a mechanism, never an op, a shape or a test's case.
"""

from __future__ import annotations

from dataclasses import dataclass

from divfuzz.records.severity import Severity


@dataclass(frozen=True)
class Mechanism:
    id: str
    severity: Severity
    title: str  # what a reader sees on the first screen
    reason: str  # why it has that severity, with the public source


MECHANISMS: dict[str, Mechanism] = {m.id: m for m in (
    Mechanism(
        "subnormal-flush", Severity.BY_DESIGN,
        "subnormal values flushed to zero by the compiled kernels",
        "eager run again with subnormal inputs and intermediates flushed to signed zero gives compiled's values: "
        "compiled GPU kernels flush subnormals by default, and exact subnormals belong to an opt-in eager-numerics "
        "mode (PyTorch PR 185878; issue 125557 tracks the symptom)",
    ),
    Mechanism(
        "range-edge", Severity.SUSPECT,
        "arithmetic at the edge of the float range (overflow inside the graph, or inf/NaN from the inputs)",
        "the differing outputs depend on a value that overflows its dtype in eager, sits at the edge of its finite "
        "range, is inf/NaN from the inputs, or comes from a sum or product whose partial results leave the range in "
        "some order of it: where partial results overflow, the evaluation order decides where inf and NaN land, and "
        "fp64, which has the range, cannot say which order is right; PyTorch's numerical-accuracy notes ('Extremal "
        "values') say an intermediate may overflow the dtype even where the result is representable; not a compiler "
        "defect by itself",
    ),
    Mechanism(
        "explicit-cast-elided", Severity.BUG,
        "an explicit cast's rounding dropped by the compiler",
        "the differing outputs equal, within a few ULPs, what the model computes without its explicit casts to a "
        "lower precision: compiled skipped a rounding the model's code asks for (x.to(torch.bfloat16)). PyTorch's "
        "maintainers fix these as silent-correctness bugs even where emulate_precision_casts restores the rounding "
        "(issues 176565, 181568, 185337; issue 179561 fixed by PR 180575): unlike the per-op roundings of eager's "
        "low-precision kernels, which fusion elides by design, a user's cast is part of what the model computes",
    ),
    Mechanism(
        "reduction-order", Severity.NOISE,
        "the order of a sum, a norm, a softmax or a scan (eager in another order gives compiled's answer)",
        "the differing outputs depend on an op whose result is the same for any order of its reduced elements, or "
        "a scan whose prefix may be associated in any order (a parallel prefix), and eager run again with that dim "
        "in another order, or its scans associated as a parallel prefix, gives, element by element, values that "
        "leave no bug: "
        "compiled's answer is one eager's own algorithm gives. Floating-point sums are not associative and neither "
        "eager nor a compiler defines their order (PyTorch's numerical-accuracy notes); maintainers judge such a "
        "difference by same() against fp64 (issue 143182) and keep integer flips of a sum at a rounding boundary "
        "open as numerics discrepancies, unfixed (issue 189787, floor of a softmax's sum)",
    ),
    Mechanism(
        "tie", Severity.NOISE,
        "ties under a value-selecting op (max, argmax, sort, topk, median, amax backward)",
        "the differing outputs depend on a value-selecting op whose input holds ties (equal or one rounding step "
        "apart) at the selected value: which of the tied elements is picked, or gets the gradient, is not defined "
        "across implementations (PyTorch's bug template asks fuzzers not to compare indices of max and min at ties)",
    ),
)}

# The rules a mechanism may explain: the bug rules a numeric difference can fake. Never a
# compiler failure or an output of another type or shape (`output-type-mismatch`).
EXPLAINABLE_RULES = frozenset({"nan-inf-new", "float-gross-worse", "int-valued-wrong", "int-gross"})


# Suspect rules that say the output is sensitive, not that compiled is right: an ill-conditioned
# input, or eager itself unstable in its precision. A mechanism that names a defect still names
# it there (compiled equal to the model without its explicit casts is no sensitivity's doing: the
# sensitivity only makes the dropped rounding show, as `y.to(bfloat16).to(float32) - y` does).
CONDITIONED_SUSPECT_RULES = frozenset({"gross-worse-ill-conditioned", "nan-inf-ill-conditioned",
                                       "int-valued-ill-conditioned", "int-ill-conditioned"})


def names_defect(mechanism: str) -> bool:
    """Whether `mechanism` names a compiler defect (its severity is bug)."""
    row = MECHANISMS.get(mechanism)
    return row is not None and row.severity is Severity.BUG


def mechanism_severity(mechanism: str, rule: str) -> Severity | None:
    """The severity `mechanism` gives a finding rated by `rule`, or None when it does not apply
    (no mechanism, an unknown one, or a rule no mechanism explains; on a rule of
    `CONDITIONED_SUSPECT_RULES`, only a mechanism that names a defect applies)."""
    row = MECHANISMS.get(mechanism)
    if row is None:
        return None
    if rule in EXPLAINABLE_RULES or (rule in CONDITIONED_SUSPECT_RULES and row.severity is Severity.BUG):
        return row.severity
    return None


def excuses(mechanism: str) -> bool:
    """Whether `mechanism` explains findings without a compiler defect (its severity is below bug)."""
    row = MECHANISMS.get(mechanism)
    return row is not None and row.severity is not Severity.BUG


def describe_mechanism(mechanism: str) -> str:
    """The first screen's words for a mechanism id (the id itself when unknown: a newer store's)."""
    row = MECHANISMS.get(mechanism)
    return row.title if row is not None else mechanism
