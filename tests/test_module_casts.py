"""A model's explicit casts are part of what it computes: `minimize --module` on a model whose
cast round trip the real Inductor drops (torch 2.13 CPU) ends in a bug headline whose cause names
the dropped cast, whatever precision switch restores it, and whose repro exits 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main

MODULES = Path(__file__).parent / "modules"


def test_a_dropped_explicit_cast_is_a_bug_with_a_repro(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{MODULES / 'cast_roundtrip_fp16.py'}:make_case", "--device",
                                       "cpu", "--budget", "120s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "headline: bug" in result.output, result.output
    causes = [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]
    bugs = [c for c in causes if c["severity"]["severity"] == "bug"]
    assert bugs, causes
    assert "explained by explicit-cast-elided" in bugs[0]["severity"]["detail"], bugs[0]["severity"]
    run = subprocess.run([sys.executable, "repro.py"], cwd=bugs[0]["folder"], capture_output=True, timeout=600)
    assert run.returncode == 1, run.stdout.decode()[-2000:]


def test_a_dropped_cast_on_an_output_that_is_all_rounding_is_still_a_bug(tmp_path):
    """The output is the round trip's rounding error: ill-conditioned by construction (suspect), and
    a precision switch restores it. Compiled equal to the model without its cast names the defect
    all the same (`CONDITIONED_SUSPECT_RULES`)."""
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{MODULES / 'cast_roundtrip_error.py'}:make_case", "--device",
                                       "cpu", "--budget", "120s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "ill-conditioned" in result.output, result.output  # the sensitivity the judge reads first
    assert "headline: bug" in result.output, result.output
    causes = [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]
    bugs = [c for c in causes if c["severity"]["severity"] == "bug"]
    assert bugs and "explained by explicit-cast-elided" in bugs[0]["severity"]["detail"], causes
