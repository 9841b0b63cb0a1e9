"""docs/layout.md names every module of the five packages (issue 51, item 5): a module the map does
not name is one a newcomer cannot place. A row's first cell is a folder (`fuzzer/engine/`) or a
module; the folder's modules are named in its row by file name (`compile.py`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fuzzer", "generators", "oracles", "reports", "records")
LAYOUT = ROOT / "docs" / "layout.md"


def _named() -> set[str]:
    """Module paths (relative to the root) the layout's table names."""
    named: set[str] = set()
    for line in LAYOUT.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        head = cells[0].strip("`")
        if head.endswith(".py"):
            named.add(head)
            continue
        folder = head.rstrip("/")
        for name in re.findall(r"`([A-Za-z0-9_/]+\.py)`", cells[1]):
            named.add(name if "/" in name else f"{folder}/{name}")
    return named


def _modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
            if "__pycache__" not in p.parts and p.name not in ("__init__.py", "__main__.py")}


def test_the_layout_names_every_module():
    missing = sorted(_modules() - _named())
    assert missing == [], f"docs/layout.md does not name: {', '.join(missing)}"


def test_the_layout_names_no_module_that_is_gone():
    assert sorted(_named() - _modules()) == []
