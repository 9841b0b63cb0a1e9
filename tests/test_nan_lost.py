"""A NaN the graph's definition gives on finite inputs, which compiled turns into a number, is a bug
(`nan-inf-lost`: issue 197108's var_mean of an empty tensor, issue 143978's angle of rsqrt's NaN);
with a NaN or an infinity among the inputs, or with the inputs unmeasured, it stays the split
record's `nan-inf-wrong`, suspect."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.oracles.compare import compare_float
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.severity import Severity

NAN = float("nan")


def _reason(eager, compiled, reference, inputs):
    outputs = judge_outputs([("y", torch.tensor(eager))], [("y", torch.tensor(compiled))],
                            [("y", torch.tensor(reference, dtype=torch.float64))], inputs=inputs)
    return severity_of(verdict_of(outputs))


def test_a_lost_nan_is_counted_only_where_eager_and_fp64_agree_on_it():
    fc = compare_float(torch.tensor([NAN, NAN, NAN, 1.0]), torch.tensor([0.0, NAN, float("inf"), 1.0]),
                       torch.tensor([NAN, NAN, NAN, 1.0], dtype=torch.float64))
    assert fc.n_nan_lost == 1  # the 0.0; a NaN kept is no loss, an infinity is no number
    fc = compare_float(torch.tensor([NAN]), torch.tensor([0.0]), torch.tensor([2.0], dtype=torch.float64))
    assert fc.n_nan_lost == 0  # eager's NaN is not fp64's: eager is off, not compiled


def test_a_nan_lost_on_finite_inputs_is_a_bug_and_on_nonfinite_or_unmeasured_inputs_a_suspect():
    finite = [torch.tensor([1.0, 2.0]), torch.empty(0)]
    reason = _reason([NAN, 1.0], [0.0, 1.0], [NAN, 1.0], finite)
    assert (reason.severity, reason.rule) == (Severity.BUG, "nan-inf-lost"), reason
    for inputs in ([torch.tensor([1.0, float("inf")])], [torch.tensor([NAN])], None):
        reason = _reason([NAN, 1.0], [0.0, 1.0], [NAN, 1.0], inputs)
        assert (reason.severity, reason.rule) == (Severity.SUSPECT, "nan-inf-wrong"), (inputs, reason)
    # an infinity of eager's turned into a number is the split record's, whatever the inputs
    reason = _reason([float("-inf")], [3.0], [float("-inf")], finite)
    assert (reason.severity, reason.rule) == (Severity.SUSPECT, "nan-inf-wrong"), reason


def test_var_mean_of_an_empty_tensor_under_the_real_inductor_is_the_lost_nan_bug_on_the_module_path(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", "corpus/public-modules/i197108_var_mean_empty.py:make_case",
                                       "--device", "cpu", "--budget", "90s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    if lines[-1] != "headline: bug":  # a torch whose Welford lowering keeps the NaN (PR 197165 in it)
        assert "nan-inf-lost" not in result.output, result.output
        return
    causes = [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]
    assert any(c["severity"]["rule"] == "nan-inf-lost" and c["reproduced"] for c in causes), causes


def test_a_nan_lost_at_the_edge_of_the_range_stays_suspect():
    # a cast to a narrower float of values past its largest finite one is inf, then inf - inf NaN,
    # where a kernel that skipped the cast stays finite (issue 183607's class, open)
    reason = _reason([NAN, 1.0], [0.0, 1.0], [NAN, 1.0], [torch.tensor([3.0e38, 1.0])])
    assert (reason.severity, reason.rule) == (Severity.SUSPECT, "nan-inf-wrong"), reason


def test_a_precision_switch_that_restores_eagers_overflow_makes_the_moved_nan_by_design_not_a_bug():
    """Eager's float16 square overflowed where fp64 and compiled stay finite (`nan-inf-moved`): the
    switch restores a value further from fp64 (issue 143182, PR 131595), never a bug by it."""
    outputs = judge_outputs([("y", torch.tensor([float("inf"), 1.0]))], [("y", torch.tensor([1.0e30, 1.0]))],
                            [("y", torch.tensor([1.0e30, 1.0], dtype=torch.float64))], inputs=[torch.tensor([1.0])])
    verdict = verdict_of(outputs)
    assert severity_of(verdict).rule == "nan-inf-moved"
    switched = severity_of(verdict, switch="emulate_precision_casts")
    assert switched.severity is Severity.BY_DESIGN, switched


def test_a_nan_that_hangs_on_a_rounding_is_ill_conditioned_not_lost():
    """sqrt(E[x^2] - E[x]^2) of near-constant rows: a variance a hair below zero in eager and fp64 is
    NaN, compiled's order gives a hair above; fp64 on inputs moved by one ULP is finite there (issue
    188430's class, closed won't fix): suspect, never `nan-inf-lost`."""
    x = torch.tensor([[0.1, 0.1, 0.1]])
    eager, reference, compiled = torch.tensor([NAN]), torch.tensor([NAN], dtype=torch.float64), torch.tensor([0.0])
    outputs = judge_outputs([("y", eager)], [("y", compiled)], [("y", reference)], inputs=[x],
                            perturbed_reference=lambda draw: [("y", torch.tensor([1e-9 * (draw + 1)], dtype=torch.float64))])
    reason = severity_of(verdict_of(outputs))
    assert (reason.severity, reason.rule) == (Severity.SUSPECT, "nan-inf-ill-conditioned"), reason
    steady = judge_outputs([("y", eager)], [("y", compiled)], [("y", reference)], inputs=[x],
                           perturbed_reference=lambda draw: [("y", torch.tensor([NAN], dtype=torch.float64))])
    assert severity_of(verdict_of(steady)).rule == "nan-inf-lost"  # the NaN stays under every move: the definition's
