"""Every bug bucket of a campaign's store, one line each, printed as each is done: its root cause,
rule, minimized ops at their culprit, the severity's words, and, run again on this host, its
issue.py's length and exit code, its repro.py's exit code, and whether the two fail the same way.

    python scripts/bug_lines.py STORE_DIR [--jobs 4] [--timeout 300] [--budget 1800] [--leads] [--json FILE] > bug-lines.md

Each script runs in its own process group with its own timeout (a hung compile is killed with
its compile workers). `--jobs` runs that many buckets at once; `--budget` stops starting new
ones after that many seconds (the rest are listed as not run); `--leads` runs only each root
cause's lead bucket. Lines appear in the order buckets finish and are flushed at once, so a run
cut short keeps what it measured.

"The same way": both exit nonzero and for the bucket's reason. repro.py ends with divfuzz's
`DIVERGES: SEVERITY (RULE, output ...)`; for a numeric or type rule issue.py must fail at its own
last line (its assert); for a compile or runtime error it must raise the exception repro.py
names; for a crash both die by a signal; for a hang both give up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.outcomes import ERROR_KINDS
from divfuzz.reports.bucket_files import ISSUE_SCRIPT, REPRO_FILE
from divfuzz.reports.bucket_folder import BucketFolder
from divfuzz.reports.root_causes import root_cause_groups

# repro.py's closing line (`divfuzz.reports.repro`'s `summary`), its error line, and its own alarm.
REPRO_LINE = re.compile(r"^DIVERGES: (?P<severity>[a-z-]+) \((?P<rule>[^,()]+), output ")
REPRO_ERROR = re.compile(r"^(?:compile|runtime) error: (?P<type>[A-Za-z_][\w]*):", re.M)
REPRO_HANG = "compiled run did not finish in"
# What is kept of each script's output: enough for a compiler's whole traceback (an Inductor error's runs past 4,000
# characters, and a cut one names no exception).
TAIL = 200_000
ISSUE_HANG = "no result after"  # issue.py's alarm (`divfuzz.reports.issue_script.HANG_S`)
FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)', re.M)
EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::|$)")
ERROR_RULES = frozenset(kind.value for kind in ERROR_KINDS)


@dataclass
class Run:
    """One script's run: its exit code (None: timed out, or absent), seconds, and the tails of its output."""

    exit: int | None
    seconds: float
    stdout: str = ""
    stderr: str = ""
    absent: bool = False
    timed_out: bool = False

    def code(self) -> str:
        if self.absent:
            return "absent"
        if self.timed_out:
            return "timeout"
        return str(self.exit) if self.exit is None or self.exit >= 0 else f"signal {-self.exit}"


def run_script(script: Path, timeout_s: float) -> Run:
    """Run `script` in its folder, in a new process group killed whole on timeout."""
    if not script.is_file():
        return Run(None, 0.0, absent=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, script.name], cwd=script.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Run(proc.returncode, time.monotonic() - t0, out[-TAIL:], err[-TAIL:])
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return Run(None, time.monotonic() - t0, out[-TAIL:], err[-TAIL:], timed_out=True)


def _plain_failure(run: Run, hung: bool) -> str | None:
    """What either script's run says before its output is read: absent, timed out, killed by a
    signal (`crash`), exit 0 (`passes`), or its own hang message (`hung`); else None."""
    if run.absent or run.timed_out:
        return run.code()
    if run.exit is not None and run.exit < 0:
        return "crash"
    if run.exit == 0:
        return "passes"
    return "hang" if hung else None


def repro_failure(run: Run) -> str:
    """How repro.py failed: `rule:RULE` (its closing line), `raises:TYPE` for a compiler error,
    `crash`, `hang`, or `passes` / `timeout` / `absent` / `exit N`."""
    plain = _plain_failure(run, REPRO_HANG in run.stdout)
    if plain is not None:
        return plain
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    said = REPRO_LINE.match(lines[-1]) if lines else None
    if said is None:
        return f"exit {run.exit}"
    if said["rule"] in ERROR_RULES:
        error = REPRO_ERROR.search(run.stdout)
        return f"raises:{error['type']}" if error else f"rule:{said['rule']}"
    return f"rule:{said['rule']}"


def issue_failure(run: Run, script_lines: int, rule: str) -> str:
    """How issue.py failed, in repro_failure's words: `rule:RULE` when its own last line (the
    assert of the bucket's rule) raised AssertionError, `raises:TYPE` for any other exception."""
    plain = _plain_failure(run, ISSUE_HANG in run.stderr)
    if plain is not None:
        return plain
    start = run.stderr.rfind("Traceback (most recent call last):")
    tail = run.stderr[max(start, 0):]  # no header (cut off): the frames that are there
    frames = FRAME.findall(tail)
    after = FRAME.split(tail)[-1].splitlines()[1:] if frames else []  # past the last frame's line
    exception = next((m["type"] for m in map(EXCEPTION_LINE.match, after) if m), None)
    if exception is None:
        return f"exit {run.exit}"
    last_file, last_line = frames[-1]
    if exception == "AssertionError" and last_file.endswith(ISSUE_SCRIPT) and int(last_line) == script_lines:
        return f"rule:{rule}"
    return f"raises:{exception.rsplit('.', 1)[-1]}"


