"""Markdown for people: a verdict as a table, a store's buckets as a report."""

from __future__ import annotations

from divfuzz.reports.store_view import StoreView
from divfuzz.oracles.mechanisms import MECHANISMS, excuses

import datetime as _dt
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from divfuzz.reports.issue_markdown import recheck_tag
from divfuzz.reports.root_causes import culprit_of  # noqa: F401  (divfuzz.reports.markdown.culprit_of: the CLI and diff read it here)
from divfuzz.reports.root_causes import COMPILER_ORDER, EAGER_WORSE, MAX_BUG_LINES, graph_pattern, severity_line_of, summary_lines
from divfuzz.generators.coverage import op_coverage
from divfuzz.generators.features import feature_coverage
from divfuzz.records.errors import UnsafePathError
from divfuzz.records.severity import Severity
from divfuzz.records.safe_paths import read_text
from divfuzz.reports.bucket_files import ANALYSIS_FILE, REPRO_FILE, SPEC_FILE

if TYPE_CHECKING:
    from divfuzz.records.verdict import Verdict


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
    """A string from the store as inert markdown text that still reads as itself on a terminal,
    where the report is mostly read: HTML tags and entities are shown, never rendered, through
    CommonMark's backslash escapes (`\\<` is a literal `<`, never a tag or an autolink; `\\&` before
    an entity's name; a backslash doubled, so none escapes the escape); `>` and a lone `&` stay
    as they are (mid-line they are text: `&gt;` was what a reader saw). A `|` cannot end a table
    cell, a newline cannot start a block."""
    text = " ".join(str(value).split()).replace("\\", "\\\\").replace("<", "\\<")
    return re.sub(r"&(?=#?[0-9A-Za-z]+;)", r"\\&", text).replace("|", "\\|")


def md_code(value) -> str:
    """A string from the store as an inline code span that it cannot close early (a fence longer
    than its longest run of backticks); `|` escaped so a table cell holds it whole."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


def _when(ts: float) -> str:
    try:  # a number from the store: a huge or NaN one prints as unknown, never stops the report
        return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"


def _minimized(folder: str | None) -> str:
    """`ops before -> after, seconds` from the bucket folder's analysis.json (`minimized_words`)."""

    path = Path(folder) / ANALYSIS_FILE if folder else None
    try:  # the folder is a path read from the store: a FIFO or symlink there is not followed
        m = json.loads(read_text(path, what="analysis"))["minimized"] if path else None
    except (OSError, ValueError, KeyError, TypeError, RecursionError, OverflowError, UnsafePathError):
        return ""
    return minimized_words(m)


def minimized_words(m) -> str:
    """A stored minimization record (`Analysis.to_dict()["minimized"]`) as the report's cell:
    `ops before -> after, seconds`, then why its issue.py is long where the analysis said so;
    for a bucket not minimized, the analysis's words for why ('' when it left none)."""
    if not isinstance(m, dict):
        return ""
    why = m.get("why_long") if isinstance(m.get("why_long"), str) else ""
    try:
        if "ops_before" in m:
            cell = f"{int(m['ops_before'])} → {int(m['ops_after'])} ops" + (f", {float(m['wall_s']):.0f} s" if "wall_s" in m else "")
            return md_text(cell + (f"; {why}" if why else ""))
    except (KeyError, TypeError, ValueError, OverflowError):
        return ""
    note = m.get("note")
    return md_text(note) if isinstance(note, str) else ""


def _reason(bucket) -> str:
    return (bucket.severity_reason or {}).get("detail", "not judged yet")


def why_line(bucket) -> str:
    """A bucket's severity, the rule and output of its stored reason, and its words, as
    `SeverityReason.labelled` reads (`divfuzz replay` and a bucket's repro.py end the same way)."""
    reason = bucket.severity_reason or {}
    label = f" ({reason['rule']}, output {reason['output']})" if reason.get("rule") and reason.get("output") else ""
    return f"{bucket.severity}{label}: {_reason(bucket)}"


