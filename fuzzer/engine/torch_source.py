"""What the installed torch is and has, read from its source files as data, never imported, so
that a command refuses bad input in well under a second instead of after torch's import (2 to
20 s, by the host's load): `torch/version.py`'s literals, and the config keys
`torch/_inductor/config.py` binds.

Invariants: nothing here imports torch, runs its code or starts a process (a test checks
`sys.modules`). Each reader returns None where the file cannot be read or parsed as expected (an
unusual install, a zipped torch): the caller then decides later, with torch, as before. What the
source binds is a superset of what an import binds (both branches of an `if` count), so a key
absent from it is certainly absent from torch.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


def _torch_folder() -> Path | None:
    """The installed torch package's folder, found without importing it (None when not found)."""
    try:
        found = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    folders = list(found.submodule_search_locations or []) if found else []
    return Path(folders[0]) if folders else None


def _parsed(relative: str) -> ast.Module | None:
    folder = _torch_folder()
    if folder is None:
        return None
    try:
        return ast.parse((folder / relative).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def torch_build() -> dict | None:
    """The installed torch's `torch/version.py` literals (`__version__`, `cuda`, `hip`), or None."""
    tree = _parsed("version.py")
    if tree is None:
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("__version__", "cuda", "hip") and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return None
    return values if "__version__" in values else None


@functools.lru_cache(maxsize=1)
def inductor_config_keys() -> frozenset[str] | None:
    """Every name `torch/_inductor/config.py` binds, dotted for its nested classes (`cpp.simdlen`,
    `triton.cudagraphs`), or None when the file cannot be read and parsed."""
    tree = _parsed("_inductor/config.py")
    if tree is None:
        return None
    names = frozenset(_bound_names(tree.body, ""))
    return None if "*" in names else names  # a star import binds what only an import can tell


def _type_checking_only(node: ast.stmt) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): read by type checkers, never run."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING")


def _bound_names(body: list[ast.stmt], prefix: str):
    for node in body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        yield prefix + name.id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield prefix + node.target.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name
        elif isinstance(node, ast.ClassDef):
            yield prefix + node.name
            yield from _bound_names(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                yield prefix + (alias.asname or alias.name.split(".")[0])
        elif _type_checking_only(node):
            continue
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for branch in ("body", "orelse", "finalbody"):
                yield from _bound_names(getattr(node, branch, []), prefix)
            for handler in getattr(node, "handlers", []):
                yield from _bound_names(handler.body, prefix)
