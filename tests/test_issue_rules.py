"""Every rule that can make a bug gets an issue.py whose check fails while the bug is there and
passes once it is gone (issue 39, items 1 and 3).

`many-ulps-worse` and `rmse-worse` are bugs only when attribution names a decomposition at fault
(`severity_policy.DECOMPOSITION_DEFECT_RULES`). Planted backends make them on the CPU: `ulp_bump`
(one bf16 ULP on one element of 32: same() accepts it, the summed error over the differing
elements does not) and `drift` (every element 2^-5 further: same() rejects it). The bucket folder
is written as a campaign writes it, its culprit a decomposition; its issue.py must exit 1 and its
repro.py must say the same rule; the same issue.py on the planted backend without its defect
(`eager_in_disguise`) must exit 0.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.oracles.mechanisms import MECHANISMS
from divfuzz.oracles.severity_policy import PRECISION_KNOBS, RULE_SEVERITY, severity_of, switch_severity
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.culprit import BisectResult, Culprit
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.known_bugs import KnownBugs
from divfuzz.reports import issue_folder
from divfuzz.reports.bucket_folder import write_bucket_folder
from divfuzz.reports.issue_folder import known_lines
from divfuzz.reports.issue_script import CHECKS, ERROR_RULES, check_lines
from seed_specs import unary_bf16

PLANTED = "divfuzz.fuzzer.engine.planted:"
# Bug rules whose bucket's issue.py is not a numeric check: a type change asserts the dtype or
# shape; a perf finding's repro.py is itself plain torch and times eager against compiled.
NOT_CHECKS = {"output-type-mismatch": "dtype or shape assert", "slower-beyond-noise": "perf repro.py (timing)"}


def _bug_rules() -> set[str]:
    """Every rule some culprit (a switch, a subsystem, a mechanism) can make a bug."""
    out = set()
    for rule in RULE_SEVERITY:
        for switch in (None, *PRECISION_KNOBS):
            for subsystem in ("", "decomposition", "lowerings"):
                for mechanism in ("", *MECHANISMS):
                    if switch_severity(rule, switch, mechanism, subsystem) is Severity.BUG:
                        out.add(rule)
    return out


def test_every_rule_that_can_be_a_bug_has_an_issue_py_check():
    bugs = _bug_rules()
    assert {"many-ulps-worse", "rmse-worse", "float-gross-worse", "compile-error"} <= bugs  # the walk sees them
    missing = sorted(r for r in bugs if r not in CHECKS and r not in ERROR_RULES and r not in NOT_CHECKS)
    assert not missing, missing
    for rule in CHECKS:  # each check is code, for every float dtype a rule can name
        for dtype in ("bfloat16", "float16", "float32"):
            if rule != "rmse-worse":
                assert check_lines(rule, dtype)[-1].startswith("assert not ")


@pytest.fixture(scope="module")
def worker():
    w = Worker("cpu")
    yield w
    w.stop()


_DECOMPOSITION = BisectResult(backend="aot_eager_decomp_partition", subsystem="decomposition", bisect_number=0,
                              debug_info="<OpOverload(op='aten.gelu', overload='default')>")


@pytest.mark.parametrize("backend, op, rule", [("eight_ulps_up", "tanh", "many-ulps-worse"), ("drift", "gelu", "rmse-worse")])
def test_a_decomposition_s_compiled_worse_bug_gets_an_issue_py_that_fails_until_the_defect_goes(tmp_path, worker, backend, op, rule):
    spec = unary_bf16(op, rows=32, dim=32)  # 8 ULPs on one of 1,024 elements: more than a few, and same() accepts it
    config = CompileConfig(backend=PLANTED + backend)
    verdict = worker.run(CaseRequest(spec, "cpu", config), 120)
    culprit = Culprit(stage="inductor", summary="").with_bisect(_DECOMPOSITION)
    reason = severity_of(verdict, subsystem="decomposition")
    assert reason is not None and reason.severity is Severity.BUG and reason.rule == rule, reason
    assert severity_of(verdict).severity is Severity.SUSPECT  # without the decomposition at fault
    ckey = culprit.key()
    assert ckey == CulpritKey(stage="aot_eager_decomp_partition", subsystem="decomposition", detail="aten.gelu")
    key = BucketKey(kind="bf16-ulp", detail="-", dtype="bfloat16", device_type="cpu", ops=(op,), rule=rule, culprit=ckey)
    folder = write_bucket_folder(tmp_path / "buckets", bucket_id=1, key=key, spec=spec, device="cpu", config=config,
                                 verdict=verdict, culprit=culprit.to_dict(), severity=reason.to_dict())
    text = (folder / "issue.py").read_text()
    assert "divfuzz" not in text.replace(f"importlib.import_module('divfuzz.fuzzer.engine.planted'), {backend!r})", "")
    assert len(text.splitlines()) <= 30, text
    issue = subprocess.run([sys.executable, "issue.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert issue.returncode == 1 and "AssertionError" in issue.stderr, (text, issue.stdout, issue.stderr)
    assert "elements further from fp64 in compiled [" in issue.stdout and "fp64 [" in issue.stdout, issue.stdout
    repro = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert f"bug ({rule}, output v1)" in repro.stdout.strip().splitlines()[-1], repro.stdout
    md = (folder / "issue.md").read_text()
    assert text.strip() in md and "torch.compile is less accurate than eager" in md, md
    # The same script with the planted defect gone passes.
    absent = text.replace(f"{backend!r})", "'eager_in_disguise')")
    assert absent != text
    (folder / "issue.py").write_text(absent)
    fixed = subprocess.run([sys.executable, "issue.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_issue_md_s_upstream_lines_say_when_each_entry_s_state_was_checked(monkeypatch):
    def lines(op: str, dtype: str, out: str, rule: str, backward: bool) -> list[str]:
        spec = GraphSpec(inputs=(TensorSpec("x0", (8,), dtype, requires_grad=backward),),
                         nodes=(Node("v1", op, ("x0",) * (2 if op.endswith("_tensor") else 1),
                                     (("to", out),) if op == "cast" else (), out, (8,)),),
                         outputs=("v1",), backward=backward)
        return known_lines(spec, SeverityReason(Severity.BUG, rule, "v1", "-"), device="cuda", culprit=None)

    checked = lines("cast", "float32", "bfloat16", "many-ulps-worse", False)
    assert any(line.startswith("pytorch#179561 (fixed in PR 180575 after torch 2.11, state checked 2026-12-02;")
               for line in checked), checked
    checked = lines("div", "float32", "float32", "int-valued-wrong", False)
    assert any(line.startswith("pytorch#197895 (open, live in 2.14.0, state checked 2026-12-02;") for line in checked), checked
    # An entry whose state was never checked says so (every shipped entry is checked: forget the dates).
    known = issue_folder.default_known_bugs()
    forgotten = KnownBugs(tuple(dataclasses.replace(bug, checked=None) for bug in known.entries))
    monkeypatch.setattr(issue_folder, "default_known_bugs", lambda: forgotten)
    unchecked = lines("div", "float32", "float32", "int-valued-wrong", False)
    assert any(line.startswith("pytorch#197895 (open, live in 2.14.0, state not checked against the issue;")
               for line in unchecked), unchecked


@pytest.mark.parametrize("rule", ["output-type-mismatch", "compile-error", "float-gross-worse", "int-valued-wrong"])
def test_issue_md_s_failing_condition_reads_as_the_failure_not_as_the_pass(rule):
    """issue.md says "the script below fails while <this>" and issue.py "Exits 1 while <this>":
    <this> is what the assert catches (a dtype that changed, a compile that fails), never what
    must hold for the script to pass."""
    from divfuzz.reports.issue_script import check_words
    words = check_words(rule, "float32")
    assert "another" in words or "fails" in words or "further" in words or "differs" in words, words
    assert "raises no error" not in words and "the dtype and shape eager returns" not in words
