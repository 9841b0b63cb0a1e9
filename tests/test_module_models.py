"""The H100 model table's user modules (tests/modules/tiny_*.py, timm_*.py, tv_resnet50.py) and its
table helper (scripts/models_table.py). The vision modules import timm/torchvision lazily, so this
host (whose CPU torch cannot load torchvision) can still import them; the transformers ones are
captured through Dynamo here (slow tier), as `scripts/gpu_models.sh` runs them on the GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from capture_checks import assert_captured_and_lowered_bit_for_bit

MODULES = Path(__file__).parent / "modules"
ROOT = Path(__file__).parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"divfuzz_test_{name}", MODULES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["timm_convnext", "timm_vit", "tv_resnet50", "tiny_qwen2", "tiny_gpt2", "tiny_bert"])
def test_every_model_module_imports_without_its_model_library(name):
    # Importing must not import timm, torchvision or transformers: only make_case() may.
    before = {m for m in ("timm", "torchvision", "transformers") if m in sys.modules}
    module = _load(name)
    assert callable(module.make_case)
    assert {m for m in ("timm", "torchvision", "transformers") if m in sys.modules} == before
    # Every case is made on the GPU host by `scripts/gpu_models.sh`: the script must name the file.
    assert f"tests/modules/{name}.py" in (ROOT / "scripts" / "gpu_models.sh").read_text()


def _table(folder: Path) -> list[str]:
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "models_table.py"), str(folder)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_the_table_reads_capture_culprits_wall_time_and_a_timeout_from_the_run_folders(tmp_path):
    run = tmp_path / "qwen2-train"
    (run / "01-inductor").mkdir(parents=True)
    (run / "02-inductor").mkdir()
    (run / "capture.json").write_text(json.dumps({
        "graphs": [{"ops": 7}, {"ops": 90}], "graph_breaks": 1, "culprit_graphs": [2], "notes": [],
        "severity": {"severity": "bug", "rule": "float-worse", "output": "loss", "detail": "x"}}))
    (run / "01-inductor" / "culprit.json").write_text(json.dumps(
        {"ops_before": 90, "ops": 4, "rung": "inductor", "summary": "inductor: emulate_precision_casts removes it"}))
    (run / "02-inductor" / "culprit.json").write_text(json.dumps(
        {"ops_before": 7, "ops": 2, "rung": "inductor", "summary": "inductor: lowering"}))
    (run / "wall.txt").write_text("61\n")
    (run / "rc.txt").write_text("0\n")
    (run / "phases.json").write_text(json.dumps({"phases_s": {"judge_model": 20.5, "reduce": 30.0}, "in_flight": None,
                                                 "cut_by_budget": ["02-inductor: culprit not attributed: budget spent after reduction"]}))
    killed = tmp_path / "vit-infer"
    killed.mkdir()
    (killed / "rc.txt").write_text("124\n")
    (killed / "phases.json").write_text(json.dumps({"phases_s": {"load": 3.0}, "in_flight": "judge_model", "cut_by_budget": []}))
    header, _, *rows = _table(tmp_path)
    assert "graph breaks" in header and "culprit" in header and "wall" in header and "seconds per phase" in header
    assert len(rows) == 2
    qwen = next(r for r in rows if r.startswith("| qwen2 | train"))
    for cell in ("2 (7+90)", "| 1 |", "bug (float-worse)", "90 -> 4 (inductor); 7 -> 2 (inductor)",
                 "emulate_precision_casts removes it", "61 s |", "| judge_model 20.5, reduce 30; 1 cut by --budget |"):
        assert cell in qwen, (cell, qwen)
    vit = next(r for r in rows if r.startswith("| vit | infer"))
    assert "no capture.json" in vit and "(timeout)" in vit and "load 3; stopped in judge_model" in vit


def test_the_table_refuses_a_missing_folder_with_exit_2(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "models_table.py"), str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "usage" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny_qwen2", "tiny_gpt2", "tiny_bert"])
def test_a_transformers_model_is_captured_through_dynamo_and_lowered_bit_for_bit(name):
    pytest.importorskip("transformers")
    from divfuzz.fuzzer.triage.capture import normalize_case

    model, args, kwargs = normalize_case(_load(name).make_case(), name)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert_captured_and_lowered_bit_for_bit(model, args, kwargs, "modeling_")
