"""`divfuzz gate --oracle perf`: each corpus spec timed eager vs compiled; a spec fails when the
severity policy rates compiled slower than eager a bug. The planted `slow_forward` backend (its
forward runs the graph three times) fails and the reports name its ratio and interval; the real
Inductor on the same spec does not fail as a bug. Bad combinations exit 2 before any work."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SPEC = "seed-gelu-tanh-bf16"  # one forward graph on 1M bf16 elements: milliseconds per call


def gate(*args: str):
    return CliRunner().invoke(main, ["gate", "--device", "cpu", "--oracle", "perf", *args])


@pytest.fixture
def tiny_corpus(tmp_path):
    (tmp_path / "specs").mkdir()
    shutil.copy(ROOT / "corpus" / "specs" / f"{SPEC}.json", tmp_path / "specs")
    return tmp_path


@pytest.mark.parametrize("extra, named", [
    (["--workers", "3"], "--workers 3 with --oracle perf"),
    (["--update-baseline"], "--update-baseline with --oracle perf"),
    (["--fuzz-cases", "5"], "--fuzz/--fuzz-cases with --oracle perf"),
])
def test_the_perf_gate_refuses_what_would_spoil_its_timings_before_any_work(tiny_corpus, extra, named):
    before = sorted(p.name for p in tiny_corpus.rglob("*"))
    result = gate("--corpus", str(tiny_corpus), *extra)
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split())
    assert sorted(p.name for p in tiny_corpus.rglob("*")) == before  # no baseline written, nothing run


def test_perf_margin_without_the_perf_oracle_is_refused(tiny_corpus):
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(tiny_corpus), "--perf-margin", "0.3"])
    assert result.exit_code == 2 and "--perf-margin is for --oracle perf" in " ".join(result.output.split())


@pytest.mark.slow  # two timed replays of one spec: about a minute on 2 busy cores
def test_a_planted_slow_forward_fails_the_perf_gate_and_inductor_does_not(tiny_corpus, tmp_path):
    out = tmp_path / "out"
    slow = gate("--corpus", str(tiny_corpus), "--backend", "divfuzz.fuzzer.engine.planted:slow_forward",
                "--json", str(out / "slow.json"), "--junit", str(out / "slow.xml"), "--markdown", str(out / "slow.md"),
                "--repro-dir", str(out / "repros"))
    assert slow.exit_code == 1, slow.output
    spec = json.loads((out / "slow.json").read_text())["specs"][0]
    assert spec["judged_by"] == "perf" and spec["failed_rules"] == ["perf-slower"]
    fwd = next(p for p in spec["perf"] if p["phase"] == "fwd")
    assert fwd["ratio"] > 2.0 and fwd["ratio_low"] > 1.5, fwd  # three graph runs against one
    assert spec["severity"]["severity"] == "bug" and spec["severity"]["rule"] == "slower-beyond-noise"
    ratio = f"{fwd['ratio']:.2f}x [{fwd['ratio_low']:.2f}, {fwd['ratio_high']:.2f}]"
    assert ratio in spec["problems"][0] and ratio in " ".join(slow.output.split())
    failure = next(c.find("failure") for c in ET.parse(out / "slow.xml").getroot().iter("testcase"))
    assert ratio in failure.get("message") and f"ratio {fwd['ratio']:.3f}" in failure.get("message")
    assert ratio in (out / "slow.md").read_text()
    assert "compiled with the culprit knob flipped" in (out / "repros" / SPEC / "repro.py").read_text() or \
        "exits 1 while compiled is slower than eager" in (out / "repros" / SPEC / "repro.py").read_text()

    real = gate("--corpus", str(tiny_corpus), "--json", str(out / "inductor.json"))
    spec = json.loads((out / "inductor.json").read_text())["specs"][0]
    assert real.exit_code == 0, real.output
    assert spec["problems"] == [] and spec["perf"] and (spec["severity"] or {}).get("severity") != "bug"
