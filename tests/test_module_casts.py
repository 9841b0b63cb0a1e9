"""A model's explicit cast round trip that the real Inductor drops (torch 2.13 CPU) is, by the public
record, intended by default on the CPU (jansel on issue 183761; PR 185847 for issue 185337: "Default-
config behavior is unchanged"; `divfuzz.records.mechanism_table`): `minimize --module` ends in a by-design
headline whose cause names what removes it, writes no issue.py (nothing to file), and keeps a
repro.py that exits 1 while the divergence is there. A round trip whose rounding decides a
comparison is a bug: tests/test_rounding_decides.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main

MODULES = Path(__file__).parent / "modules"


def _module(tmp_path, name: str):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{MODULES / name}:make_case", "--device",
                                       "cpu", "--budget", "120s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result, [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]


def test_a_dropped_explicit_cast_on_the_cpu_is_by_design_with_a_repro_and_nothing_to_file(tmp_path):
    result, causes = _module(tmp_path, "cast_roundtrip_fp16.py")
    assert "headline: by-design" in result.output, result.output
    assert causes and all(c["severity"]["severity"] == "by-design" for c in causes), causes
    assert not list(Path(causes[0]["folder"]).glob("issue.py"))  # written for a bug only
    run = subprocess.run([sys.executable, "repro.py"], cwd=causes[0]["folder"], capture_output=True, timeout=600)
    assert run.returncode == 1, run.stdout.decode()[-2000:]  # the divergence is there; it is the default


def test_a_dropped_cast_on_an_output_that_is_all_rounding_reads_as_the_cast_does(tmp_path):
    """The output is the round trip's rounding error: ill-conditioned by construction (suspect), and
    a precision switch restores it: by-design on the CPU, as any dropped cast pair there."""
    result, causes = _module(tmp_path, "cast_roundtrip_error.py")
    assert "ill-conditioned" in result.output, result.output  # the sensitivity the judge reads first
    assert "headline: by-design" in result.output, result.output
    assert causes and causes[0]["severity"]["severity"] == "by-design", causes
