"""The layers hold: `lint-imports` (import-linter) keeps every contract in pyproject.toml, and a
planted upward import breaks the layers contract (so the check can fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("records", "generators", "oracles", "reports", "fuzzer")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(config_filename='pyproject.toml'))"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_every_layer_contract_is_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / "divfuzz" / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # records is the bottom layer: an import of the engine from it must be refused, and so must torch.
    errors = tmp_path / "divfuzz" / "records" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport divfuzz.fuzzer.engine.worker  # noqa\nimport torch  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "divfuzz layers import downward only BROKEN" in result.stdout
    assert "records and the verdict and severity policies import no torch BROKEN" in result.stdout
    assert "divfuzz.records.errors -> divfuzz.fuzzer.engine.worker" in result.stdout


def test_the_worker_targets_are_above_every_layer_and_run_no_command(tmp_path):
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / "divfuzz" / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # The registry is imported by nothing; a target's module reaching for click is a command's code in a worker.
    attribute = tmp_path / "divfuzz" / "fuzzer" / "triage" / "attribute.py"
    attribute.write_text(attribute.read_text() + "\nimport divfuzz.fuzzer.worker_targets  # noqa\nimport click  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "divfuzz layers import downward only BROKEN" in result.stdout
    assert "what a worker runs imports no command BROKEN" in result.stdout
    assert "divfuzz.fuzzer.triage.attribute -> divfuzz.fuzzer.worker_targets" in result.stdout
