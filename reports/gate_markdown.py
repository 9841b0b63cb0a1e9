"""The gate's markdown summary (for a PR comment or `$GITHUB_STEP_SUMMARY`), from its result data."""

from __future__ import annotations

from typing import Any


def _cell(text: str) -> str:
    """Text for a table cell: no line break, no column break, no HTML, no code span."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "\\`")
            .replace("<", "&lt;").replace(">", "&gt;"))


def gate_markdown(result: dict[str, Any]) -> str:
    c = result["counts"]
    verdict = "✅ pass" if result["result"] == "pass" else "❌ fail"
    lines = [
        f"## divfuzz gate: {verdict}",
        "",
        f"{c['passed']}/{c['specs']} specs pass, {c['failed']} fail, {c['improved']} improved · "
        f"device `{result['device']}` · torch `{result['torch']}` · backend `{result['config']['backend']}` · "
        f"baseline `{result['baseline']}`",
        "",
    ]
    for note in result["notes"]:
        lines.append(f"> note: {note}")
    failing = [s for s in result["specs"] if s["result"] != "pass"]
    if failing:
        lines += ["### Failing specs", "", "| spec | problem | verdict |", "| --- | --- | --- |"]
        for s in failing:
            lines.append(f"| `{s['name']}` | {_cell('; '.join(s['problems']))} | {_cell(s['verdict'])} |")
        lines.append("")
    improved = [s for s in result["specs"] if s["result"] == "pass" and s["improvements"]]
    if improved:
        lines += ["### Improvements (update the baseline to lock them in)", "", "| spec | improvement |", "| --- | --- |"]
        for s in improved:
            lines.append(f"| `{s['name']}` | {_cell('; '.join(s['improvements']))} |")
        lines.append("")
    moved = [s for s in result["specs"] if s.get("moved_bounds")]
    if moved:
        lines += ["### Moved bounds (at the baseline's severity: not failures)", "", "| spec | moved |", "| --- | --- |"]
        for s in moved:
            lines.append(f"| `{s['name']}` | {_cell('; '.join(s['moved_bounds']))} |")
        lines.append("")
        rows = (result.get("machine") or {}).get("rows") or []
        if rows:
            lines += ["| machine | baseline | this run |", "| --- | --- | --- |"]
            for r in rows:
                mark = " **(differs)**" if r["differs"] else ""
                lines.append(f"| {_cell(r['field'])} | {_cell(r['baseline'])} | {_cell(r['current'])}{mark} |")
            lines.append("")
    fuzz = result.get("fuzz")
    if fuzz:
        lines += [f"### Fuzz: {fuzz['cases']} cases (seed {fuzz['seed']}), {len(fuzz['failing'])} new findings that fail the gate", ""]
        for f in fuzz["findings"]:
            mark = "❌" if f["fails_gate"] else ("known" if f["known"] else "ok")
            upstream = f" · upstream {_cell(str(f['upstream']))}" if f.get("upstream") else ""
            severity = f"{_cell(str(f['severity']))}, " if f.get("severity") else ""
            lines.append(f"- {mark} `{_cell(str(f['bucket']))}` ({severity}triage {_cell(str(f['triage']))}, {f['cases']} cases){upstream}")
        lines.append("")
    timings = result.get("timings") or {}
    if timings:
        lines.append(f"Gate wall time: {timings.get('total_s', 0):.1f} s.")
    return "\n".join(lines) + "\n"