def _plain(text) -> str:
    """Stored text on one markdown line, inert (every store string in the root-cause report goes through here)."""
    return md_text(text)


# How many raw buckets a root cause names beneath it before "and N more".
BUCKETS_NAMED = 12


def coverage_markdown(store: StoreView, *, run_id: int | None = None) -> str:
    """The per-op coverage table (`divfuzz.generators.coverage.op_coverage`): cases drawn per op, by data
    dtype, and the buckets they landed in by severity; ops never drawn listed on one line. The
    cases stream by in bucket order (`Store.iter_case_specs`): memory grows with the ops, not the store."""
    rows = op_coverage(store.iter_case_specs(run_id=run_id), grouped=True)
    drawn = [r for r in rows if r.cases]
    lines = ["## Op coverage", "", "| op | family | cases | by dtype | buckets by severity |", "| --- | --- | --- | --- | --- |"]
    for r in sorted(drawn, key=lambda r: (-r.cases, r.op)):
        dtypes = ", ".join(f"{md_text(d)} {n}" for d, n in r.by_dtype)
        buckets = ", ".join(f"{n} {md_text(s)}" for s, n in r.buckets) or "-"
        lines.append(f"| {md_text(r.op)} | {md_text(r.family)} | {r.cases} | {dtypes} | {buckets} |")
    never = [r.op for r in rows if not r.cases]
    if never:
        lines += ["", f"Never drawn ({len(never)}): " + ", ".join(md_text(op) for op in never) + "."]
    return "\n".join(lines) + "\n\n" + features_markdown(store, run_id=run_id)


# What each program feature's row counts (`divfuzz.generators.features`).
FEATURE_WORDS = {
    "layout": "an input not contiguous (transposed, permuted, strided, expanded, channels-last, offset)",
    "mutation": "an in-place op (add_, mul_, clamp_, index_put_, copy_ into a slice, ...)",
    "view": "a view op (transpose, narrow, select, unsqueeze, view)",
    "dynamic": "compiled for dynamic shapes (mark_dynamic or dynamic=True), run on several sizes",
    "mode": "compiled under another torch.compile mode (max-autotune-no-cudagraphs, reduce-overhead)",
}


def features_markdown(store: StoreView, *, run_id: int | None = None) -> str:
    """The `## Program features` table: per dimension (`FEATURES`), the cases that have it and the
    buckets they landed in by severity, the cases streamed in bucket order as for the op table."""
    lines = ["## Program features", "", "| feature | what it is | cases | buckets by severity |", "| --- | --- | --- | --- |"]
    for r in feature_coverage(store.iter_case_specs(run_id=run_id)):
        buckets = ", ".join(f"{n} {md_text(s)}" for s, n in r.buckets) or "-"
        lines.append(f"| {md_text(r.feature)} | {md_text(FEATURE_WORDS.get(r.feature, ''))} | {r.cases} | {buckets} |")
    return "\n".join(lines) + "\n"


def buckets_markdown(store: StoreView, *, run_id: int | None = None, min_severity: str = "noise", new_only: bool = False) -> str:
    """A store's root causes (or those of the buckets a run touched): `bug`, then `suspect`, each
    with its reason, pattern, repro and its raw buckets counted beneath; then the findings about
    eager (eager-worse) apart; `by-design` and `noise` folded into one line per culprit."""
    return "".join(iter_buckets_markdown(store, run_id=run_id, min_severity=min_severity, new_only=new_only))


def iter_buckets_markdown(store: StoreView, *, run_id: int | None = None, min_severity: str = "noise",
                          new_only: bool = False) -> Iterator[str]:
    """`buckets_markdown`, a line at a time (each ending in a newline): the store files and counts
    its buckets by root cause in SQLite (`Store.root_cause_index`), and each root cause's first
    BUCKETS_NAMED buckets are read as it is written. Memory grows with one root cause's lines,
    never with the store, however many root causes are listed."""
    with store.root_cause_index(run_id=run_id, new_only=new_only) as index:
        for line in root_causes_markdown(index, run_id=run_id, min_severity=min_severity, new_only=new_only,
                                         rechecks=_recheck_tags(store)):
            yield line + "\n"


