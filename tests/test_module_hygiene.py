"""How the modules of the five packages are named and how they import each other:

- no two modules share a basename (an `oracles/severity.py` beside a `records/severity.py` makes a
  reader open the wrong one): modules of different jobs have names that say which;
- no module imports another module's underscore name: a helper two modules share is public, or it
  moves to the module that owns the idea.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fuzzer", "generators", "oracles", "reports", "records")

# Basenames two modules may share, each with the reason. Empty: every module's name is its own.
SHARED_BASENAMES: dict[str, str] = {}


def _modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)


def _shared_basenames(paths: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        if path.stem not in ("__init__", "__main__"):
            by_name[path.name].append(str(path.relative_to(root)))
    return {name: found for name, found in by_name.items() if len(found) > 1}


def test_no_two_modules_share_a_basename():
    modules = _modules()
    assert len(modules) > 80
    shared = _shared_basenames(modules)
    assert {name: found for name, found in shared.items() if name not in SHARED_BASENAMES} == {}
    # an allowance no longer needed goes too
    assert set(SHARED_BASENAMES) <= set(shared)


def test_the_basename_check_sees_a_shared_name(tmp_path):
    for relative in ("records/severity.py", "oracles/severity.py", "oracles/__init__.py", "records/__init__.py",
                     "fuzzer/__main__.py", "fuzzer/cli/__main__.py", "fuzzer/engine/execute.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    assert _shared_basenames(_modules(tmp_path), tmp_path) == {"severity.py": ["oracles/severity.py", "records/severity.py"]}


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Each underscore name (not a dunder) `path` takes from a divfuzz module: `from divfuzz.X import
    _name`, or `alias._name` where `alias` is a divfuzz module or name imported into `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = str(path.relative_to(root))
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("divfuzz."):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            aliases |= {alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name.startswith("divfuzz.")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_takes_another_modules_private_name():
    assert [line for path in _modules() for line in _private_uses(path)] == []


def test_the_private_name_check_sees_both_forms(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import divfuzz.fuzzer.engine.execute as ex\nimport divfuzz.reports.html\n"
                       "from divfuzz.fuzzer.engine.execute import _helper, public\nfrom divfuzz.fuzzer import cli\n"
                       "ex._clock(); divfuzz.reports.html._e(1); public._x; cli.__name__; self._own; _local()\n")
    assert sorted(line.split(": ", 1)[1] for line in _private_uses(planted, tmp_path)) == [
        "divfuzz.reports.html._e", "ex._clock", "from divfuzz.fuzzer.engine.execute import _helper", "public._x"]
