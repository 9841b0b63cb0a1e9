"""The gate's policy as a pure function (no compile): by severity, a bound that moves at the same
severity passes and a more severe verdict or a new kind of failure fails, each problem led by
the rule that failed it; a baseline entry without a severity is refused, never judged by bounds."""

from __future__ import annotations

import copy
import json

import pytest
import torch._inductor.config as inductor_config

from divfuzz.fuzzer.gate.baseline import load_baseline
from divfuzz.fuzzer.gate.machine import describe_machine
from divfuzz.fuzzer.gate.policy import compare_with_baseline, gate_compile_config, moved_bounds, problem_rule
from divfuzz.records.config import INDUCTOR_SWITCHES, CompileConfig
from divfuzz.records.errors import BaselineError

# The H100's pointwise-reduction-float32-bwd: grad:x at max 16 fp32 ULP in the baseline ...
BASE = {"status": "diverged", "error_type": None,
        "severity": {"severity": "suspect", "rule": "closer-many-ulps", "output": "grad:x"},
        "outputs": {"grad:x": {"kind": "float", "dtype": "float32", "numel": 768, "n_diff": 23, "diff_fraction": 23 / 768,
                               "max_ulp": 16, "nan_inf_mismatch": 0, "triage": "compiled-closer"}}}


def observed(max_ulp=120, n_diff=40, severity=("suspect", "closer-many-ulps"), nan_inf=0):
    o = copy.deepcopy(BASE)
    o["outputs"]["grad:x"].update(max_ulp=max_ulp, n_diff=n_diff, diff_fraction=n_diff / 768, nan_inf_mismatch=nan_inf)
    o["severity"] = None if severity is None else {"severity": severity[0], "rule": severity[1], "output": "grad:x"}
    return o


def test_a_bound_that_moves_at_the_same_severity_passes():
    # ... and 120 under load: still compiled-closer rounding, still suspect.
    problems, _ = compare_with_baseline(observed(), BASE)
    assert problems == []
    assert moved_bounds(observed(), BASE) == ["grad:x: max ULP 16 -> 120 at the same severity",
                                              f"grad:x: differing fraction {23 / 768:.6g} -> {40 / 768:.6g} at the same severity"]


def test_moved_bounds_lists_what_grew_past_the_margin_and_never_fails():
    # 16 -> 17 ULP is within 10%; 23 -> 40 differing elements is not. Either way: no problem.
    assert moved_bounds(observed(max_ulp=17), BASE, margin=0.1) == [
        f"grad:x: differing fraction {23 / 768:.6g} -> {40 / 768:.6g} at the same severity"]
    assert moved_bounds(observed(max_ulp=17, n_diff=23), BASE, margin=0.0) == ["grad:x: max ULP 16 -> 17 at the same severity"]
    assert moved_bounds(observed(max_ulp=10**6, n_diff=768), BASE, margin=0.0) and \
        compare_with_baseline(observed(max_ulp=10**6, n_diff=768), BASE)[0] == []
    # At another severity the severity rules speak (a failure or an improvement), not moved_bounds.
    assert moved_bounds(observed(severity=("bug", "float-gross-worse")), BASE) == []
    clean = {"status": "ok", "error_type": None, "outputs": {}, "severity": None}
    assert moved_bounds(observed(severity=("noise", "few-ulps")), clean) == []


def test_a_more_severe_verdict_fails_naming_both_severities():
    problems, _ = compare_with_baseline(observed(severity=("bug", "float-gross-worse")), BASE,
                                        detail="40/768 float32 elements are grossly further from fp64")
    assert problems == ["severity-worse: the verdict is now bug (float-gross-worse on grad:x), the baseline's is "
                        "suspect (closer-many-ulps on grad:x): 40/768 float32 elements are grossly further from fp64"]


def test_a_new_kind_of_bug_fails_at_the_same_severity():
    base = copy.deepcopy(BASE)
    base["severity"] = {"severity": "bug", "rule": "float-gross-worse", "output": "grad:x"}
    problems, _ = compare_with_baseline(observed(severity=("bug", "nan-inf-new")), base)
    assert [problem_rule(p) for p in problems] == ["new-bug-kind"]
    assert not compare_with_baseline(observed(severity=("bug", "float-gross-worse")), base)[0]


def test_nan_inf_placement_fails_whatever_the_severity():
    problems, _ = compare_with_baseline(observed(nan_inf=2), BASE)
    assert [problem_rule(p) for p in problems] == ["nan-inf-placement"]


def test_a_clean_spec_that_now_differs_fails_even_as_noise():
    clean = {"status": "ok", "error_type": None, "outputs": {}, "severity": None}
    problems, _ = compare_with_baseline(observed(max_ulp=1, n_diff=1, severity=("noise", "few-ulps")), clean)
    assert sorted(problem_rule(p) for p in problems) == ["now-differs", "severity-worse"]
    assert any("the verdict is now noise (few-ulps on grad:x), the baseline's is clean" in p for p in problems)
    # A spec missing from the baseline is expected clean, by the same rules.
    assert compare_with_baseline(observed(max_ulp=1, n_diff=1, severity=("noise", "few-ulps")), None)[0] == problems


