"""Every bug root cause of a campaign's store, one line each, with what a reader checks by hand:
its minimized ops, culprit, mechanism (none for a bug), the severity's words, and, run again on
this host, the exit code and length of its bucket's issue.py and repro.py.

    python scripts/bug_lines.py STORE_DIR [--jobs 8] [--timeout 180] > bug-lines.md

For a closing note: the lines a maintainer would read on the first screen, and whether each
bucket's scripts still fail the way the report says (exit 1 while the bug is there).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.reports.root_causes import root_cause_groups


def _run(script: Path, timeout_s: float) -> tuple[str, float]:
    if not script.exists():
        return "absent", 0.0
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, script.name], cwd=script.parent, capture_output=True, text=True, timeout=timeout_s)
        code = str(done.returncode)
    except subprocess.TimeoutExpired:
        code = "timeout"
    return code, time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir", type=Path)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    store = Store(args.store_dir / STORE_NAME, create=False)
    try:
        causes = [rc for rc in root_cause_groups(store.buckets()) if rc.severity == "bug"]
    finally:
        store.close()
    jobs = []
    for rc in causes:
        folder = Path(rc.lead.folder) if rc.lead.folder else None
        jobs.append((rc, folder))

    def check(item):
        rc, folder = item
        if folder is None:
            return rc, folder, ("no folder", 0.0), ("no folder", 0.0), 0
        issue = folder / "issue.py"
        lines = len(issue.read_text().splitlines()) if issue.exists() else 0
        return rc, folder, _run(issue, args.timeout), _run(folder / "repro.py", args.timeout), lines

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(check, jobs))
    print("| # | bucket | cases | upstream | ops @ culprit | why (stored) | issue.py lines, exit | repro.py exit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, (rc, folder, issue, repro, lines) in enumerate(results, 1):
        why = ((rc.lead.severity_reason or {}).get("detail") or "").replace("|", "/")[:220]
        title = rc.title.replace("|", "/")[:160]
        print(f"| {n} | {rc.lead.id} | {rc.cases} | {rc.known} | `{title}` | {why} | {lines}, {issue[0]} ({issue[1]:.0f} s) |"
              f" {repro[0]} ({repro[1]:.0f} s) |")
    print(f"\n{len(results)} bug root causes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