def same_way(issue: str, repro: str, rule: str) -> bool:
    """Both fail, for the bucket's reason (module docstring)."""
    if issue in ("passes", "absent", "timeout") or repro in ("passes", "absent", "timeout") or issue.startswith("exit "):
        return False
    if rule in ("crash", "hang"):
        return issue == repro == rule
    if rule in ERROR_RULES:
        return issue.startswith("raises:") and (repro == issue or repro == f"rule:{rule}")
    return issue == repro == f"rule:{rule}"


@dataclass
class Line:
    """One bug bucket's measured line (`--json` writes these)."""

    bucket: int
    cause: int
    rule: str
    cases: int
    known: str
    title: str
    why: str
    issue_lines: int
    issue_exit: str
    issue_failure: str
    issue_s: float
    repro_exit: str
    repro_failure: str
    repro_s: float
    same_way: bool

    def row(self) -> str:
        same = "yes" if self.same_way else "**no**"
        return (f"| {self.bucket} | {self.cause} | {self.rule} | {self.cases} | {self.known} | `{self.title}` | {self.why} | "
                f"{self.issue_lines} | {self.issue_exit} ({self.issue_s:.0f} s) | {self.repro_exit} ({self.repro_s:.0f} s) | "
                f"{same}: {self.issue_failure} / {self.repro_failure} |")


HEADER = ("| bucket | cause | rule | cases | upstream | ops @ culprit | why (stored) | issue.py lines | issue.py exit | "
          "repro.py exit | same way: issue / repro |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def _cell(text: str, limit: int) -> str:
    return " ".join(text.replace("|", "/").replace("`", "'").split())[:limit]


def measure(bucket, cause_no: int, cause, store_dir: Path, timeout_s: float) -> Line:
    """Run one bug bucket's issue.py and repro.py (one after the other: they compile the same graph)."""
    # The folder as its id and key place it (never the stored path: a store moved from its host still reads).
    folder = BucketFolder.load(store_dir, bucket.id, bucket.key) if BucketFolder.exists(store_dir, bucket.id, bucket.key) else None
    rule = bucket.key.rule
    issue_path = (folder.file(ISSUE_SCRIPT) if folder else None) or Path("/nonexistent", ISSUE_SCRIPT)
    text = folder.read_file(ISSUE_SCRIPT) if folder else None
    lines = len(text.splitlines()) if text is not None else 0
    issue = run_script(issue_path, timeout_s)
    repro = run_script((folder.file(REPRO_FILE) if folder else None) or Path("/nonexistent", REPRO_FILE), timeout_s)
    i, r = issue_failure(issue, lines, rule), repro_failure(repro)
    why = (bucket.severity_reason or {}).get("detail") or ""
    return Line(bucket.id, cause_no, rule, bucket.count, _cell(str(cause.known), 40) if cause else "", _cell(cause.title if cause else "", 160),
                _cell(why, 200), lines, issue.code(), i, issue.seconds, repro.code(), r, repro.seconds, same_way(i, r, rule))


def _bug_buckets(store_dir: Path, leads_only: bool):
    """(bucket, root cause number, root cause) for every bug bucket, root causes in report order."""
    store = Store(store_dir / STORE_NAME, create=False)
    try:
        causes = [rc for rc in root_cause_groups(store.buckets()) if rc.severity == "bug"]
    finally:
        store.close()
    out = []
    for n, rc in enumerate(causes, 1):
        for b in (rc.buckets[:1] if leads_only else rc.buckets):
            if b.severity == "bug":
                out.append((b, n, rc))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir", type=Path)
    parser.add_argument("--jobs", type=int, default=1, help="buckets run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each script (default 300)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which no new bucket is started")
    parser.add_argument("--leads", action="store_true", help="only each root cause's lead bucket")
    parser.add_argument("--json", type=Path, default=None, help="also write the lines as JSON to this file")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    todo = _bug_buckets(args.store_dir, args.leads)
    print(f"{len(todo)} bug buckets in {args.store_dir}; {max(1, args.jobs)} at a time, {args.timeout:g} s per script"
          + (f", no new one after {args.budget:g} s" if args.budget else ""), flush=True)
    print(HEADER, flush=True)
    done: list[Line] = []
    skipped = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pending = set()
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < max(1, args.jobs):
                if args.budget is not None and time.monotonic() - t0 > args.budget:
                    skipped += [b.id for b, _, _ in queue]
                    queue = []
                    break
                b, n, rc = queue.pop(0)
                pending.add(pool.submit(measure, b, n, rc, args.store_dir, args.timeout))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                line = f.result()
                done.append(line)
                print(line.row(), flush=True)
    same = sum(line.same_way for line in done)
    failing = sum(line.issue_exit == "1" for line in done)
    short = sum(0 < line.issue_lines <= 30 for line in done)
    print(f"\n{len(done)} bug buckets run in {time.monotonic() - t0:.0f} s: issue.py exits 1 in {failing}, "
          f"at most 30 lines in {short}; issue.py and repro.py fail the same way in {same}"
          + (f"; {len(skipped)} not run (budget): {skipped}" if skipped else ""), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(line) for line in sorted(done, key=lambda x: x.bucket)], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
