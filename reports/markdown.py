"""Markdown for people: a verdict as a table, a store's buckets as a report."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from records.verdict import Verdict


def perf_table(verdict: "Verdict") -> str:
    """A perf verdict's phases: eager and compiled medians, the ratio and its interval."""
    rows = ["| phase | eager ms | compiled ms | ratio | interval | pairs | margin | timer | clock |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in verdict.perf:
        rows.append(f"| {p.phase} | {p.eager_median_s * 1e3:.3f} | {p.compiled_median_s * 1e3:.3f} | {p.ratio:.3f} | "
                    f"[{p.ratio_low:.3f}, {p.ratio_high:.3f}] at {p.confidence:.0%} | {p.repeats} | {p.margin:.0%} | "
                    f"{p.timer} | {p.clock or '-'} |")
    return "\n".join(rows)


def verdict_table(verdict: "Verdict") -> str:
    if getattr(verdict, "perf", ()):
        return perf_table(verdict)
    rows = ["| output | dtype | differing | max ULP | fp64 triage | NaN/Inf | int flips | max step | boundary / gross |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o in verdict.outputs:
        f, i = o.float_cmp, o.int_cmp
        if f:
            rows.append(f"| {o.name} | {f.dtype} | {f.n_diff}/{f.numel} | {f.max_ulp} | {f.triage} | {f.nan_inf_mismatch} | | | |")
        elif i:
            rows.append(
                f"| {o.name} | {i.dtype} | {i.flips}/{i.numel} | | | | {i.flips} | {i.max_step} | "
                f"{i.boundary_flips} / {i.gross_flips + i.unknown_flips} |"
            )
    return "\n".join(rows)


def md_text(value) -> str:
    """A string from the store as inert markdown text: HTML tags and entities are shown, never
    rendered (`<`, `>`, `&` as entities), a `|` cannot end a table cell, a newline cannot start a block."""
    import html

    return " ".join(html.escape(str(value), quote=False).replace("|", "\\|").split())


def md_code(value) -> str:
    """A string from the store as an inline code span that it cannot close early (a fence longer
    than its longest run of backticks); `|` escaped so a table cell holds it whole."""
    import re

    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


def _when(ts: float) -> str:
    try:  # a number from the store: a huge or NaN one prints as unknown, never stops the report
        return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"


def _minimized(folder: str | None) -> str:
    """`ops before -> after, seconds` from the bucket folder's analysis.json ('' when not minimized)."""
    import json
    from pathlib import Path

    from records.errors import UnsafePathError
    from reports.safe_paths import read_text

    path = Path(folder) / "analysis.json" if folder else None
    try:  # the folder is a path read from the store: a FIFO or symlink there is not followed
        m = json.loads(read_text(path, what="analysis"))["minimized"] if path else None
        if not m:
            return ""
        return md_text(f"{int(m['ops_before'])} → {int(m['ops_after'])} ops, {float(m['wall_s']):.0f} s")
    except (OSError, ValueError, KeyError, TypeError, RecursionError, OverflowError, UnsafePathError):
        return ""


def culprit_of(bucket) -> str:
    """A bucket's culprit: attribution's summary, else what its key names after '@', else '-'."""
    summary = (bucket.culprit or {}).get("summary")
    if summary:
        return summary
    sig = bucket.key.signature
    return sig.split(" @ ", 1)[1] if " @ " in sig else "-"


def _reason(bucket) -> str:
    return (bucket.severity_reason or {}).get("detail", "not judged yet")


def fold_by_culprit(buckets) -> list[tuple[str, str, int, int, list[int]]]:
    """(severity, culprit, buckets, cases, bucket ids) per culprit: how by-design and noise read."""
    groups: dict[tuple[str, str], list] = {}
    for b in buckets:
        groups.setdefault((b.severity, culprit_of(b)), []).append(b)
    return [
        (sev, culprit, len(bs), sum(b.count for b in bs), [b.id for b in bs])
        for (sev, culprit), bs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "by-design", -len(kv[1]), kv[0][1]))
    ]


def buckets_markdown(store, *, run_id: int | None = None, min_severity: str = "noise") -> str:
    """A store's buckets (or those a run touched), led by severity: `bug`, then `suspect`, each
    with its reason; `by-design` and `noise` folded into one line per culprit with counts."""
    from records.severity import ORDER, Severity

    floor = Severity(min_severity)
    buckets = store.buckets(run_id=run_id)
    title = f"# divfuzz buckets{f' of run {run_id}' if run_id else ''}"
    if not buckets:
        return title + "\n\nNo buckets: every case matched eager (or differed only as expected in fp32).\n"
    by_sev = {s: [b for b in buckets if b.severity == s.value] for s in ORDER}
    lines = [title, "", "Severity: " + ", ".join(f"{len(by_sev[s])} {s.value}" for s in ORDER) + "."]
    for sev in (Severity.BUG, Severity.SUSPECT):
        if not sev.at_least(floor) or not by_sev[sev]:
            continue
        lines += ["", f"## {sev.value} ({len(by_sev[sev])})", "",
                  "| id | kind | dtype | device | ops | culprit | reason | minimized | cases | first seen | repro |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for b in sorted(by_sev[sev], key=lambda b: (-b.count, b.id)):
            k = b.key
            lines.append(  # every string here comes from the store: escaped, never rendered as HTML or markdown
                f"| {b.id} | {md_text(k.kind + (' ' + k.detail if k.detail else ''))} | {md_text(k.dtype)} | {md_text(k.device_type)} | "
                f"{md_code(k.signature)} | {md_text(culprit_of(b))} | {md_text(_reason(b))} | {_minimized(b.folder)} | {b.count} | "
                f"{_when(b.first_seen)} | {md_text(b.folder + '/repro.py') if b.folder else ''} |"
            )
    folded = [b for s in (Severity.BY_DESIGN, Severity.NOISE) if s.at_least(floor) for b in by_sev[s]]
    if folded:
        lines += ["", "## by-design and noise, folded by culprit", ""]
        for sev, culprit, n, cases, ids in fold_by_culprit(folded):
            shown = ", ".join(str(i) for i in ids[:12]) + (", ..." if len(ids) > 12 else "")
            lines.append(f"- {md_text(sev)}: {md_text(culprit)}: {n} buckets, {cases} cases (buckets {shown})")
    return "\n".join(lines) + "\n"
