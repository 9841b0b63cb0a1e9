"""Ctrl-C leaves only divfuzz's own lines on the terminal (issue 35).

A signal to the whole process group (a terminal's Ctrl-C, `timeout`, a CI runner) reaches every
process divfuzz started. Each test sends one at the moment that once printed something else:
- while the warm template's fork server imports torch: its KeyboardInterrupt traceback
  (`multiprocessing/forkserver.py`), or a "Fatal Python error" while its interpreter started;
- after workers have run cases: multiprocessing's resource tracker warned about "leaked
  semaphore objects" (tqdm's lock, made a named semaphore by torch.fx's Interpreter in each
  worker, and never released by a killed worker).
Real processes, real signals; no mocks.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOREIGN = ("Traceback", "Fatal Python error", "resource_tracker", "leaked semaphore", "warnings.warn", "Aborted!")


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    # A terminal's Ctrl-C reaches processes whose SIGINT is at its default: undo an ignored SIGINT
    # inherited from whatever started the test runner, or the test would prove nothing.
    return subprocess.Popen([sys.executable, "-m", "divfuzz.fuzzer", *args], cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [g for kid in kids for g in _descendants(kid)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _torch_loaded(pid: int) -> bool:
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _foreign_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(word in line for word in FOREIGN)]


@pytest.mark.timeout(300)
def test_ctrl_c_while_the_fork_server_imports_torch_prints_only_divfuzz_s_line(tmp_path):
    proc = _start(["fuzz", "--device", "cpu", "--max-cases", "4", "--workers", "1", "--no-live", "--out", "out"], tmp_path)
    server, deadline = None, time.monotonic() + 60
    while server is None and time.monotonic() < deadline and proc.poll() is None:
        server = next((p for p in _descendants(proc.pid) if "multiprocessing.forkserver" in _cmdline(p)), None)
        time.sleep(0.01)
    assert server is not None, "the fork server never started"
    mid_import = not _torch_loaded(server)  # `import torch` maps libtorch_cpu seconds before it returns
    os.killpg(proc.pid, signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, output
    assert "interrupted:" in output
    assert _foreign_lines(output) == [], output
    assert mid_import  # the signal landed where it once printed the server's traceback


@pytest.mark.timeout(300)
def test_ctrl_c_after_cases_ran_leaves_no_resource_tracker_warning(tmp_path):
    proc = _start(["fuzz", "--device", "cpu", "--max-cases", "200", "--workers", "2", "--seed", "3", "--no-live",
                   "--no-minimize", "--out", "out"], tmp_path)
    store, stored, deadline = tmp_path / "out" / "divfuzz.sqlite", 0, time.monotonic() + 240
    while stored < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
                stored = db.execute("select count(*) from cases").fetchone()[0]
        except sqlite3.Error:  # not created yet
            pass
    assert stored >= 2, "no case stored in time"
    os.killpg(proc.pid, signal.SIGINT)  # both workers have compiled and run graphs through torch.fx
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, output
    assert "interrupted:" in output
    assert _foreign_lines(output) == [], output


def test_an_interrupt_raised_inside_exec_of_source_text_still_exits_2(tmp_path):
    """Under `python -m`, CPython ends a process by SIGINT (exit -2) when a KeyboardInterrupt has
    left an exec() of source text, whatever it exits with after catching it; hypothesis execs
    source at import, so a Ctrl-C landing there made `python -m divfuzz.fuzzer fuzz` exit -2 (1
    run in 5 of the fork-server test under load). divfuzz's group handles it as any interrupt:
    one line, exit 2."""
    script = tmp_path / "interrupted_cli.py"  # run with -m, as `python -m divfuzz.fuzzer` is (a script file exits at once)
    script.write_text("import click\n"
                      "from divfuzz.fuzzer.cli.main import DivfuzzGroup\n"
                      "@click.group(cls=DivfuzzGroup)\n"
                      "def group():\n    pass\n"
                      "@group.command()\n"
                      "def stop():\n    exec('raise KeyboardInterrupt')\n"
                      "group()\n")
    done = subprocess.run([sys.executable, "-m", "interrupted_cli", "stop"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "interrupted:" in done.stdout + done.stderr
