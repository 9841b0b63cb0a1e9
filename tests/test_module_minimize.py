"""`divfuzz minimize --module`: the seeds' own models, handed over as a user would, reduced by
torch's fx minifier with divfuzz's oracle as predicate, one folder per root cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fuzzer.cli import main

MODULES = Path(__file__).parent / "modules"


def _minimize(tmp_path: Path, module: str, *args: str) -> list[dict]:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["minimize", "--module", f"{MODULES / module}:make_case", "--out", str(out), *args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]


def _repro_exit_code(cause: dict) -> int:
    folder = Path(cause["folder"])
    return subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True, timeout=600).returncode


@pytest.mark.slow
def test_seed_000_gated_model_yields_its_two_separate_root_causes(tmp_path):
    causes = _minimize(tmp_path, "seed000_gated.py", "--device", "cpu", "--autocast", "bfloat16")
    summaries = [c["summary"] for c in causes]
    assert len(causes) == 2, (summaries, (tmp_path / "out" / "ladder.json").read_text())
    assert causes[0]["summary"] == "decomposition of aten.native_layer_norm"
    assert "emulate_precision_casts" in causes[1]["summary"]
    # The second cause is looked for with the first one's decomposition removed.
    assert causes[1]["with_decompositions_removed"] == ["aten.native_layer_norm"]
    assert all(c["ops"] <= 3 < c["ops_before"] for c in causes)
    assert all(_repro_exit_code(c) == 1 for c in causes)


@pytest.mark.slow
def test_seed_002_e8m0_model_keeps_its_uint8_flips_while_shrinking(tmp_path):
    causes = _minimize(tmp_path, "seed002_e8m0.py", "--device", "cpu")
    assert causes, "torch 2.13 CPU shows uint8 flips for this model; the pipeline must find them"
    for c in causes:
        assert c["ops"] < c["ops_before"]
        assert "no single subsystem" not in c["summary"]
        assert _repro_exit_code(c) == 1


@pytest.mark.gpu
def test_seed_002_e8m0_model_on_cuda_names_its_causes_and_keeps_the_flips(tmp_path):
    # On an H100 with torch 2.11 this model flips 1,347 of 524,288 uint8 outputs (max step 7).
    # The fx minifier keeps the convolutions and batch norms that the culprits live in, so the
    # reduced graphs are 16-17 ops, not the 6: see the issue 3 note.
    causes = _minimize(tmp_path, "seed002_e8m0.py", "--device", "cuda")
    assert causes
    assert all(c["ops"] < c["ops_before"] for c in causes)
    assert all("no single subsystem" not in c["summary"] for c in causes)
    assert all(_repro_exit_code(c) == 1 for c in causes)
