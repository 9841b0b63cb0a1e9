"""The public-issue modules (corpus/public-modules/) that score divfuzz against the maintainers'
decisions: every header is valid, each issue is one of a file, and a bad header is refused
(exit 2, naming the file and the field) before anything runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "public_modules.py"


def _script():
    spec = importlib.util.spec_from_file_location("public_modules", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_module_has_a_valid_header_and_both_answers_are_represented():
    script = _script()
    headers = [script.parse_header(p) for p in sorted(script.MODULES_DIR.glob("i*.py"))]
    assert len(headers) >= 30
    expected = {h["expected"] for h in headers}
    assert expected == {"bug", "not-bug"}
    assert sum(h["expected"] == "not-bug" for h in headers) >= 10  # intended divergences count as much as bugs


def test_a_module_with_a_bad_header_is_refused_with_its_file_and_field(tmp_path):
    (tmp_path / "i123_bad.py").write_text('"""A title.\n\nissue: pytorch/pytorch#123\nexpected: maybe\ndevice: cpu\n'
                                          'grounds: none\n"""\n\ndef make_case():\n    return None\n')
    proc = subprocess.run([sys.executable, str(SCRIPT), "--modules-dir", str(tmp_path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert "i123_bad.py" in proc.stderr and "expected" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
