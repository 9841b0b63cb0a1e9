"""Running an `issue.py` once in a fresh interpreter, as a maintainer who pastes it would.

`run_issue_script` runs a rendered script (text and input files, in a temporary folder) or a
bucket folder's own `issue.py`, under a given Python (this one, or another environment's: a venv
with a newer torch or a nightly), and says what it gave: `ScriptOutcome.FAILS` (the bug is there),
`PASSES` (exit 0: it is gone) or `ERRORS` (anything else). Used before a bucket folder is written
(`divfuzz.reports.issue_folder`: does the finding need divfuzz's settings?) and by
`divfuzz recheck` (does it still fail under another torch?).

Invariants:
- the script runs in its own process group with a timeout (the group is killed on it), its
  standard input closed, its working directory a new empty temporary folder;
- it runs under torch's defaults as a fresh shell gives them: this process's thread-count,
  Inductor, Dynamo and divfuzz variables are not passed on (`CLEARED_ENV`, `CLEARED_PREFIXES`),
  and Inductor's and Triton's caches are folders of that temporary folder, removed after;
- what it printed is kept as clipped text (`OUTPUT_MAX_CHARS`) for issue.md's error log and the
  store: it is never parsed into code, a path or an import; its outcome reads only the exit code
  and whether the last line of its error output names an AssertionError;
- a rendered script's result is remembered for this process by its text, its files, the
  interpreter and the rule (`_remembered`): a bucket folder written again with the same script
  does not run it again.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from divfuzz.reports.issue_script import ERROR_RULES

# Seconds one run of an issue.py may take: a fresh interpreter, torch's import and one compile.
CHECK_TIMEOUT_S = 300
# What of a run's output is kept (its last characters: the assert's message is at the end).
OUTPUT_MAX_CHARS = 4000
# Variables of this process a fresh shell would not have, which change what torch computes or
# how many threads it uses: not passed on to the script.
CLEARED_ENV = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TRITON_CACHE_DIR",
                         "PYTHONHOME", "CUBLAS_WORKSPACE_CONFIG"})
CLEARED_PREFIXES = ("TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE_", "DIVFUZZ_", "INDUCTOR_")
# A version string as `torch.__version__` prints it ("2.13.0", "2.15.0.dev20261201+cpu").
TORCH_VERSION = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,63}")


class ScriptOutcome(enum.Enum):
    """What one run of an issue.py said."""

    FAILS = "still fails"  # exit 1 on its assert (or, for a compiler failure, the error it expects): the bug is there
    PASSES = "passes"  # exit 0: the divergence is gone
    ERRORS = "errors"  # anything else: another exception, a crash of a numeric check, a timeout, no interpreter


@dataclass(frozen=True)
class ScriptRun:
    """One run of an issue.py: its outcome, exit code (None on a timeout or a failed start),
    what it printed (clipped), the last line of its error output, and its seconds."""

    outcome: ScriptOutcome
    returncode: int | None
    output: str
    last_line: str
    seconds: float

    def words(self) -> str:
        """e.g. "exits 1 (AssertionError: ...)", "exits 0", "did not finish in 300 s"."""
        if self.returncode is None:
            return self.last_line
        said = f" ({self.last_line})" if self.last_line and self.outcome is not ScriptOutcome.PASSES else ""
        return f"exits {self.returncode}{said}"


def script_environment(python: str) -> dict[str, str]:
    """The environment a script runs in: this one without `CLEARED_ENV` and `CLEARED_PREFIXES`,
    and without PYTHONPATH when `python` is another interpreter than this one (its own
    site-packages, not ours, give its torch)."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV and not k.startswith(CLEARED_PREFIXES)}
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        env.pop("PYTHONPATH", None)
    return env


