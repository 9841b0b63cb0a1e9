"""scripts/bug_lines.py streams one line per bug bucket as it finishes, runs each script under its
own timeout (its process group killed with it), and says whether issue.py and repro.py fail the
same way (issue 39, item 2: on the H100 it printed nothing until the end and timed out on 58
buckets)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bug_lines.py"
_spec = importlib.util.spec_from_file_location("divfuzz_script_bug_lines", SCRIPT)
bug_lines = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bug_lines  # its dataclasses look their module up
_spec.loader.exec_module(bug_lines)
Run = bug_lines.Run

ASSERT_AT = ('Traceback (most recent call last):\n  File "/b/issue.py", line {n}, in <module>\n    assert not bad.any(), "x"\n'
             "           ^^^^^^^^^^^^^\nAssertionError: 3/32 elements: NaN/Inf\n")
RAISES = ('Traceback (most recent call last):\n  File "/b/issue.py", line 14, in <module>\n    torch.compile(model)(x0)\n'
          '  File "/t/torch/_dynamo/eval_frame.py", line 9, in _fn\n    return fn(*args)\n'
          "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nAssertionError: boom\n")


def test_how_each_script_failed_is_read_from_its_output():
    assert bug_lines.issue_failure(Run(1, 1.0, stderr=ASSERT_AT.format(n=23)), 23, "nan-inf-new") == "rule:nan-inf-new"
    # an AssertionError elsewhere than the script's last line is not its check
    assert bug_lines.issue_failure(Run(1, 1.0, stderr=ASSERT_AT.format(n=12)), 23, "nan-inf-new") == "raises:AssertionError"
    assert bug_lines.issue_failure(Run(1, 1.0, stderr=RAISES), 15, "compile-error") == "raises:BackendCompilerFailed"
    assert bug_lines.issue_failure(Run(0, 1.0), 15, "nan-inf-new") == "passes"
    assert bug_lines.issue_failure(Run(-11, 1.0), 15, "crash") == "crash"
    assert bug_lines.issue_failure(Run(1, 1.0, stderr="no result after 600 s\n"), 15, "hang") == "hang"
    repro = "torch 2.13\nDIVERGES: bug (nan-inf-new, output v1): 3/32 float32 elements are NaN\n"
    assert bug_lines.repro_failure(Run(1, 1.0, stdout=repro)) == "rule:nan-inf-new"
    error = "compile error: BackendCompilerFailed: backend='inductor' raised: boom\nDIVERGES: bug (compile-error, output -): failed\n"
    assert bug_lines.repro_failure(Run(1, 1.0, stdout=error)) == "raises:BackendCompilerFailed"
    assert bug_lines.repro_failure(Run(1, 1.0, stdout="torch 2.13\ncompiled run did not finish in 600 s\n")) == "hang"
    assert bug_lines.repro_failure(Run(None, 9.0, timed_out=True)) == "timeout"
    same = bug_lines.same_way
    assert same("rule:nan-inf-new", "rule:nan-inf-new", "nan-inf-new")
    assert not same("passes", "rule:nan-inf-new", "nan-inf-new")
    assert not same("rule:nan-inf-new", "rule:float-gross-worse", "nan-inf-new")  # repro judges another rule
    assert not same("raises:AssertionError", "rule:nan-inf-new", "nan-inf-new")  # issue.py broke before its check
    assert same("raises:BackendCompilerFailed", "raises:BackendCompilerFailed", "compile-error")
    assert not same("raises:TypeError", "raises:BackendCompilerFailed", "compile-error")
    assert same("crash", "crash", "crash") and not same("timeout", "hang", "hang")


def test_a_script_past_its_timeout_is_killed_with_its_children(tmp_path):
    script = tmp_path / "repro.py"
    pid_file = tmp_path / "child.pid"
    script.write_text("import subprocess, sys, time\n"
                      f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                      f"open({str(pid_file)!r}, 'w').write(str(p.pid))\ntime.sleep(60)\n")
    t0 = time.monotonic()
    run = bug_lines.run_script(script, 3)
    assert run.timed_out and run.code() == "timeout" and time.monotonic() - t0 < 30
    child = int(pid_file.read_text())
    time.sleep(0.5)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def _campaign(out: Path, backend: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--out", str(out), "--no-live",
                           "--workers", "1", "--max-cases", "3", "--seed", "5", "--backend",
                           f"divfuzz.fuzzer.engine.planted:{backend}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.timeout(900)
def test_every_bug_bucket_gets_a_line_as_it_finishes_and_a_broken_issue_py_reads_no(tmp_path):
    out = tmp_path / "nan"
    _campaign(out, "nan_first")
    table = tmp_path / "lines.json"
    cmd = [sys.executable, str(SCRIPT), str(out), "--jobs", "2", "--timeout", "300", "--json", str(table)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()  # printed before any script has run
    assert first.startswith("1 bug buckets in ") and proc.poll() is None, first
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    (row,) = [line for line in rest.splitlines() if line.startswith("| 1 |")]
    assert row.endswith("| yes: rule:nan-inf-new / rule:nan-inf-new |"), row
    (line,) = json.loads(table.read_text())
    assert line["issue_exit"] == line["repro_exit"] == "1" and line["same_way"] and 0 < line["issue_lines"] <= 30
    # issue.py that no longer fails is counted apart
    (issue,) = out.glob("buckets/*/issue.py")
    issue.write_text("print('fixed')\n")
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    (line,) = json.loads(table.read_text())
    assert line["issue_exit"] == "0" and not line["same_way"], again.stdout
    assert again.stdout.rstrip().splitlines()[-1].endswith("issue.py and repro.py fail the same way in 0")
