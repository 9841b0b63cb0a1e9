"""A low-precision rounding that decides a discrete answer (a comparison, an integer, NaN/Inf) is
never elidable noise: where a compiler skips it, the finding is a bug, on the campaign's path and
on `minimize --module` alike (`divfuzz.records.mechanism_table`, rows "rounding-decides",
"precision-elision", "explicit-cast-elided"). The same graphs without the rounding (float32
throughout) hold no finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity

MODULES = Path(__file__).parent / "modules"


def _threshold(dtype: str) -> GraphSpec:
    """x (cast to `dtype` unless float32) + 1e-3, then where(v > 0.5, v, y): on values next to
    bfloat16 midpoints the add's rounding decides the comparison."""
    shape = (64, 64)
    cast = dtype != "float32"
    nodes = [Node("v1", "cast", ("x0",), (("to", dtype),), dtype, shape)] if cast else []
    nodes += [Node("v2", "add_eps", ("v1" if cast else "x0",), (("eps", 1e-3),), dtype, shape)]
    nodes += [Node("v4", "cast", ("x1",), (("to", dtype),), dtype, shape)] if cast else []
    nodes += [Node("v3", "where_cmp", ("v2", "v4" if cast else "x1"), (("cmp", "gt"), ("against", "scalar"), ("threshold", 0.5)),
                   dtype, shape)]
    spec = GraphSpec(inputs=(TensorSpec("x0", shape, "float32"), TensorSpec("x1", shape, "float32")), nodes=tuple(nodes),
                     outputs=("v3",), recipe=InputRecipe("near_bf16_midpoint", 1), backward=False)
    validate_spec(spec)
    return spec


def test_a_comparison_the_bf16_rounding_decides_is_a_bug_explained_by_that_rounding():
    verdict = execute_case(_threshold("bfloat16"), "cpu", CompileConfig())
    reason = severity_of(verdict)
    assert reason is not None and reason.severity is Severity.BUG, (reason, verdict)
    assert verdict.explanation is not None and verdict.explanation.mechanism == "rounding-decides", verdict
    assert verdict.explanation.device_type == "cpu"


def test_the_same_comparison_in_float32_holds_no_finding():
    verdict = execute_case(_threshold("float32"), "cpu", CompileConfig())
    assert severity_of(verdict) is None, verdict


def _headline(tmp_path, module: str) -> tuple[str, list[dict]]:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{MODULES / module}:make_case", "--device", "cpu",
                                       "--budget", "120s", "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output, [json.loads(p.read_text()) for p in sorted(out.glob("*/culprit.json"))]


def test_a_users_threshold_on_a_bf16_product_is_a_bug_with_a_repro_on_the_module_path(tmp_path):
    output, causes = _headline(tmp_path, "bf16_threshold_where.py")
    assert "headline: bug" in output.splitlines()[-1], output
    bugs = [c for c in causes if c["severity"]["severity"] == "bug" and c["reproduced"]]
    assert bugs and (Path(bugs[0]["folder"]) / "issue.py").is_file(), causes


@pytest.mark.slow
def test_an_underflow_before_a_pole_is_a_bug_on_the_module_path(tmp_path):
    output, causes = _headline(tmp_path, "fp16_underflow_pole.py")
    assert "headline: bug" in output.splitlines()[-1], output
    assert any(c["severity"]["rule"] == "nan-inf-wrong" for c in causes), causes
