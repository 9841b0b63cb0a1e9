"""Rule ids are one closed vocabulary (`divfuzz.records.rules.Rule`): the severity table has one
entry per member, and every rule id the package writes as a literal is a member, so a misspelt
rule (which would silently match nothing in the known-bug list or a severity set) fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from divfuzz.oracles.severity_policy import RULE_SEVERITY
from divfuzz.records.outcomes import COMPILER_FAILURES
from divfuzz.records.rules import RULE_IDS, Rule

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("fuzzer", "generators", "oracles", "records", "reports")
NOT_A_RULE = {"-", ""}  # a reason with no rule's output, an unset rule


def _strings(node: ast.AST) -> list[tuple[str, int]]:
    """String constants directly in `node` (itself, or the items of a tuple, list, set or frozenset(...))."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.value, node.lineno)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple") and node.args:
        return _strings(node.args[0])
    return []


def _is_rule(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "rule") or (isinstance(node, ast.Attribute) and node.attr == "rule")


def rule_literals(tree: ast.AST) -> list[tuple[str, int]]:
    """Every string the code uses as a rule id: a `SeverityReason`'s rule, a `rule=` argument, a
    comparison with a `rule`, a `*_RULES` constant's members."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name == "SeverityReason" and len(node.args) >= 2:
                found += _strings(node.args[1])
            found += [s for k in node.keywords if k.arg == "rule" for s in _strings(k.value)]
        elif isinstance(node, ast.Compare) and (_is_rule(node.left) or any(_is_rule(c) for c in node.comparators)):
            for side in (node.left, *node.comparators):
                found += _strings(side)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith("_RULES") for t in targets) and node.value is not None:
                found += _strings(node.value)
    return [(s, line) for s, line in found if s not in NOT_A_RULE]


def test_the_severity_table_has_one_entry_per_rule():
    assert set(RULE_SEVERITY) == RULE_IDS
    assert {k.value for k in COMPILER_FAILURES.values()} <= RULE_IDS
    assert Rule("nan-inf-lost") == "nan-inf-lost" and str(Rule.NAN_INF_LOST) == "nan-inf-lost"


def test_every_rule_literal_in_the_package_is_a_rule():
    unknown, seen = {}, 0
    for folder in PACKAGE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            literals = rule_literals(ast.parse(path.read_text(), str(path)))
            seen += len(literals)
            bad = [f"{s!r} (line {line})" for s, line in literals if s not in RULE_IDS]
            if bad:
                unknown[str(path.relative_to(ROOT))] = bad
    assert unknown == {}, f"not a divfuzz.records.rules.Rule: {unknown}"
    assert seen >= 50  # the scan sees the package's rules (it would pass vacuously otherwise)


def test_the_scan_catches_a_misspelt_rule():
    tree = ast.parse('if reason.rule == "nan-inf-lsot":\n    pass\nX_RULES = frozenset({"few-ulps"})\n'
                     'r = SeverityReason(Severity.BUG, "int-gross", "v1")\n')
    assert sorted(s for s, _ in rule_literals(tree)) == ["few-ulps", "int-gross", "nan-inf-lsot"]
