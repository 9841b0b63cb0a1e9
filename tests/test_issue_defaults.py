"""issue.py compiles under torch's defaults and keeps a setting only where a fresh-process run shows
the finding needs it (issue 52 item 2, issue 57 item 3); issue.md carries the ablation the PyTorch
template asks for (issue 52 item 3) and no RMSE for a NaN/Inf finding (issue 57 item 4).

The decision (`check_pins`) and the words are tested with a fake runner and recorded culprits; two
planted backends make it real on the CPU: `nan_first` (a NaN whatever the thread count: issue.py
keeps nothing) and `one_thread_nan` (a NaN only on one CPU thread: issue.py keeps
`torch.set_num_threads(1)` with its reason, and issue.md says it reproduces only with it).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.buckets import BucketKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict
from divfuzz.reports import html
from divfuzz.reports.bucket_folder import write_bucket_folder
from divfuzz.reports.issue_folder import issue_files
from divfuzz.reports.issue_check import DefaultsCheck, ScriptOutcome, ScriptRun, check_pins, outcome_of
from divfuzz.reports.issue_markdown import ablation_lines, fp64_verdict, render_issue_markdown
from divfuzz.reports.issue_script import PIN_NOTES, IssueScript, candidate_pins

PLANTED = "divfuzz.fuzzer.engine.planted:"


def _run(outcome: ScriptOutcome, rc: int | None = None) -> ScriptRun:
    rc = {ScriptOutcome.FAILS: 1, ScriptOutcome.PASSES: 0}.get(outcome, 2) if rc is None else rc
    return ScriptRun(outcome, rc, "printed", "AssertionError: 1/8 elements" if rc == 1 else "", 1.0)


def test_check_pins_keeps_only_the_pins_the_finding_needs():
    tried = []

    def needs_b(pins):
        tried.append(pins)
        return _run(ScriptOutcome.FAILS if "B" in pins else ScriptOutcome.PASSES)

    checked = check_pins(("A", "B"), needs_b)
    assert checked.kept == ("B",) and checked.note == "needed" and checked.needs_pins
    assert tried == [(), ("A", "B"), ("B",)]  # defaults, all, without A (fails: A dropped); none left to try but B, which the defaults run tried
    # Under the defaults it fails: nothing is kept, one run.
    tried.clear()
    assert check_pins(("A", "B"), lambda pins: tried.append(pins) or _run(ScriptOutcome.FAILS)).kept == ()
    assert tried == [()]
    # It fails nowhere: every pin is kept, as the case ran, and said so.
    nowhere = check_pins(("A",), lambda pins: _run(ScriptOutcome.PASSES))
    assert nowhere.kept == ("A",) and nowhere.note == "as-run" and not nowhere.needs_pins


def test_a_script_s_outcome_reads_its_exit_and_its_assert():
    assert outcome_of(1, "Traceback...\nAssertionError: 3/8 elements: NaN/Inf", "nan-inf-new") is ScriptOutcome.FAILS
    assert outcome_of(1, "Traceback...\nImportError: no module", "nan-inf-new") is ScriptOutcome.ERRORS
    assert outcome_of(1, "Traceback...\nRuntimeError: compile failed", "compile-error") is ScriptOutcome.FAILS
    assert outcome_of(0, "", "compile-error") is ScriptOutcome.PASSES
    assert outcome_of(None, "", "nan-inf-new") is ScriptOutcome.ERRORS


def test_candidate_pins_are_the_non_default_settings_and_the_cpu_thread_count():
    config = CompileConfig(inductor=(("emulate_precision_casts", True),))
    assert candidate_pins(config, "cpu", 1) == ("torch._inductor.config.emulate_precision_casts = True", "torch.set_num_threads(1)")
    assert candidate_pins(CompileConfig(), "cpu", None) == ()
    # On CUDA divfuzz's own compared-compile setting is a candidate, never the CPU thread count.
    assert candidate_pins(CompileConfig(), "cuda", 4) == ("torch._inductor.config.test_configs.force_filter_reduction_configs = True",)


_CULPRIT = {
    "stage": "inductor", "summary": "inductor (emulate_precision_casts removes it)", "fixes": ["emulate_precision_casts"],
    "ladder": [["aot_eager", "ok"], ["aot_eager_decomp_partition", "another bf16-ulp"], ["inductor", "bf16-ulp"]],
    "probes": [["emulate_precision_casts=True", "ok"], ["cpp.simdlen=0", "bf16-ulp"], ["evil|key=1", "ok"],
               ["pattern_matcher=False", "bf16-ulp`| injected"]],
}


def test_the_ablation_table_reads_the_recorded_ladder_and_probes():
    lines = ablation_lines(_CULPRIT)
    assert lines[:3] == ["| run | shows the finding? |", "| --- | --- |", "| eager | no: the reference every run is compared with |"]
    assert "| `aot_eager` | no |" in lines
    assert "| `aot_eager_decomp_partition` | no (another output differs: bf16-ulp) |" in lines
    assert "| the case's compile (`torch.compile` as above) | **yes** (bf16-ulp) |" in lines
    assert "| inductor with `torch._inductor.config.emulate_precision_casts = True` | no: this switch removes it |" in lines
    assert "| inductor with `torch._inductor.config.cpp.simdlen = 0` | **yes** (bf16-ulp) |" in lines
    # A key that is not a switch is left out; an outcome that is not a short label is not printed.
    assert not any("evil" in line or "injected" in line for line in lines), lines
    assert "| inductor with `torch._inductor.config.pattern_matcher = False` | (not readable) |" in lines
    # The climb stops at the first rung that shows the finding: the next is not run.
    stops = ablation_lines({"ladder": [["aot_eager", "bf16-ulp"], ["inductor", "bf16-ulp"]]})
    assert "| `aot_eager` | **yes** (bf16-ulp) |" in stops
    assert "| `aot_eager_decomp_partition` | not run: an earlier rung shows it |" in stops
    assert ablation_lines({"stage": "inductor"}) == [] and ablation_lines(None) == []


def _nan_verdict() -> tuple[Verdict, SeverityReason]:
    fc = FloatComparison(dtype="float32", numel=4096, n_diff=2048, max_ulp=0, ulp_histogram=(), nan_inf_mismatch=2048,
                         triage="same", n_worse=0, n_closer=0, rmse_eager=0.0, rmse_compiled=0.0, max_abs_diff=0.0,
                         n_nonfinite_new=2048)
    verdict = Verdict(status=Status.DIVERGED, outputs=(OutputVerdict(name="v1", float_cmp=fc),))
    return verdict, SeverityReason(Severity.BUG, "nan-inf-new", "v1", "2048 NaN/Inf in compiled where eager and fp64 are finite")


def test_a_nan_finding_s_issue_md_prints_no_rmse_and_counts_elements():
    verdict, reason = _nan_verdict()
    words = fp64_verdict(reason, verdict)
    assert "RMSE" not in words and "same()" not in words and "triage" not in words, words
    assert "at 2,048 elements of 4096" in words, words
    spec = GraphSpec(inputs=(TensorSpec("x0", (4096,), "float32"),), nodes=(Node("v1", "exp", ("x0",), (), "float32", (4096,)),),
                     outputs=("v1",))
    checked = DefaultsCheck(_run(ScriptOutcome.PASSES), ("torch.set_num_threads(1)",), "needed", _run(ScriptOutcome.FAILS))
    md = render_issue_markdown(spec, IssueScript("import torch\n", check="x"), device="cpu", reason=reason, verdict=verdict,
                               culprit=_CULPRIT, defaults=checked, rechecks=[("2.14.1", "passes", "exits 0")])
    assert "RMSE vs fp64 is" not in md
    assert "NaN/Inf placement differs at 2,048 elements" in md, md
    assert "**Reproduces only with** `torch.set_num_threads(1)`: " in md, md
    assert "| issue.py under torch's defaults, fresh process | no (exits 0) |" in md, md
    assert md.rstrip().endswith("- passes in torch 2.14.1 (exits 0)"), md
    # The HTML page's verdict table: no RMSE or triage for it either, and the count as a count.
    table = html._verdict_table(verdict.to_dict())
    assert "placed otherwise at 2,048 elements" in table and "0 / 0" not in table and ">same<" not in table, table


@pytest.fixture(scope="module")
def one_thread_worker():
    w = Worker("cpu", extra_env={"DIVFUZZ_WORKER_THREADS": "1"})
    yield w
    w.stop()


def _default_threads() -> int:
    code = "import torch, sys; sys.stdout.write(str(torch.get_num_threads()))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout)


@pytest.mark.parametrize("backend, needs_one_thread", [("nan_first", False), ("one_thread_nan", True)])
def test_issue_py_keeps_the_thread_count_only_where_the_finding_needs_it(tmp_path, one_thread_worker, backend, needs_one_thread):
    if needs_one_thread and _default_threads() < 2:
        pytest.skip("torch's default here is one thread: a one-thread bug reproduces without the pin")
    spec = GraphSpec(inputs=(TensorSpec("x0", (8, 8), "float32"),), nodes=(Node("v1", "tanh", ("x0",), (), "float32", (8, 8)),),
                     outputs=("v1",))
    config = CompileConfig(backend=PLANTED + backend)
    verdict = one_thread_worker.run(CaseRequest(spec, "cpu", config), 120)
    assert verdict.threads == 1
    reason = severity_of(verdict)
    assert reason.severity is Severity.BUG and reason.rule == "nan-inf-new", reason
    key = BucketKey(kind="nan-inf", detail="-", dtype="float32", device_type="cpu", ops=("tanh",), rule=reason.rule)
    culprit = {"stage": backend, "summary": f"backend {backend}",
               "ladder": [["aot_eager", "ok"], ["aot_eager_decomp_partition", "ok"], [config.describe(), "nan-inf"]]}
    folder = write_bucket_folder(tmp_path / "buckets", bucket_id=1, key=key, spec=spec, device="cpu", config=config,
                                 verdict=verdict, severity=reason.to_dict(), culprit=culprit)
    script, md = (folder / "issue.py").read_text(), (folder / "issue.md").read_text()
    pin = f"torch.set_num_threads(1)  # {PIN_NOTES['needed']}"
    assert (pin in script) is needs_one_thread, script
    assert ("set_num_threads" in script) is needs_one_thread, script
    if needs_one_thread:
        assert "**Reproduces only with** `torch.set_num_threads(1)`: " in md, md
        assert "| issue.py under torch's defaults, fresh process | no (exits 0) |" in md, md
    else:
        assert "**Torch's defaults.** The script sets nothing beyond torch's defaults" in md, md
        assert "| issue.py under torch's defaults, fresh process | **yes** (exits 1) |" in md, md
    assert "| `aot_eager` | no |" in md and "| the case's compile (`torch.compile` as above) | **yes** (nan-inf) |" in md, md
    # What the error log shows is what the written script printed, in a fresh process, without the temporary folder's name.
    assert "AssertionError" in md and "divfuzz-issue-" not in md, md
    # The written script fails where it is, as written (the pin kept where needed).
    run = subprocess.run([sys.executable, "issue.py"], cwd=folder, capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "DIVFUZZ_WORKER_THREADS")})
    assert run.returncode == 1 and "AssertionError" in run.stderr, run.stdout + run.stderr


@pytest.mark.parametrize("needs_it", [False, True])
def test_a_cuda_issue_py_drops_divfuzz_s_reduction_setting_unless_the_finding_needs_it(needs_it):
    """Issue 52 item 2, without a GPU: the check's runner is a fake that fails while the setting is there (or always)."""
    verdict, reason = _nan_verdict()
    spec = GraphSpec(inputs=(TensorSpec("x0", (4096,), "float32"),), nodes=(Node("v1", "exp", ("x0",), (), "float32", (4096,)),),
                     outputs=("v1",))
    line = "torch._inductor.config.test_configs.force_filter_reduction_configs = True"
    runs = []

    def fake(text, files, *, rule):
        runs.append(line in text)
        fails = line in text or not needs_it
        return _run(ScriptOutcome.FAILS if fails else ScriptOutcome.PASSES)

    files = issue_files(spec, device="cuda", config=CompileConfig(), verdict=verdict, reason=reason, culprit=_CULPRIT, check=fake)
    script, md = files["issue.py"].decode(), files["issue.md"].decode()
    assert (f"{line}  # {PIN_NOTES['needed']}" in script) is needs_it, script
    assert runs == ([False, True] if needs_it else [False])
    assert (f"**Reproduces only with** `{line}`" in md) is needs_it, md
    assert ("**Torch's defaults.**" in md) is not needs_it, md
    # Unchecked (no runner), the script keeps what the case ran under and says it was not checked.
    unchecked = issue_files(spec, device="cuda", config=CompileConfig(), verdict=verdict, reason=reason)["issue.py"].decode()
    assert f"{line}  # {PIN_NOTES['unchecked']}" in unchecked
