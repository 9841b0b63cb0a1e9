"""The mechanism table (`divfuzz.records.mechanism_table`) is the one record of what each mechanism is
worth and which public decision grounds it: every mechanism an experiment names, a known-bugs entry
names or a precision switch stands for has a row; every row carries its grounding; a severity the
record does not settle is never `bug`; docs/findings.md prints the table as the code holds it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from divfuzz.records.mechanism_table import CONDITIONED_DECISIVE_RULES, DECISIVE_RULES, MECHANISMS, SWITCH_MECHANISMS, markdown_table
from divfuzz.records.severity import NUMERIC_RULES, Severity

ROOT = Path(__file__).resolve().parents[1]
_NAMED = re.compile(r'Explanation\(\s*"([a-z-]+)"')


def _named_by_experiments() -> set[str]:
    names = set()
    for path in (ROOT / "fuzzer").rglob("*.py"):
        names |= set(_NAMED.findall(path.read_text()))
    return names


def test_every_mechanism_an_experiment_a_known_bug_or_a_switch_names_has_a_row():
    named = _named_by_experiments()
    assert {"subnormal-flush", "range-edge", "tie", "reduction-order", "explicit-cast-elided", "rounding-decides",
            "approximate-division"} <= named, named  # the scan sees them
    known = {e["mechanism"] for e in json.loads((ROOT / "corpus" / "known-bugs.json").read_text())["entries"] if e.get("mechanism")}
    missing = sorted((named | known | set(SWITCH_MECHANISMS.values())) - set(MECHANISMS))
    assert not missing, missing


def test_every_row_is_grounded_and_the_record_decides_what_is_a_bug():
    for row in MECHANISMS.values():
        assert row.grounding, row.id
        for g in row.grounding:
            assert g.ref and g.who and g.says and g.decides in ("intended", "bug", "split", "silent"), (row.id, g)
            assert re.fullmatch(r"20\d\d-\d\d-\d\d", g.checked), (row.id, g)
        severities = {row.severity, *(s for _, s in row.on_devices)} | ({row.decisive} if row.decisive else set())
        if Severity.BUG in severities:  # a bug rests on a public report or fix, never on silence alone
            assert any(g.decides == "bug" for g in row.grounding), row.id
        if Severity.BY_DESIGN in severities or Severity.NOISE in severities:
            assert any(g.decides == "intended" for g in row.grounding), row.id
        assert row.record in ("settled", "split", "silent"), row.id
        if row.record != "settled":
            assert row.record_note, row.id  # says which case is split or silent
            assert Severity.SUSPECT in severities, row.id  # ... and that case reads suspect


def test_decisive_rules_are_rules_the_policy_emits():
    assert DECISIVE_RULES <= set(NUMERIC_RULES) and CONDITIONED_DECISIVE_RULES <= set(NUMERIC_RULES)
    assert not DECISIVE_RULES & CONDITIONED_DECISIVE_RULES


def test_docs_print_the_table_the_code_holds():
    text = (ROOT / "docs" / "findings.md").read_text()
    begin = text.index("-->\n", text.index("<!-- mechanisms: generated")) + 4
    end = text.index("\n<!-- mechanisms: end -->")
    assert text[begin:end] == markdown_table(), (
        "docs/findings.md is out of date: paste the output of "
        "python -c 'from divfuzz.records.mechanism_table import markdown_table; print(markdown_table())'")
