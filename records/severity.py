"""Severities as data: `bug`, `suspect`, `by-design` or `noise` (and `eager-worse`, a finding
about eager), and the reason a finding got one.

The policy that assigns them is `divfuzz.oracles.severity_policy`; this module is only the vocabulary, so that
the store, the reports and the gate read severities without importing any policy or torch.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class Severity(str, enum.Enum):
    BUG = "bug"  # a maintainer would act on it: a wrong answer or a failure of the compiler
    SUSPECT = "suspect"  # diverges beyond expected rounding, but not provably wrong
    BY_DESIGN = "by-design"  # a documented precision knob (emulate_precision_casts) removes it
    NOISE = "noise"  # expected rounding: compiled closer to fp64, or as close and a few ULPs
    # eager is grossly further from fp64 than compiled: a finding about eager, not the compiler.
    # Reported apart and never counted with the compiler's findings; below noise in the order, so
    # no gate or --min-severity floor of the compiler's severities ever rises because of it.
    EAGER_WORSE = "eager-worse"

    @property
    def rank(self) -> int:
        """0 for the most severe."""
        return ORDER.index(self)

    def at_least(self, other: Severity) -> bool:
        return self.rank <= other.rank


ORDER = (Severity.BUG, Severity.SUSPECT, Severity.BY_DESIGN, Severity.NOISE, Severity.EAGER_WORSE)
# The compiler's own findings, most severe first (what counts and what a gate judges).
COMPILER_SEVERITIES = ORDER[:4]


# Every rule id the numeric severity policy (`divfuzz.oracles.severity_policy`) emits: the vocabulary that the known
# bugs file (`divfuzz.records.known_bugs`), the gate and the reports name rules by. A test holds the policy
# and this list equal.
NUMERIC_RULES = (
    "output-type-mismatch", "nan-inf-range-edge", "nan-inf-wrong", "nan-inf-lost", "zero-sign-wrong", "stride-mismatch", "recompile", "nan-inf-ill-conditioned", "nan-inf-new", "int-valued-wrong", "int-valued-ill-conditioned", "int-valued-boundary",
    "gross-worse-ill-conditioned", "float-gross-worse", "nan-inf-moved", "eager-gross-worse", "few-ulps-unreferenced",
    "unreferenced", "compiled-closer", "rmse-worse", "few-ulps", "within-same", "many-ulps", "many-ulps-worse", "undefined-cast",
    "compiled-fp64-correct", "int-ill-conditioned", "int-eager-inexact", "int-gross", "int-boundary", "int-flip", "precision-knob",
)


def rule_family(rule: str) -> str:
    """What a numeric rule says is wrong, coarsely: "nan-inf" (where NaN/Inf lands), "integer"
    (an integer or integer-valued answer), "zero-sign", "type" (a dtype or shape), "layout"
    (strides), "recompile", or "float" (how far a float value is from fp64). Two findings of one
    family are about the same kind of wrong answer; an issue about NaNs is not about ULPs."""
    if rule.startswith("nan-inf"):
        return "nan-inf"
    if rule.startswith("int") or rule == "compiled-fp64-correct":
        return "integer"
    return {"zero-sign-wrong": "zero-sign", "output-type-mismatch": "type", "stride-mismatch": "layout",
            "recompile": "recompile"}.get(rule, "float")


# The failure rules (a compiler that failed: `records.outcomes.COMPILER_FAILURES`' kinds) and the
# perf oracle's, beside the numeric ones: with them, every rule id divfuzz emits.
FAILURE_RULES = ("crash", "hang", "compile-error", "runtime-error")
PERF_RULES = ("slower-beyond-noise", "slower-within-noise", "wrapper-overhead")

# The closed vocabulary of rule ids: a rule id in code is one of these (tests/test_rule_ids.py reads
# every comparison with a rule and every SeverityReason built). A str enum: `Rule.FEW_ULPS ==
# "few-ulps"`, so stored rules (text) and literals compare with its members as they are.
Rule = enum.Enum("Rule", {r.upper().replace("-", "_"): r for r in (*NUMERIC_RULES, *FAILURE_RULES, *PERF_RULES)}, type=str)
RULE_IDS = frozenset(r.value for r in Rule)


@dataclass(frozen=True)
class SeverityReason:
    """A severity with the rule that gave it, the output it is about, and the measured numbers."""

    severity: Severity
    rule: str  # stable id, e.g. "float-gross-worse"
    output: str  # the output's name, or "-" for errors
    detail: str  # one sentence with the numbers

    def __str__(self) -> str:
        return f"{self.severity.value}: {self.detail}"

    def labelled(self) -> str:
        """The severity with its rule and output, then the sentence: what `replay` and a bucket's
        repro.py print, so either can be held to the bucket the report names (issue 35)."""
        return f"{self.severity.value} ({self.rule}, output {self.output}): {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeverityReason:
        return cls(Severity(d["severity"]), str(d["rule"]), str(d["output"]), str(d["detail"]))


@dataclass(frozen=True)
class BucketSeverity:
    """A bucket's verdict as the store keeps it: its severity (its key's) and the reason it shows
    (a case's `SeverityReason.to_dict()` under that severity), or no reason when no case gave one.
    Judged once per finding above the store (`divfuzz.oracles.severity_policy.bucket_severity`,
    called by the one filer, `divfuzz.fuzzer.campaign.bucket_folders.Filing`) or read from another
    store as it was stored (`divfuzz merge`); the store only stores it."""

    severity: Severity
    reason: dict[str, Any] | None = None
