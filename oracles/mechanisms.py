"""What a mechanism that explains a divergence makes of its finding's severity.

The mechanisms and their groundings are one table, `divfuzz.records.mechanism_table.MECHANISMS`; this
module applies it to a finding's rule. The experiments that find a mechanism live in
`divfuzz.fuzzer.engine.explain` (campaign graphs) and `divfuzz.fuzzer.triage.user_module`
(captured aten graphs); `divfuzz.oracles.severity_policy` applies this module to a verdict that
carries an `Explanation`, to a bucket key that names a mechanism, and to a culprit's precision
switch (`SWITCH_MECHANISMS`). Torch-free.

Invariants:
- a mechanism explains only the rules in `EXPLAINABLE_RULES` (and, where it names a defect on
  that rule, the sensitive suspects of `CONDITIONED_SUSPECT_RULES`): a crash, a compile error, a
  hang and a dtype or shape change are never explained away, whatever an experiment finds;
- what no mechanism explains keeps the severity its rule gives (a bug stays a bug);
- a mechanism's severity on a rule is its row's `severity_for(rule)`: its default, or its
  `decisive` severity where the rule says the output is a discrete decision;
- a mechanism's severity decides, whatever switch attribution names (`severity_policy.switch_severity`).
"""

from __future__ import annotations

from divfuzz.records.mechanism_table import CONDITIONED_DECISIVE_RULES, DECISIVE_RULES, MECHANISMS, SWITCH_MECHANISMS
from divfuzz.records.severity import Severity

# The rules a mechanism may explain: the bug rules a numeric difference can fake. Never a
# compiler failure or an output of another type or shape (`output-type-mismatch`).
EXPLAINABLE_RULES = frozenset({"nan-inf-new", "nan-inf-wrong", "nan-inf-lost", "zero-sign-wrong", "float-gross-worse", "int-valued-wrong", "int-gross"})


# Suspect rules that say the output is sensitive, not that compiled is right: an ill-conditioned
# input, or eager itself unstable in its precision. A mechanism that names a defect still names
# it there (a rounding that decides a comparison is no sensitivity's doing: the sensitivity only
# makes the dropped rounding show).
CONDITIONED_SUSPECT_RULES = frozenset({"gross-worse-ill-conditioned", "nan-inf-ill-conditioned",
                                       "int-valued-ill-conditioned", "int-ill-conditioned"})


def names_defect(mechanism: str, rule: str | None = None) -> bool:
    """Whether `mechanism` names a compiler defect (its severity is bug; on `rule` when given)."""
    row = MECHANISMS.get(mechanism)
    if row is None:
        return False
    return (row.severity_for(rule) if rule is not None else row.severity) is Severity.BUG


def mechanism_severity(mechanism: str, rule: str, device_type: str = "") -> Severity | None:
    """The severity `mechanism` gives a finding rated by `rule` on `device_type` ("" when not
    known), or None when it does not apply (no mechanism, an unknown one, or a rule no mechanism
    explains; on a rule of `CONDITIONED_SUSPECT_RULES`, only a mechanism that names a defect there
    applies)."""
    row = MECHANISMS.get(mechanism)
    if row is None:
        return None
    severity = row.severity_for(rule, device_type)
    if rule in EXPLAINABLE_RULES or (rule in CONDITIONED_SUSPECT_RULES and severity is Severity.BUG):
        return severity
    return None


def switch_mechanism_severity(switch: str, rule: str) -> Severity | None:
    """The severity a documented precision switch that removes a finding of `rule` gives it (the
    row of the mechanism it stands for, `SWITCH_MECHANISMS`): the row's default on a float
    difference, its decisive severity where the rule says the skipped rounding decided a discrete
    outcome, and `suspect` where the input's conditioning decides it as much (the record does
    not say which is to blame). None for a switch that stands for no mechanism."""
    row = MECHANISMS.get(SWITCH_MECHANISMS.get(switch, ""))
    if row is None:
        return None
    if rule in CONDITIONED_DECISIVE_RULES:
        return Severity.SUSPECT
    return row.severity_for(rule)


def decides_discrete(rule: str) -> bool:
    """Whether `rule` says the output is a discrete decision (`DECISIVE_RULES`)."""
    return rule in DECISIVE_RULES


def excuses(mechanism: str) -> bool:
    """Whether `mechanism` explains findings without a compiler defect (its default severity is below bug)."""
    row = MECHANISMS.get(mechanism)
    return row is not None and row.severity is not Severity.BUG


def describe_mechanism(mechanism: str) -> str:
    """The first screen's words for a mechanism id (the id itself when unknown: a newer store's)."""
    row = MECHANISMS.get(mechanism)
    return row.title if row is not None else mechanism
