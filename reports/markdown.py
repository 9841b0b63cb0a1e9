"""Markdown for people: a verdict as a table, a store's buckets as a report."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oracles.verdict import Verdict


def verdict_table(verdict: "Verdict") -> str:
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


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _minimized(folder: str | None) -> str:
    """`ops before -> after, seconds` from the bucket folder's analysis.json ('' when not minimized)."""
    import json
    from pathlib import Path

    path = Path(folder) / "analysis.json" if folder else None
    try:
        m = json.loads(path.read_text())["minimized"] if path else None
    except (OSError, ValueError, KeyError):
        return ""
    if not m:
        return ""
    return f"{m['ops_before']} → {m['ops_after']} ops, {m['wall_s']:.0f} s"


def buckets_markdown(store, *, run_id: int | None = None) -> str:
    """All buckets of a store (or those a run touched), newest root causes last."""
    buckets = store.buckets(run_id=run_id)
    title = f"# divfuzz buckets{f' of run {run_id}' if run_id else ''}"
    if not buckets:
        return title + "\n\nNo buckets: every case matched eager (or differed only as expected in fp32).\n"
    lines = [title, "", "| id | kind | dtype | device | ops | culprit | minimized | triage | cases | first seen | last seen | repro |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for b in buckets:
        k = b.key
        culprit = (b.culprit or {}).get("summary", "")
        lines.append(
            f"| {b.id} | {k.kind}{' ' + k.detail if k.detail else ''} | {k.dtype} | {k.device_type} | `{k.signature}` | "
            f"{culprit} | {_minimized(b.folder)} | {b.triage} | {b.count} | {_when(b.first_seen)} | {_when(b.last_seen)} | "
            f"{(b.folder + '/repro.py') if b.folder else ''} |"
        )
    return "\n".join(lines) + "\n"
