"""Bad input: a clear message naming what was wrong, exit code 2, and an existing store untouched."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.config import CompileConfig
from divfuzz.generators.spec import SCHEMA_VERSION
from seed_specs import layer_norm_linear


def _invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("store")
    run_campaign(CampaignOptions(device="cpu", out_dir=out, max_cases=2, config=CompileConfig(backend="eager")))
    return out


def _digest(out) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(out.glob(STORE_NAME + "*")))).hexdigest()


def test_truncated_spec_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(layer_norm_linear().to_json()[:-40])
    result = _invoke("replay", str(path), "--device", "cpu")
    assert result.exit_code == 2
    assert str(path) in result.output and "not valid JSON" in result.output


def test_unknown_op_and_future_schema(tmp_path):
    spec = layer_norm_linear().to_dict()
    spec["nodes"][0]["op"] = "layer_nrom"
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps(spec))
    result = _invoke("replay", str(path), "--device", "cpu")
    assert result.exit_code == 2 and "unknown op 'layer_nrom'" in _flat(result.output)
    future = dict(layer_norm_linear().to_dict(), schema_version=SCHEMA_VERSION + 1)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(future))
    result = _invoke("replay", str(path), "--device", "cpu")
    assert result.exit_code == 2 and "newer than this divfuzz" in _flat(result.output)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_a_gpu_exits_2_and_leaves_the_store_alone(stored_run):
    before = _digest(stored_run)
    result = _invoke("fuzz", "--device", "cuda", "--max-cases", "1", "--out", str(stored_run))
    assert result.exit_code == 2 and "no CUDA GPU" in _flat(result.output)
    assert _digest(stored_run) == before


def test_bad_options_exit_2_and_leave_the_store_alone(stored_run):
    before = _digest(stored_run)
    for args, message in (
        (("--ops", "layer_norm,nope"), "unknown name(s) ['nope']"),
        (("--budget", "10x"), "Expected a duration"),
        (("--backend", "no_such_backend"), "unknown backend 'no_such_backend'"),
        (("--inductor", "not_a_key=1"), "unknown Inductor config key 'not_a_key'"),
    ):
        result = _invoke("fuzz", "--device", "cpu", "--max-cases", "1", "--out", str(stored_run), *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in _flat(result.output), (args, result.output)
    assert _digest(stored_run) == before


def test_report_on_a_folder_without_a_store(tmp_path):
    result = _invoke("report", "--out", str(tmp_path))
    assert result.exit_code == 2 and "no store here" in _flat(result.output)


@pytest.mark.parametrize("args", [
    ("report", "--out", "EMPTY"),
    ("diff", "EMPTY", "EMPTY"),
    ("merge", "OUT", "EMPTY"),
    ("bench", "--breakdown", "EMPTY"),
    ("minimize", "7", "--out", "EMPTY"),
    ("minimize", "--pending", "--out", "EMPTY"),
], ids=lambda a: " ".join(a[:2]))
def test_every_command_given_a_store_that_is_not_there_exits_2_naming_the_file_it_looked_for(tmp_path, args):
    # One resolver (`divfuzz.fuzzer.store.resolve_store`): a folder or the file itself, one error.
    (tmp_path / "empty").mkdir()
    args = [str(tmp_path / "empty") if a == "EMPTY" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    result = _invoke(*args)
    looked_for = tmp_path / "empty" / STORE_NAME
    assert result.exit_code == 2, result.output
    assert f"{looked_for}: no store here" in _flat(result.output), result.output
