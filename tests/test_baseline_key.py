"""Baselines are keyed by what changes the numbers: device type, torch minor version, and CPU
capability or GPU architecture. A baseline for another key is refused (exit 2) unless
`--baseline-any`, which reports the mismatch on the console and in every report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.gate.baseline import load_baseline, machine_key, torch_minor

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpus"
CLEAN_SPEC = "seed-gelu-tanh-bf16"  # clean under the eager backend on every machine


def key_in_subprocess(capability: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    code = ("import json, torch; from pathlib import Path; from divfuzz.fuzzer.gate.replay import machine_key, default_baseline_path;"
            "print(json.dumps({**machine_key('cpu'), 'path': default_baseline_path(Path('c'), 'cpu').name,"
            " 'torch_says': torch.backends.cpu.get_cpu_capability()}))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cpu_key_follows_the_capability_aten_dispatches_to():
    native = key_in_subprocess(None)
    assert native["arch"] == native["torch_says"].lower()
    assert native["path"] == f"baseline-cpu-{torch_minor()}-{native['arch']}.json"
    if native["torch_says"] not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU is {native['torch_says']}")
    lowered = key_in_subprocess("avx2")
    assert lowered["torch_says"] == "AVX2" and lowered["arch"] == "avx2"
    assert lowered["path"] == f"baseline-cpu-{torch_minor()}-avx2.json"




@pytest.mark.parametrize("arch", ["avx2", "avx512"])
def test_a_cpu_baseline_is_committed_for_each_x86_capability(arch):
    path = CORPUS / f"baseline-cpu-{torch_minor()}-{arch}.json"
    baseline = load_baseline(path)
    assert baseline.key() == {"device_type": "cpu", "torch": torch_minor(), "arch": arch}
    assert set(baseline.specs) == {p.stem for p in (CORPUS / "specs").glob("*.json")}


def test_workers_key_the_compile_caches_by_the_cpu_isa():
    """torch 2.13's FX-graph and AOTAutograd cache keys leave out the vector ISA Inductor generates
    C++ for; measured on an AVX512 host, a graph cached by a native run and loaded under
    ATEN_CPU_CAPABILITY=avx2 gave NaN in 634 of 6912 outputs. Each CPU worker puts what picks
    Inductor's ISA into torch's cache key tag, so runs under two capabilities never share a cache
    entry. The two compared are the host's native one and `default` (scalar code, no vector ISA):
    they differ on every x86 host, an AVX2-only one included."""
    from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget

    if key_in_subprocess(None)["torch_says"] not in ("AVX2", "AVX512"):
        pytest.skip("not an x86 host with AVX2")
    tags = {}
    for capability in ("default", None):
        worker = Worker("cpu", extra_env={"ATEN_CPU_CAPABILITY": capability} if capability else {})
        try:
            worker.start()
            outcome = worker.call(WorkerTarget.KEY_CACHES_BY_ISA, {}, 300)
        finally:
            worker.stop()
        assert outcome.error is None, outcome.error
        tags[capability] = outcome.value
    assert tags["default"].startswith("divfuzz-cpu=default")
    assert tags[None].startswith(f"divfuzz-cpu={machine_key('cpu')['arch']}") and tags[None] != tags["default"]


def test_the_cuda_baseline_is_keyed_by_the_gpu_architecture_it_was_written_on():
    baseline = load_baseline(CORPUS / "baseline-cuda-2.11-sm_90.json")
    assert baseline.key() == {"device_type": "cuda", "torch": "2.11", "arch": "sm_90"}


@pytest.mark.gpu
def test_the_cuda_key_names_the_compute_capability():
    major, minor = torch.cuda.get_device_capability()
    assert machine_key("cuda")["arch"] == f"sm_{major}{minor}"


@pytest.fixture
def foreign_corpus(tmp_path):
    """One clean spec, and a baseline for it written for another CPU capability."""
    (tmp_path / "specs").mkdir()
    shutil.copy(CORPUS / "specs" / f"{CLEAN_SPEC}.json", tmp_path / "specs")
    other = "avx2" if machine_key("cpu")["arch"] != "avx2" else "avx512"
    from divfuzz.fuzzer.gate.machine import describe_machine

    baseline = {"schema_version": 3, **machine_key("cpu"), "arch": other, "config": {}, "known_buckets": [],
                "machine": describe_machine("cpu"),
                "specs": {CLEAN_SPEC: {"status": "ok", "error_type": None, "outputs": {}, "severity": None}}}
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    return tmp_path, path, other


def test_a_baseline_for_another_cpu_capability_is_refused(foreign_corpus):
    corpus, path, other = foreign_corpus
    before = path.read_bytes()
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(corpus), "--baseline", str(path)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"written for cpu {other}, torch {torch_minor()}" in text and f"this machine is cpu {machine_key('cpu')['arch']}" in text
    assert "--baseline-any" in text and "--update-baseline" in text
    assert path.read_bytes() == before


def test_baseline_any_compares_anyway_and_every_report_names_the_mismatch(foreign_corpus, tmp_path):
    corpus, path, other = foreign_corpus
    out = tmp_path / "reports"
    result = CliRunner().invoke(main, [
        "gate", "--device", "cpu", "--corpus", str(corpus), "--baseline", str(path), "--baseline-any", "--backend", "eager",
        "--json", str(out / "g.json"), "--junit", str(out / "g.xml"), "--markdown", str(out / "g.md")])
    assert result.exit_code == 0, result.output
    mismatch = f"written for cpu {other}, torch {torch_minor()}"
    assert mismatch in " ".join(result.output.split())
    assert any(mismatch in n for n in json.loads((out / "g.json").read_text())["notes"])
    assert mismatch in (out / "g.md").read_text()
    suite = ET.parse(out / "g.xml").getroot()
    assert any(mismatch in p.get("value") for p in suite.iter("property"))
    assert mismatch in suite.find("system-out").text


def test_a_torch_version_only_baseline_is_refused_with_the_way_out(tmp_path):
    old = {"schema_version": 1, "device_type": "cpu", "torch": torch_minor(), "config": {}, "specs": {}}
    (tmp_path / "specs").mkdir()
    shutil.copy(CORPUS / "specs" / f"{CLEAN_SPEC}.json", tmp_path / "specs")
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(tmp_path), "--baseline", str(tmp_path / "old.json")])
    assert result.exit_code == 2 and "keyed by torch version only" in " ".join(result.output.split())


def test_a_missing_baseline_names_the_key_and_the_baselines_there_are(tmp_path):
    (tmp_path / "specs").mkdir()
    shutil.copy(CORPUS / "specs" / f"{CLEAN_SPEC}.json", tmp_path / "specs")
    (tmp_path / "baseline-cpu-1.0-neon.json").write_text("{}")
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(tmp_path)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2
    assert f"for cpu {machine_key('cpu')['arch']}, torch {torch_minor()}" in text and "baseline-cpu-1.0-neon.json" in text