def test_a_lower_severity_is_an_improvement_and_errors_stay_failures():
    problems, improvements = compare_with_baseline(observed(max_ulp=2, severity=("noise", "compiled-closer")), BASE)
    assert problems == [] and "severity suspect (closer-many-ulps on grad:x) -> noise (compiled-closer on grad:x)" in improvements
    crash = {"status": "crash", "error_type": "SIGSEGV", "outputs": {}, "severity": {"severity": "bug", "rule": "crash", "output": "-"}}
    assert [problem_rule(p) for p in compare_with_baseline(crash, BASE)[0]] == ["new-error"]


@pytest.mark.parametrize("bad", [{"severity": "fatal", "rule": "x", "output": "y"}, "bug", {"severity": "bug"}])
def test_a_baseline_with_a_bad_severity_is_refused_naming_the_field(tmp_path, bad):
    entry = dict(copy.deepcopy(BASE), severity=bad)
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"schema_version": 3, "device_type": "cpu", "torch": "2.13", "arch": "avx2",
                                "config": {}, "machine": describe_machine("cpu"), "specs": {"s": entry}}))
    with pytest.raises(BaselineError, match=r"specs\.s\.severity"):
        load_baseline(path)


def test_update_baseline_refuses_to_record_a_crash_naming_the_spec(tmp_path):
    """The planted `kill_worker` backend kills the worker as it compiles: a crash is never an
    expected state, so --update-baseline exits 2 naming the spec and its status, and the
    baseline already there stays byte-identical."""
    from pathlib import Path
    import shutil

    from click.testing import CliRunner

    from divfuzz.fuzzer.cli.main import main
    from divfuzz.fuzzer.gate.baseline import default_baseline_path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "specs").mkdir()
    shutil.copy(root / "corpus" / "specs" / "seed-gelu-tanh-bf16.json", tmp_path / "specs")
    baseline = default_baseline_path(tmp_path, "cpu")
    baseline.write_text('{"kept": "byte for byte"}\n')
    before = baseline.read_bytes()
    result = CliRunner().invoke(main, ["gate", "--device", "cpu", "--corpus", str(tmp_path), "--update-baseline",
                                       "--backend", "divfuzz.fuzzer.engine.planted:kill_worker"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "not written" in text and "seed-gelu-tanh-bf16: crash" in text
    assert baseline.read_bytes() == before


def test_the_gates_fuzz_judges_findings_by_severity_and_names_their_upstream_status(tmp_path):
    """`gate --fuzz`: a planted compile error is a bug and fails the gate, with its root cause and
    "new" upstream; the same campaign under a backend that changes nothing finds nothing."""
    from pathlib import Path

    from divfuzz.fuzzer.gate.gate_fuzz import gate_fuzz
    from divfuzz.fuzzer.gate.replay import GateOptions, fuzz_options
    from divfuzz.records.config import CompileConfig

    broken = gate_fuzz(**fuzz_options(GateOptions(device="cpu", corpus_dir=Path("corpus"), fuzz_cases=2, seed=1,
                                  config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:compile_error"))),
                      known=(), corpus_buckets=set())
    assert broken["failing"] and all(f["severity"] == "bug" and f["upstream"] == "new" for f in broken["findings"])
    assert broken["root_causes"] and broken["root_causes"][0]["known"] == "new"
    # Each finding names its bucket for reading ("bucket") and for matching ("identity", the key's fields).
    from divfuzz.records.buckets import BucketKey

    assert all(str(BucketKey.from_identity(f["identity"])) == f["bucket"] for f in broken["findings"])
    # A baseline that knows those identities (`gate --update-baseline` keeps them) fails on none of them.
    known = gate_fuzz(**fuzz_options(GateOptions(device="cpu", corpus_dir=Path("corpus"), fuzz_cases=2, seed=1,
                                 config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:compile_error"))),
                      known=tuple(f["identity"] for f in broken["findings"]), corpus_buckets=set())
    assert known["findings"] and known["failing"] == [] and all(f["known"] for f in known["findings"])
    clean = gate_fuzz(**fuzz_options(GateOptions(device="cpu", corpus_dir=Path("corpus"), fuzz_cases=2, seed=1,
                                 config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:eager_in_disguise"))),
                     known=(), corpus_buckets=set())
    assert clean["failing"] == [] and clean["findings"] == []


def test_the_cuda_gate_compiles_in_inductors_deterministic_mode():
    # Inductor picks a reduction's kernel config on CUDA by timing it; the gate must not depend on
    # the host's load, so its CUDA replays skip those benchmarks (and only there).
    assert dict(gate_compile_config(CompileConfig(), "cuda").inductor) == {"deterministic": True}
    assert gate_compile_config(CompileConfig(), "cpu") == CompileConfig()
    chosen = CompileConfig().with_inductor(deterministic=False, emulate_precision_casts=True)
    assert gate_compile_config(chosen, "cuda") == chosen  # the user's own choice stands
    assert "deterministic" in INDUCTOR_SWITCHES
    assert isinstance(inductor_config.deterministic, bool)
