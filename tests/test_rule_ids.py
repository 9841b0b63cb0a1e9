"""Rule ids are a closed vocabulary (issue 51, item 4): `divfuzz.records.severity.Rule`. Every
rule id written in divfuzz's code, where a reason is built (`SeverityReason(severity, "rule", ...)`)
or a rule is compared (`reason.rule == "..."`, `rule in ("...", ...)`, `rule="..."`), is one of its
members, and the policy's table names each member once: a misspelt rule is a failing test, not a
finding that silently never matches."""

from __future__ import annotations

import ast
from pathlib import Path

from divfuzz.oracles.severity_policy import RULE_SEVERITY
from divfuzz.records.severity import RULE_IDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fuzzer", "generators", "oracles", "reports", "records")


def _is_rule(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "rule") or (isinstance(node, ast.Name) and node.id == "rule")


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple"):
        return [s for a in node.args for s in _strings(a)]
    return []


def rule_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of each string the code uses as a rule id."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and (_is_rule(node.left) or any(_is_rule(c) for c in node.comparators)):
            found += [(node.lineno, s) for part in (node.left, *node.comparators) for s in _strings(part)]
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name == "SeverityReason" and len(node.args) >= 2:
                found += [(node.lineno, s) for s in _strings(node.args[1])]
            found += [(node.lineno, s) for k in node.keywords if k.arg == "rule" for s in _strings(k.value)]
    return found


def test_every_rule_id_in_the_code_is_in_the_vocabulary():
    seen = [(p, line, text) for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            for line, text in rule_literals(ast.parse(p.read_text()))]
    assert len(seen) > 60  # the scan sees the code's rule ids (the policy alone writes dozens)
    bad = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p, line, text in seen if text not in RULE_IDS and text not in ("", "-")]
    assert bad == []


def test_the_check_sees_a_misspelt_rule_and_the_policy_names_every_rule_once():
    assert rule_literals(ast.parse('if reason.rule == "few-ulp": pass\nSeverityReason(BUG, "int-gros", "v1", "")')) == [
        (1, "few-ulp"), (2, "int-gros")]
    assert set(RULE_SEVERITY) == RULE_IDS