def root_causes_markdown(index, *, run_id: int | None = None, min_severity: str = "noise",
                         new_only: bool = False, rechecks: dict[int, str] | None = None) -> Iterator[str]:
    """The lines of `buckets_markdown` from a store's root-cause index (`Store.root_cause_index`,
    opened with `new_only`: it hides the root causes that match a known upstream bug and counts them;
    `rechecks`: what `divfuzz recheck` recorded per bucket, shown on the first screen)."""
    floor = Severity(min_severity)
    yield f"# divfuzz root causes{f' of run {run_id}' if run_id else ''}"
    if not index.bucket_total():
        yield ""
        yield "No buckets: every case matched eager (or differed only as expected in fp32)."
        return
    counts, cause_counts = index.bucket_counts(), index.cause_counts()
    n_eager = counts.get(EAGER_WORSE, 0)
    yield ""
    yield ("Severity (buckets): " + ", ".join(f"{counts.get(s, 0)} {s}" for s in COMPILER_ORDER)
           + (f"; {n_eager} eager-worse, about eager (not counted with the compiler's)" if n_eager else "") + ".")
    yield severity_line_of(cause_counts) + "."
    if new_only:
        yield f"--new-only: {index.hidden} root causes that match a known upstream bug are hidden."
    sections = [s for s in ("bug", "suspect") if Severity(s).at_least(floor)] + [EAGER_WORSE]
    if "bug" in sections and index.section("bug")[0]:
        yield from _first_screen(index, rechecks=rechecks)
    # a severity this divfuzz does not know (a newer store): listed, never dropped
    sections += sorted(set(cause_counts) - {*COMPILER_ORDER, EAGER_WORSE})
    for sev in sections:
        n_rc, n_buckets, n_cases = index.section(sev)
        if not n_rc:
            continue
        heading = "eager-worse: findings about eager, not the compiler" if sev == EAGER_WORSE else sev
        yield from ("", f"## {heading}: {n_rc} root cause{'s' if n_rc != 1 else ''}, {n_buckets} buckets, {n_cases:,} cases", "")
        for n, rc in enumerate(index.causes(sev, buckets=BUCKETS_NAMED), start=1):
            yield from _root_cause_item(n, rc)
    folds = [row for sev in ("by-design", "noise") if Severity(sev).at_least(floor)
             for row in index.folds(sev, ids=BUCKETS_NAMED)]
    if folds:
        yield from ("", "## by-design and noise, folded by culprit", "")
        for sev, culprit, n_rc, n, cases, ids in folds:
            shown = ", ".join(str(i) for i in ids[:BUCKETS_NAMED]) + (", ..." if n > BUCKETS_NAMED else "")
            where = "culprit not attributed yet" if culprit in ("-", "") else f"culprit {_plain(culprit)}"
            yield f"- {sev}, {where}: {n} buckets, {cases} cases, {n_rc} root causes (buckets {shown})"


# The first screen folds at most this many bug root causes (a store's first, in the report's order).
FIRST_SCREEN_CAUSES = 1000


def _recheck_tags(store: StoreView) -> dict[int, str]:
    """Each rechecked bucket's words for the first screen (`divfuzz recheck`: "passes in 2.14.1")."""
    by_bucket: dict[int, list] = {}
    for row in (store.rechecks() if hasattr(store, "rechecks") else ()):
        by_bucket.setdefault(row.bucket_id, []).append((row.torch_version, row.outcome, row.detail))
    return {bucket: recheck_tag(rows) for bucket, rows in by_bucket.items()}


