"""Print one markdown table of `minimize --module` runs (scripts/gpu_models.sh): one row per run
folder (model, mode), read from the files --module writes: capture.json (graphs, graph breaks, the
whole model's severity, notes), NN-rung/culprit.json (ops before and after, culprit, severity),
phases.json (seconds per phase, the phase in flight when a run was stopped, what --budget cut),
plus the script's wall.txt and rc.txt. A run stopped by `timeout` (exit 124) shows what it wrote.

    python scripts/models_table.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "?"


def row(run: Path) -> str:
    """One table row for one run folder; missing files read as '?' rather than failing."""
    model, _, mode = run.name.rpartition("-")
    cap = _read(run / "capture.json") or {}
    causes = [c for c in (_read(p) for p in sorted(run.glob("[0-9][0-9]-*/culprit.json"))) if c]
    graphs = cap.get("graphs")
    ops = "+".join(str(g["ops"]) for g in graphs) if graphs else "?"
    sev = cap.get("severity")
    if not cap:
        verdict = "no capture.json"
    elif sev:
        verdict = f"{sev['severity']} ({sev['rule']})"
    else:
        verdict = "agrees"
    reduced = "; ".join(f"{c.get('ops_before', '?')} -> {c.get('ops', '?')} ({c.get('rung')})" for c in causes) or "-"
    culprit = "; ".join(str(c.get("summary", "?"))[:90] for c in causes) or "; ".join(cap.get("notes", []))[:120] or "-"
    timing = _read(run / "phases.json") or {}
    phases = ", ".join(f"{k} {v:g}" for k, v in (timing.get("phases_s") or {}).items()) or "-"
    if timing.get("in_flight"):
        phases += f"; stopped in {timing['in_flight']}"
    if timing.get("cut_by_budget"):
        phases += f"; {len(timing['cut_by_budget'])} cut by --budget"
    rc = _text(run / "rc.txt")
    status = {"0": "", "124": " (timeout)", "2": " (exit 2)"}.get(rc, f" (exit {rc})")
    cells = [model, mode, f"{len(graphs) if graphs is not None else '?'} ({ops})", str(cap.get("graph_breaks", "?")),
             verdict, ",".join(str(i) for i in cap.get("culprit_graphs", [])) or "-", reduced, culprit,
             f"{_text(run / 'wall.txt')} s{status}", phases]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[1]).is_dir():
        print("usage: models_table.py DIR (a folder of run folders MODEL-MODE/)", file=sys.stderr)
        return 2
    runs = sorted(p for p in Path(argv[1]).iterdir() if p.is_dir() and "-" in p.name)
    print("| model | mode | graphs (ops each) | graph breaks | whole-model verdict | graphs differing alone"
          " | aten ops before -> after (rung) | culprit | wall | seconds per phase |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        print(row(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
