"""A user module's divergence that is the CUDA kernels' flush of float32 subnormals reads as the
campaign's experiment reads it (subnormal-flush, by-design on a float value: PR 185878, issue
125557), and a wrong value beside a flush stays a bug. The CPU tests hand the judge the flushed
values directly; the `gpu` test runs the public module of issue 125557 through the real Inductor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.fx
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.fuzzer.triage.user_module import _flushed, _verdict
from divfuzz.records.severity import Severity

MODULES_DIR = Path(__file__).resolve().parent.parent / "corpus" / "public-modules"


def _pow2(s):
    return (2.0 ** s,)


def _judged(b_of):
    gm = torch.fx.symbolic_trace(_pow2)
    x = torch.tensor([-126.0, -127.0, -149.0, -150.0])  # the report's values: normal/subnormal/zero edges
    a = list(gm(x))
    verdict = _verdict(gm, [x], a, b_of(a[0]))
    return verdict, judge(verdict).reason


def test_a_flushed_subnormal_result_is_explained_and_not_a_bug():
    verdict, reason = _judged(lambda out: [_flushed(out)])
    assert verdict.explanation is not None and verdict.explanation.mechanism == "subnormal-flush", verdict
    assert reason.severity is Severity.BY_DESIGN, reason


def test_a_normal_value_zeroed_beside_a_flush_stays_a_bug():
    def zero_the_smallest_normal_too(out):
        wrong = _flushed(out)
        wrong[0] = 0.0  # 2**-126 is normal: no flush makes it zero
        return [wrong]

    verdict, reason = _judged(zero_the_smallest_normal_too)
    assert verdict.explanation is None and reason.severity is Severity.BUG, (verdict.explanation, reason)


@pytest.mark.gpu
def test_the_public_module_of_issue_125557_reads_no_bug_on_cuda(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    module = MODULES_DIR / "i125557_ftz_pow2_subnormal.py"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{module}:make_case", "--device", "cuda", "--budget", "120s",
                                       "--repro-dir", str(tmp_path / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    headline = [line for line in result.output.splitlines() if line.startswith("headline:")][-1]
    assert "headline: bug" not in headline and "subnormal-flush" in result.output, result.output


def test_a_backend_or_switch_the_module_path_would_not_use_is_refused_not_dropped(tmp_path):
    module = MODULES_DIR / "i125557_ftz_pow2_subnormal.py"
    for extra in (["--backend", "aot_eager"], ["--inductor", "emulate_precision_casts=true"]):
        result = CliRunner().invoke(main, ["minimize", "--module", f"{module}:make_case", "--device", "cpu",
                                           "--repro-dir", str(tmp_path / "out"), *extra])
        assert result.exit_code == 2 and "--backend and --inductor apply to a spec" in result.output, result.output
