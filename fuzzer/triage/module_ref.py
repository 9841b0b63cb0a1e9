"""`--module path/to/file.py:NAME`, the reference to a user's own model: its syntax and its file.

Torch-free, so that the command line refuses a bad reference (exit 2, naming it) before torch is
imported and before anything is written; `divfuzz.fuzzer.triage.user_module` loads the file through
the same check in its worker.
"""

from __future__ import annotations

from pathlib import Path

from divfuzz.records.errors import ConfigError


def parse_module_ref(ref: str) -> tuple[Path, str]:
    """(the file, NAME) of `path/to/file.py:NAME`; ConfigError naming `ref` when it is malformed or
    the file is not there."""
    path, sep, name = ref.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise ConfigError(f"Expected --module path/to/file.py:NAME but got {ref!r}")
    if not name.isidentifier():
        raise ConfigError(f"--module {ref!r}: NAME {name!r} is not a Python name")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--module {ref!r}: no file {path}")
    return file, name
