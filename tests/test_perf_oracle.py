"""The perf oracle (`--oracle perf`): its statistics, its rule, and real timings of planted slow
kernels through the worker and the campaign.

The statistics are checked on made-up samples (exact); the engine on real CPU timings of the
planted `slow_forward` / `slow_backward` backends, whose extra passes make them several times
slower than eager, against the same graph timed eager-against-eager (the A/A control)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.oracles.findings import finding_of, target_score
from divfuzz.oracles.perf import compare_timings, is_slower, median_interval, settled
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]


def norm_spec(tokens: int = 1024, hidden: int = 1024, backward: bool = True) -> GraphSpec:
    return GraphSpec(
        inputs=(TensorSpec("x0", (tokens, hidden), "bfloat16", backward, "data"),),
        nodes=(Node("v1", "layer_norm", ("x0",), (("affine", False), ("eps", 1e-5)), "bfloat16", (tokens, hidden)),),
        outputs=("v1",), recipe=InputRecipe("normal", 3), backward=backward,
    )


# ---- statistics (exact) --------------------------------------------------------------------------


def test_median_interval_is_the_sign_test_interval():
    xs = list(range(1, 21))  # n = 20: P(B <= 5) = 0.0207 <= 0.025 < P(B <= 6) = 0.0577, so k = 6
    assert median_interval(xs, 0.95) == (6, 15)
    # n = 5 cannot reach 95 % (P(B = 0) = 1/32 > 0.025): the whole range
    assert median_interval([5, 1, 4, 2, 3], 0.95) == (1, 5)
    # the interval always holds the median, and widens with the confidence
    for n in range(6, 60, 7):
        ys = [math.sin(i) for i in range(n)]
        lo95, hi95 = median_interval(ys, 0.95)
        lo99, hi99 = median_interval(ys, 0.99)
        med = sorted(ys)[n // 2]
        assert lo99 <= lo95 <= med <= hi95 <= hi99


def test_slower_needs_the_median_past_the_margin_and_the_interval_past_one():
    eager = [1.0 + 0.01 * (i % 5) for i in range(30)]
    slower = compare_timings("fwd", eager, [1.5 * e for e in eager], margin=0.1)
    assert slower.ratio == pytest.approx(1.5) and is_slower(slower) and settled(slower)
    same = compare_timings("fwd", eager, list(eager), margin=0.1)
    assert not is_slower(same) and settled(same)
    # within the margin: 5 % slower with a 10 % margin is noise
    assert not is_slower(compare_timings("fwd", eager, [1.05 * e for e in eager], margin=0.1))
    # the median past the margin but the interval reaching below 1: not a finding, not settled
    mixed = [e * (2.0 if i % 2 else 0.9) for i, e in enumerate(eager)]
    cmp = compare_timings("fwd", eager, mixed, margin=0.1)
    assert cmp.ratio_low < 1.0 and not is_slower(cmp)


def _verdict(fwd_ratio: float, bwd_ratio: float | None = None, *, eager_s: float = 1e-3, overhead_s: float = 0.0) -> Verdict:
    eager = [eager_s] * 20
    phases = [compare_timings("fwd", eager, [eager_s * fwd_ratio] * 20, margin=0.1, overhead_s=overhead_s, dtype="bfloat16")]
    if bwd_ratio is not None:
        phases.append(compare_timings("fwd+bwd", eager, [eager_s * bwd_ratio] * 20, margin=0.1, overhead_s=overhead_s, dtype="bfloat16"))
    slow = any(is_slower(p) for p in phases)
    return Verdict(Status.DIVERGED if slow else Status.OK, perf=tuple(phases))


def test_finding_kinds_follow_the_phase_and_the_forward_comes_first():
    assert finding_of(_verdict(1.0, 1.0)) is None
    assert finding_of(_verdict(1.5, 1.2)).kind.value == "slower-fwd"
    bwd = finding_of(_verdict(1.0, 1.5))
    assert bwd.kind.value == "slower-bwd" and bwd.dtype == "bfloat16" and bwd.output == "fwd+bwd"
    # the search climbs towards larger slowdowns
    assert target_score(_verdict(3.0), finding_of(_verdict(3.0))) > target_score(_verdict(1.3), finding_of(_verdict(1.3))) > 0


def test_severity_bug_suspect_and_the_wrappers_fixed_cost():
    assert severity_of(_verdict(1.5)).severity.value == "bug"
    # 1 ms eager, 0.3 ms slower, but the compiled wrapper alone costs 0.5 ms per call: by-design
    wrapper = severity_of(_verdict(1.3, eager_s=1e-3, overhead_s=5e-4))
    assert wrapper.severity.value == "by-design" and wrapper.rule == "wrapper-overhead"
    # slower, but the interval reaches into twice the noise margin: suspect
    eager = [1.0] * 10 + [1.0] * 10
    compiled = [1.15] * 6 + [1.2] * 8 + [1.3] * 6
    cmp = compare_timings("fwd", eager, compiled, margin=0.1)
    assert is_slower(cmp) and cmp.ratio_low <= 1.2
    # 7 % slower with the whole interval past a 5 % margin: real, but not yet material
    small = compare_timings("fwd", eager, [1.07] * 20, margin=0.05)
    assert severity_of(Verdict(Status.DIVERGED, perf=(small,))).severity.value == "suspect"
    assert severity_of(Verdict(Status.DIVERGED, perf=(cmp,))).severity.value == "suspect"
    # a culprit that removes it is named in the reason
    reason = severity_of(_verdict(1.5), switch="triton.mix_order_reduction")
    assert "triton.mix_order_reduction removes it" in reason.detail and reason.severity.value == "bug"


def test_perf_verdicts_round_trip_and_numeric_verdicts_keep_their_form():
    v = _verdict(1.5, 1.2)
    assert Verdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    assert "perf" not in Verdict(Status.OK).to_dict()


# ---- the engine, on real CPU timings ------------------------------------------------------------------


def _run_in_worker(spec: GraphSpec, backend: str, *, self_check: bool = False, margin: float = 0.25) -> Verdict:
    from divfuzz.fuzzer.engine.execute_perf import execute_perf_case

    return execute_perf_case(spec, "cpu", CompileConfig(backend=backend), margin=margin, self_check=self_check)


def test_planted_slow_kernels_are_found_in_the_right_phase_and_eager_against_eager_is_not():
    spec = norm_spec()
    fwd = _run_in_worker(spec, "divfuzz.fuzzer.engine.planted:slow_forward")
    assert finding_of(fwd).kind.value == "slower-fwd", [p.describe() for p in fwd.perf]
    assert severity_of(fwd).severity.value == "bug"
    assert {p.phase for p in fwd.perf} == {"fwd", "fwd+bwd"} and all(p.repeats >= 10 for p in fwd.perf)
    bwd = _run_in_worker(spec, "divfuzz.fuzzer.engine.planted:slow_backward")
    step = next(p for p in bwd.perf if p.phase == "fwd+bwd")
    assert is_slower(step), step.describe()
    # the A/A control: the same graph built twice and timed against itself is not slower
    control = _run_in_worker(spec, "inductor", self_check=True, margin=0.5)
    assert finding_of(control) is None, [p.describe() for p in control.perf]


def test_the_training_phase_runs_the_backward():
    """The fwd+bwd phase computes every trainable input's gradient (a phase that silently skipped
    the backward would time the forward twice)."""
    import torch

    from divfuzz.fuzzer.engine.execute_perf import phase_callables
    from divfuzz.generators.build import build_callable, make_inputs

    spec = norm_spec(64, 128)
    inputs = make_inputs(spec, "cpu")
    phases = phase_callables(spec, build_callable(spec, "cpu"), inputs)
    named, _ = phases["fwd+bwd"]()
    grads = dict(named)
    assert "grad:x0" in grads and grads["grad:x0"].abs().sum() > 0
    with torch.no_grad():
        assert phases["fwd"]()[0].shape == (64, 128)


def test_compile_errors_stay_compiler_findings_under_the_perf_oracle():
    v = _run_in_worker(norm_spec(256, 256, backward=False), "divfuzz.fuzzer.engine.planted:compile_error")
    assert v.status == Status.COMPILE_ERROR and finding_of(v).kind.value == "compile-error"


@pytest.mark.slow
def test_a_perf_campaign_buckets_the_planted_slowdown_and_its_repro_shows_it(tmp_path):
    from divfuzz.fuzzer.cli.main import main as cli

    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["fuzz", "--device", "cpu", "--oracle", "perf", "--backend", "divfuzz.fuzzer.engine.planted:slow_forward",
                                      "--max-cases", "1", "--workers", "1", "--no-minimize", "--no-live", "--out", str(out)])
    assert result.exit_code == 0, result.output
    folders = list((out / "buckets").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("0001-slower-fwd")
    verdict = json.loads((folders[0] / "verdict.json").read_text())
    assert verdict["perf"] and verdict["outputs"] == []
    repro = subprocess.run([sys.executable, str(folders[0] / "repro.py"), "cpu"], capture_output=True, text=True, timeout=600,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert "compiled is SLOWER than eager" in repro.stdout and "fwd+bwd:" in repro.stdout


def test_fuzz_oracle_perf_runs_through_the_cli_and_keeps_compiler_failures(tmp_path):
    """CI's sample of the perf campaign path: the CLI option, the worker, the store and the bucket."""
    from divfuzz.fuzzer.cli.main import main as cli

    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["fuzz", "--device", "cpu", "--oracle", "perf", "--backend", "divfuzz.fuzzer.engine.planted:compile_error",
                                      "--max-cases", "1", "--workers", "1", "--no-minimize", "--no-live", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "oracle perf" in result.output
    (folder,) = list((out / "buckets").iterdir())
    assert folder.name.startswith("0001-compile-error")
    bad = CliRunner().invoke(cli, ["fuzz", "--device", "cpu", "--oracle", "speed", "--max-cases", "1", "--out", str(tmp_path / "o2")])
    assert bad.exit_code == 2 and "speed" in bad.output


def test_perf_repro_refuses_a_knob_that_is_not_a_config_key():
    from divfuzz.reports.perf_repro import render_perf_repro

    spec = norm_spec(8, 8)
    text = render_perf_repro(spec, device="cpu", config=CompileConfig(), title="t", margin=0.1, knob=("triton.mix_order_reduction", False))
    assert "KNOB = ('triton.mix_order_reduction', False)" in text
    compile(text, "repro.py", "exec")
    with pytest.raises(ValueError):
        render_perf_repro(spec, device="cpu", config=CompileConfig(), title="t", margin=0.1, knob=("x; import os", 1))
    with pytest.raises(ValueError):
        render_perf_repro(spec, device="cpu", config=CompileConfig(), title="t", margin=0.1, knob=("split_reductions", object()))


def test_perf_strategy_draws_training_norm_blocks_within_the_spec_caps():
    from hypothesis import HealthCheck, given, settings

    from divfuzz.generators.strategies import PERF_NORMS, perf_graph_specs
    from divfuzz.generators.validate import validate_spec

    seen = []

    @settings(max_examples=30, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(perf_graph_specs(device_type="cuda"))
    def check(spec):
        validate_spec(spec)
        assert spec.backward and spec.nodes[0].op in PERF_NORMS
        tokens, hidden = spec.inputs[0].shape
        assert 512 <= hidden <= 8192 and tokens * hidden <= 1 << 23 and spec.inputs[0].dtype == "bfloat16"
        seen.append(hidden)

    check()
    assert len(set(seen)) > 2


def test_the_html_card_of_a_perf_bucket_shows_its_timings():
    from divfuzz.reports.html import _verdict_table

    v = _verdict(1.5, 1.2).to_dict()
    table = _verdict_table(v)
    assert 'class="verdict perf"' in table and "<td>fwd+bwd</td>" in table and "<td>1.500</td>" in table
    # a hostile stored phase is escaped, never markup
    v["perf"][0]["timer"] = "<script>x</script>"
    assert "<script>" not in _verdict_table(v)


def test_perf_attribution_climbs_aot_eager_only_and_names_the_planted_backend():
    """The ladder of a perf finding is aot_eager, then the case's own config (the decomposed graph
    run eagerly is slow by nature and says nothing); a backend that is not Inductor is the culprit."""
    from divfuzz.fuzzer.engine.worker import Worker
    from divfuzz.fuzzer.triage.attribute import attribute_case

    worker = Worker("cpu")
    try:
        culprit = attribute_case(norm_spec(), worker=worker, device="cpu", config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:slow_forward"),
                                 kind="slower-fwd", oracle="perf", perf_margin=0.25, timeout_s=300)
    finally:
        worker.stop()
    rungs = [r for r, _ in culprit.ladder]
    assert rungs == ["aot_eager", "divfuzz.fuzzer.engine.planted:slow_forward"], culprit.ladder
    assert culprit.ladder[1][1].startswith("slower-fwd ")  # a perf rung's label carries its ratio
    assert culprit.summary == "backend divfuzz.fuzzer.engine.planted:slow_forward"


@pytest.mark.slow
def test_minimize_module_oracle_perf_times_the_training_step_and_records_probes(tmp_path):
    """`minimize --module --oracle perf --train` on seed 001's block: both phases timed in the
    worker, perf.json and report.md written, every probe recorded (timed or out of budget)."""
    from divfuzz.fuzzer.cli.main import main as cli

    out = tmp_path / "m"
    result = CliRunner().invoke(cli, ["minimize", "--module", str(ROOT / "tests/modules/seed001_block.py") + ":block", "--oracle", "perf",
                                      "--train", "--device", "cpu", "--budget", "20s", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "perf.json").read_text())
    assert [p["phase"] for p in record["verdict"]["perf"]] == ["fwd", "fwd+bwd"]
    assert record["probes"] and all("phases" in p or "skipped" in p or "error" in p for p in record["probes"])
    assert "fwd+bwd:" in result.output and (out / "report.md").read_text().startswith("# torch.compile vs eager timing")
