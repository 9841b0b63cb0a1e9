"""divfuzz installs under one import root, `divfuzz`, and claims no top-level import name that another
project owns (PyPI has `fuzzer`, `generators`, `oracles` and the widely installed `records`).

- pyproject's package list is exactly the package folders on disk, so a new subpackage cannot be left
  out of the wheel;
- no module, test or script imports a bare `fuzzer`, `generators`, `oracles`, `reports` or `records`
  (from a checkout's root those would import a second copy of the code under another name);
- the built wheel's only top-level import name is `divfuzz`.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("records", "generators", "oracles", "reports", "fuzzer")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_package_list_is_the_folders_on_disk():
    on_disk = {"divfuzz." + ".".join(init.parent.relative_to(ROOT).parts)
               for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py") if "__pycache__" not in init.parts}
    setuptools = _pyproject()["tool"]["setuptools"]
    assert set(setuptools["packages"]) == on_disk
    assert setuptools["package-dir"] == {f"divfuzz.{folder}": folder for folder in FOLDERS}


def _bare_imports(path: Path, base: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.relative_to(base)}:{node.lineno}: {name}" for name in names if name.split(".")[0] in FOLDERS]
    return found


def test_no_file_imports_a_bare_top_level_name():
    sources = [p for folder in (*FOLDERS, "tests", "scripts") for p in (ROOT / folder).rglob("*.py")
               if "__pycache__" not in p.parts]
    assert len(sources) > 100
    offenders = [line for path in sources for line in _bare_imports(path)]
    assert offenders == []


def test_the_check_sees_a_bare_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from fuzzer.engine import worker\nimport records.errors\nfrom divfuzz.fuzzer import cli\n")
    assert [line.split(": ")[1] for line in _bare_imports(planted, tmp_path)] == ["fuzzer.engine", "records.errors"]


def test_the_wheel_has_one_top_level_name(tmp_path):
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "No module named pip" in built.stderr:
        pytest.skip("this environment has no pip")
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("divfuzz-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"divfuzz"}
    assert "divfuzz/fuzzer/cli/main.py" in names and "divfuzz/records/errors.py" in names
    assert not any(name.startswith("divfuzz/__init__") for name in names)  # an implicit namespace
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "divfuzz = divfuzz.fuzzer.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