def _first_screen(index, rechecks: dict[int, str] | None = None) -> Iterator[str]:
    """The bug lines as the end of `divfuzz fuzz` prints them (`summary_lines`): new first, one per
    part of the compiler (a lowering, a decomposition) and one per known upstream issue, whichever
    op patterns met it; each names its lead bucket, whose root cause is listed below."""
    causes = list(index.causes("bug", limit=FIRST_SCREEN_CAUSES, buckets=1))
    yield from ("", "## First screen: one line per bug, new first (lead bucket, cases, upstream, ops @ culprit)", "")
    for line in summary_lines(causes, width=100_000, max_lines=MAX_BUG_LINES, rechecks=rechecks):
        yield f"- {_plain(line.strip())}"


def _root_cause_item(n: int, rc) -> list[str]:
    """One root cause: a heading with its title, why, its pattern and repro (`* ` items: `- `
    starts the folded by-design and noise lines), then its raw buckets counted and tabled beneath
    (at most BUCKETS_NAMED rows, then how many more)."""
    lead = rc.lead
    lines = [f"### {n}. {md_code(rc.title)} ({_plain(rc.severity)} · {_plain(lead.key.device_type)} · {_plain(rc.known)})", "",
             f"* why {_plain(why_line(lead))}"]
    mechanism = MECHANISMS.get(lead.key.mechanism)
    if mechanism is not None:
        said = "explained" if excuses(lead.key.mechanism) else "mechanism, a defect"
        lines.append(f"* {said}: {_plain(mechanism.title)}; {_plain(mechanism.reason)}")
    if rc.pattern is not None:
        # The lead's own pattern: named as its spec.json, its repro.py and the reason above name its values.
        own = graph_pattern((lead.minimized or {}).get("spec"), own_names=True) or rc.pattern
        lines.append(f"* minimized pattern: {pattern_text(own, spec=f'{lead.folder}/{SPEC_FILE}' if lead.folder else None)}")
    else:
        lines.append("* not minimized yet: a raw bucket (`divfuzz minimize --pending` analyses it)")
    if lead.folder:
        lines.append(f"* repro: {md_code(f'{lead.folder}/{REPRO_FILE}')}")
    lines += [f"* {rc.counted()}:", "",
              "| bucket | severity | kind | dtype | key | minimized | cases | first seen |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for b in rc.buckets[:BUCKETS_NAMED]:
        k = b.key
        lines.append(f"| {b.id} | {_plain(b.severity)} | {_plain(k.kind)}{' ' + _plain(k.detail) if k.detail else ''} | "
                     f"{_plain(k.dtype)} | {md_code(k.ops_text())} | {_minimized_of(b)} | {b.count} | {_when(b.first_seen)} |")
    if rc.bucket_count > BUCKETS_NAMED:
        lines.append(f"| ... | and {rc.bucket_count - BUCKETS_NAMED} more buckets | | | | | | |")
    return lines + [""]


# A root cause's pattern line is read in a terminal: past this, it is cut and points to the spec.
PATTERN_CHARS = 200


def pattern_text(pattern: str, *, spec: str | None = None) -> str:
    """A root cause's minimized graph pattern (`divfuzz.reports.root_causes.graph_pattern`: one
    `vN = op(...)` per node) as a code span of at most PATTERN_CHARS characters: a longer one (a
    9-op pattern read about 600) is cut with '…', counts its ops and names `spec`, where it is whole."""
    if len(pattern) <= PATTERN_CHARS:
        return md_code(pattern)
    ops = pattern.split(" -> ")[0].count(" = ")
    whole = f"; whole in {md_code(spec)}" if spec else ""
    return f"{md_code(pattern[:PATTERN_CHARS - 1] + '…')} ({ops} ops{whole})"


def _minimized_of(bucket) -> str:
    """`ops before -> after, seconds` (or why not) from the stored analysis, else the folder's analysis.json."""
    m = bucket.minimized
    if isinstance(m, dict) and ("ops_before" in m or isinstance(m.get("note"), str)):
        return minimized_words(m)
    return _minimized(bucket.folder)