def outcome_of(returncode: int | None, stderr: str, rule: str) -> ScriptOutcome:
    """A run's outcome for a script of `rule`: a compiler failure's script fails on any error
    exit (its call raises, or the process crashes); any other fails only on exit 1 with an
    AssertionError last (another exception is an error, not the bug)."""
    if returncode == 0:
        return ScriptOutcome.PASSES
    if returncode is None:
        return ScriptOutcome.ERRORS
    if rule in ERROR_RULES:
        return ScriptOutcome.FAILS
    last = _last_line(stderr)
    return ScriptOutcome.FAILS if returncode == 1 and last.startswith("AssertionError") else ScriptOutcome.ERRORS


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def run_issue_script(script: Path, *, rule: str, python: str = sys.executable, timeout_s: float = CHECK_TIMEOUT_S) -> ScriptRun:
    """Run `script` (a plain file: an issue.py and what it reads beside it) under `python` in a
    fresh process (see the module's invariants); `rule` is the bug rule it checks."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="divfuzz-issue-check-") as scratch:
        env = script_environment(python) | {"TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
                                            "TRITON_CACHE_DIR": os.path.join(scratch, "triton")}
        try:
            proc = subprocess.Popen([python, str(script)], cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as e:
            return ScriptRun(ScriptOutcome.ERRORS, None, "", f"cannot start {python}: {e.strerror or e}", 0.0)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            return ScriptRun(ScriptOutcome.ERRORS, None, _clip(stdout + stderr), f"did not finish in {timeout_s:.0f} s",
                             time.monotonic() - t0)
    return ScriptRun(outcome_of(proc.returncode, stderr, rule), proc.returncode, _clip(stdout + stderr), _last_line(stderr),
                     time.monotonic() - t0)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the script's own process group (it was started as its leader): its compile workers too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _clip(text: str) -> str:
    return text if len(text) <= OUTPUT_MAX_CHARS else "[...]\n" + text[-OUTPUT_MAX_CHARS:]


_REMEMBERED: dict[str, ScriptRun] = {}


def run_rendered_script(text: str, files: dict[str, bytes], *, rule: str, python: str = sys.executable,
                        timeout_s: float = CHECK_TIMEOUT_S) -> ScriptRun:
    """Run a rendered issue.py (`text`, and `files` it reads beside it: divfuzz's own names) in a
    fresh process: written into a temporary folder first. Remembered for this process
    (`_remembered`)."""
    digest = _remembered(text, files, rule, python)
    if digest in _REMEMBERED:
        return _REMEMBERED[digest]
    with tempfile.TemporaryDirectory(prefix="divfuzz-issue-") as folder:
        for name, data in files.items():
            Path(folder, Path(name).name).write_bytes(data)
        script = Path(folder, "issue.py")
        script.write_text(text)
        run = run_issue_script(script, rule=rule, python=python, timeout_s=timeout_s)
        # the temporary folder's name says nothing to a reader of the error log
        run = replace(run, output=run.output.replace(str(script), "issue.py").replace(folder + os.sep, ""))
    if run.returncode is not None:  # a timeout or a failed start is not remembered: the next try may finish
        _REMEMBERED[digest] = run
    return run


def _remembered(text: str, files: dict[str, bytes], rule: str, python: str) -> str:
    """The key a rendered script's run is remembered by."""
    h = hashlib.sha256()
    for part in (text.encode(), rule.encode(), os.path.realpath(python).encode(),
                 *(name.encode() + b"\0" + data for name, data in sorted(files.items()))):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def interpreter_torch(python: str, *, timeout_s: float = 120) -> str | None:
    """The torch version `python` imports (`TORCH_VERSION`-shaped), or None when it has none,
    does not start, or prints something else."""
    try:
        done = subprocess.run([python, "-c", "import sys, torch; sys.stdout.write(torch.__version__)"],
                              env=script_environment(python), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and TORCH_VERSION.fullmatch(version) else None


@dataclass(frozen=True)
class DefaultsCheck:
    """What running issue.py in a fresh process said before its folder was written (`check_pins`):
    the run under torch's defaults, the pins the written script keeps (a subset of
    `candidate_pins`, in its order) with the `PIN_NOTES` key that says why, and the run of the
    script as written (the defaults run when it keeps none)."""

    defaults: ScriptRun
    kept: tuple[str, ...]
    note: str
    written: ScriptRun

    @property
    def needs_pins(self) -> bool:
        """Whether the finding shows only with the pins kept: fails with them, not without."""
        return bool(self.kept) and self.note == "needed"


def check_pins(candidates: tuple[str, ...], run) -> DefaultsCheck:
    """Which of `candidates` (the pins a case's issue.py can set) the finding needs, by running
    the script: `run(pins)` renders it with `pins` and runs it once in a fresh process. Under
    torch's defaults first (no pin); where that does not fail, with every pin (where that does
    not fail either, the script keeps them all, as the case ran: "as-run"); then, with two or
    more, without each in turn, dropping every pin it still fails without ("needed"). At most
    2 + len(candidates) runs."""
    defaults = run(())
    if defaults.outcome is ScriptOutcome.FAILS or not candidates:
        return DefaultsCheck(defaults, (), "needed", defaults)
    everything = run(tuple(candidates))
    if everything.outcome is not ScriptOutcome.FAILS:
        return DefaultsCheck(defaults, tuple(candidates), "as-run", everything)
    kept, written = list(candidates), everything
    if len(candidates) > 1:
        for pin in candidates:
            fewer = tuple(p for p in kept if p != pin)
            if not fewer:
                break  # none at all: the defaults run said it does not fail
            tried = run(fewer)
            if tried.outcome is ScriptOutcome.FAILS:
                kept, written = list(fewer), tried
    return DefaultsCheck(defaults, tuple(kept), "needed", written)
