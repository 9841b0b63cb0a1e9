"""How the modules of the five packages are named and how they import each other:

- no two modules share a basename (an `oracles/severity.py` beside a `records/severity.py` makes a
  reader open the wrong one): modules of different jobs have names that say which;
- no module imports another module's underscore name: a helper two modules share is public, or it
  moves to the module that owns the idea;
- imports sit at the module's top. One inside a function is preceded by a `# lazy: <reason>` comment
  naming one of `LAZY_REASONS`, and their number cannot grow past `MAX_FUNCTION_IMPORTS`. A module
  that keeps torch lazy for being torch-free at import really is (checked in a fresh interpreter).
"""

from __future__ import annotations

import re

import ast
import subprocess
import sys
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


# Why an import may sit inside a function (the text after `# lazy: ` starts with one of these).
LAZY_REASONS = (
    "optional extra",  # onnx, nvfuser (thunder), cluster (dask distributed), models: absent unless installed
    "heavy",  # torch._dynamo / torch._inductor / torch._functorch: ~0.8 s beyond torch, paid only where something compiles
    "torch-free module",  # the module imports no torch at import (the driver, the store, `divfuzz report` read it without torch)
    "CLI start-up",  # `divfuzz --help` imports no torch and no command's machinery
    "import cycle",  # name the module that imports this one
)
# Modules other helpers are rewriting now (issue 23: the store as a stage, the campaign loop, the gate's
# run): their function-level imports are counted but not yet tagged. Remove each entry once its
# rewrite has landed and its imports carry their reasons.
UNTAGGED_FOR_NOW: set[str] = set()
# Function-level imports in the five packages: 301 before issue 23's pass, this many after. Lower it
# when you hoist one; raising it needs a reason from LAZY_REASONS. 170: CLI start-up (issue 35: a
# device, file or store error is reported before torch is imported) and torch-free module (issue 39's
# issue.py writer, the report's --issue), heavy (issue 40: the campaign's private compile cache). 168:
# issue 36 hoisted minimize's records.config imports. 169: heavy (issue 53: Dynamo's own graph counter,
# read around a dynamic spec's shape siblings, and mark_dynamic, each only where a spec is dynamic;
# issue 56's fuzz pre-check, which opens the store before torch is imported, went in where one left).
# 170: CLI start-up (issue 52: `divfuzz recheck`'s command loads its machinery when it runs).
MAX_FUNCTION_IMPORTS = 170


def _function_imports(path: Path) -> list[tuple[int, list[str]]]:
    """Each group of consecutive import statements inside a function: (line, modules)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    groups: list[tuple[int, list[str]]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody"):
            block, run = getattr(node, field, None), []
            if not isinstance(block, list):
                continue
            for statement in block + [None]:
                if in_function and isinstance(statement, (ast.Import, ast.ImportFrom)):
                    run.append(statement)
                    continue
                if run:
                    groups.append((run[0].lineno, [s.module if isinstance(s, ast.ImportFrom) else a.name
                                                   for s in run for a in (s.names if isinstance(s, ast.Import) else [s])]))
                    run = []
        for child in ast.iter_child_nodes(node):
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return groups


def _untagged(path: Path, root: Path = ROOT) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for line, modules in _function_imports(path):
        comment = lines[line - 2].strip()
        if not (comment.startswith("# lazy: ") and comment[len("# lazy: "):].startswith(LAZY_REASONS)):
            found.append(f"{path.relative_to(root)}:{line}: {', '.join(modules)}")
    return found


def _count_function_imports(path: Path) -> int:
    """Import statements whose parents include a function (the figure issue 23 measures)."""
    def count(node: ast.AST, in_function: bool) -> int:
        return sum((in_function and isinstance(child, (ast.Import, ast.ImportFrom)))
                   + count(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
                   for child in ast.iter_child_nodes(node))
    return count(ast.parse(path.read_text(), filename=str(path)), False)


def test_function_level_imports_do_not_creep_back():
    count = sum(_count_function_imports(path) for path in _modules())
    assert count <= MAX_FUNCTION_IMPORTS, f"{count} function-level imports, at most {MAX_FUNCTION_IMPORTS}: hoist the new one"


def test_each_function_level_import_says_why():
    assert [line for path in _modules() if str(path.relative_to(ROOT)) not in UNTAGGED_FOR_NOW
            for line in _untagged(path)] == []
    assert all((ROOT / name).exists() for name in UNTAGGED_FOR_NOW)  # an entry for a module gone goes too


def test_the_lazy_check_sees_an_untagged_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n\ndef f():\n    # lazy: heavy: Dynamo\n    import torch._dynamo\n    x = 1\n"
                       "    import json\n    from pathlib import Path\n    return x\n\n"
                       "def g():\n    # lazy: it felt right\n    import re\n")
    assert _untagged(planted, tmp_path) == ["planted.py:7: json, pathlib", "planted.py:13: re"]
    assert _count_function_imports(planted) == 4


def test_modules_that_keep_torch_lazy_import_none():
    lazy_for_torch = ["divfuzz." + ".".join(path.relative_to(ROOT).with_suffix("").parts) for path in _modules()
                      if "# lazy: torch-free module" in path.read_text()]
    assert len(lazy_for_torch) >= 5
    code = ("import importlib, subprocess, sys\n"
            "for name in sys.argv[1:]:\n"
            "    r = subprocess.run([sys.executable, '-c', f'import sys, {name}; print(\"torch\" in sys.modules)'],"
            " capture_output=True, text=True)\n"
            "    print(name, r.stdout.strip() or r.stderr.strip()[-300:])\n")
    result = subprocess.run([sys.executable, "-c", code, *lazy_for_torch], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if not line.endswith(" False")] == []


def test_every_deadline_is_a_deadline():
    """Time has one owner (`divfuzz.records.deadline`): no module builds a deadline by hand as
    `time.monotonic() + seconds` (issue 51: six did)."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p in _modules() if p.name != "deadline.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"monotonic\(\)\s*\+", line)]
    assert found == []
