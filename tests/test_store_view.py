"""The reports read a store only through `divfuzz.reports.store_view.StoreView` (issue 51, item 3):
every member of the view is the `Store`'s with the same parameters, a real store is one, and no
report calls anything else on a `store`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from divfuzz.fuzzer.store import Store
from divfuzz.reports.store_view import StoreView

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _members() -> list[str]:
    return [name for name in dir(StoreView) if not name.startswith("_") and callable(getattr(StoreView, name))]


def test_every_member_of_the_view_is_the_stores_with_its_parameters():
    assert _members(), "the view names no method"
    for name in _members():
        want = inspect.signature(getattr(StoreView, name))
        got = inspect.signature(getattr(Store, name))
        assert [(p.name, p.kind, p.default) for p in want.parameters.values()] == \
               [(p.name, p.kind, p.default) for p in got.parameters.values()], (name, want, got)


def test_a_real_store_is_a_view(tmp_path):
    store = Store(tmp_path / "divfuzz.sqlite")
    try:
        assert isinstance(store, StoreView)
    finally:
        store.close()


def test_the_reports_call_nothing_on_a_store_beyond_the_view():
    allowed = set(_members()) | {"path"}
    used: dict[str, set[str]] = {}
    for path in sorted(REPORTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "store":
                used.setdefault(node.attr, set()).add(path.name)
    assert used, "no report reads a store: the walk is broken"
    beyond = {attr: sorted(files) for attr, files in used.items() if attr not in allowed}
    assert not beyond, beyond
