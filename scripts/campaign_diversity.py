#!/usr/bin/env python3
"""How varied a campaign's cases were, window by window: a health check for the search.

    python scripts/campaign_diversity.py divfuzz-out [--window 300]

For each window of consecutive stored cases it prints the number of cases, of distinct graph
structures (ops in order, with autocast and backward), of findings, and the median case wall time.
A search stuck hill-climbing one graph shows up as a window with a handful of structures and
a tiny median time (its compile is cached).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path


def structure(spec_json: str) -> str:
    spec = json.loads(spec_json)
    ops = "+".join(n["op"] for n in spec["nodes"])
    return f"{ops} autocast={spec.get('autocast')} backward={spec.get('backward', False)}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--window", type=int, default=300)
    args = ap.parse_args()
    path = args.out_dir / "divfuzz.sqlite"
    if not path.is_file():
        print(f"{path}: no store here", file=sys.stderr)
        return 2
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute("SELECT spec_json, finding_kind, wall_s FROM cases ORDER BY id").fetchall()
    print(f"{len(rows)} cases, {len({structure(r[0]) for r in rows})} distinct graph structures")
    print("| cases | distinct structures | findings | median wall s |")
    print("| --- | --- | --- | --- |")
    for lo in range(0, len(rows), args.window):
        part = rows[lo : lo + args.window]
        structures = {structure(r[0]) for r in part}
        findings = sum(1 for r in part if r[1])
        print(f"| {lo}-{lo + len(part) - 1} | {len(structures)} | {findings} | {statistics.median(r[2] for r in part):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
