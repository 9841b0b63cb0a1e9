"""Root causes: what a reader sees. Raw buckets are bookkeeping; buckets whose minimized graph
pattern and culprit agree are one root cause (`root_cause_groups`), by the rule of
`divfuzz.oracles.root_cause_rule` (`cause_parts`) over the pattern of
`divfuzz.generators.pattern` (`report`, `report --html`, `diff`, `fuzz`'s summary and the gate
call it). This module groups and words them: the first screen's lines, the folds by culprit and
upstream issue. Torch-free: it reads stored rows only.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Iterable, Sequence

from divfuzz.generators.pattern import graph_pattern, minimized_pattern  # noqa: F401  (graph_pattern: read here by markdown)
from divfuzz.oracles.mechanisms import excuses
from divfuzz.oracles.root_cause_rule import (  # noqa: F401  (the rule's names, read here by the reports and the CLI)
    COMPILER_ORDER, EAGER_WORSE, TYPE_MISMATCH, ULP_KINDS, CauseTotals, RootCause, about_eager, cause_parts, culprit_of,
    known_label, known_of_buckets, ops_of, severity_rank,
)
from divfuzz.records.outcomes import FindingKind
from divfuzz.records.culprit import names_one_part


def bucket_cause(bucket) -> tuple[tuple[str, ...], str | None]:
    """One bucket as `root_cause_groups` folds it: its `cause_parts` and its minimized pattern
    (None when it was not minimized and attributed). A store's report index
    (`divfuzz.fuzzer.store.cause_index`) files every bucket by the same two steps, a page of buckets
    at a time."""
    pattern = minimized_pattern(bucket)
    return cause_parts(bucket, pattern), pattern


def root_cause_groups(buckets: Iterable) -> list[RootCause]:
    """Fold raw buckets (`Store.buckets()` rows, or anything with their fields) into root causes,
    by the rule of the module docstring. Ordered as a reader reads them: the compiler's root
    causes by severity (bug first), then eager-worse ones, each by cases (most first), then by
    the lead bucket's id."""
    groups: dict[tuple[str, ...], list] = {}
    patterns: dict[tuple[str, ...], str | None] = {}
    for b in buckets:
        parts, pattern = bucket_cause(b)
        groups.setdefault(parts, []).append(b)
        patterns.setdefault(parts, pattern)
    causes = []
    for parts, members in groups.items():
        members.sort(key=lambda b: (severity_rank(b.severity), -b.count, b.id))
        lead = members[0]
        causes.append(RootCause(parts=parts, severity=lead.severity, culprit=culprit_of(lead),
                                pattern=patterns[parts], buckets=tuple(members)))
    causes.sort(key=lambda rc: (rc.about_eager, severity_rank(rc.severity), -rc.cases, rc.lead.id))
    return causes


def by_severity(causes: Sequence[RootCause]) -> dict[str, list[RootCause]]:
    """Root causes by their severity value, in `root_cause_groups`' order within each."""
    out: dict[str, list[RootCause]] = {}
    for rc in causes:
        out.setdefault(rc.severity, []).append(rc)
    return out


def fold_by_culprit(causes: Sequence[RootCause]) -> list[tuple[str, str, int, int, int, list[int]]]:
    """(severity, culprit, root causes, buckets, cases, bucket ids) per (severity, culprit): how
    by-design and noise read. by-design first, then by buckets (most first), then culprit."""
    groups: dict[tuple[str, str], list[RootCause]] = {}
    for rc in causes:
        groups.setdefault((rc.severity, rc.culprit), []).append(rc)
    rows = []
    for (sev, culprit), rcs in groups.items():
        ids = sorted(b.id for rc in rcs for b in rc.buckets)
        rows.append((sev, culprit, len(rcs), sum(rc.bucket_count for rc in rcs), sum(rc.cases for rc in rcs), ids))
    return sorted(rows, key=lambda r: (r[0] != "by-design", -r[3], r[1]))


def severity_line(causes: Sequence[RootCause]) -> str:
    """`Root causes: 1 bug, 3 suspect, 2 by-design, 0 noise`, plus the eager-worse ones apart."""
    return severity_line_of(Counter(rc.severity for rc in causes))


def severity_line_of(count: Counter) -> str:
    """`severity_line` of root causes counted by severity (a store's index counts them)."""
    text = "Root causes: " + ", ".join(f"{count.get(s, 0)} {s}" for s in COMPILER_ORDER)
    if count.get(EAGER_WORSE):
        text += f"; {count[EAGER_WORSE]} eager-worse, about eager"
    return text


def by_culprit(causes: Sequence[RootCause]) -> list[tuple[RootCause, ...]]:
    """`causes` folded where their culprit names one part of the compiler (`names_one_part`, read
    from the lead bucket's stored culprit fields: a lowering, a decomposition, a graph pass), one
    tuple per part (by its summary); every other root cause alone. The largest by cases first,
    then in `causes`' order (a stable sort). A maintainer mends a lowering once, whichever op
    patterns met it: on the H100 (k5), 11 of 100 bug root causes were Inductor's lowering of div,
    met through fmod, remainder and div."""
    groups: dict[str, list[RootCause]] = {}
    for i, rc in enumerate(causes):
        groups.setdefault(rc.culprit if names_one_part(rc.lead.culprit) else _typing_part(rc) or f"#{i}", []).append(rc)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: -sum(rc.cases for rc in g))


# Finding kinds of a numeric divergence: a raw bucket of one is a candidate until its analysis
# minimizes and attributes it (an error, a hang or a changed type reads as it is).
_NUMERIC_KINDS = ULP_KINDS | {FindingKind.NAN_INF.value, FindingKind.INT_GROSS.value, FindingKind.INT_BOUNDARY.value}


def awaiting_analysis(rc: RootCause) -> bool:
    """A numeric finding's raw bucket whose analysis has not run: not minimized, no culprit."""
    return not rc.minimized and rc.culprit == "-" and rc.lead.key.kind in _NUMERIC_KINDS


def _typing_part(rc: RootCause) -> str | None:
    """For a root cause whose finding is a changed output dtype or shape, attributed to a stage:
    the part of the compiler that types the graph at that stage, under that autocast and for that
    pass (forward or backward), from the lead bucket's key fields. Which op met it is the case, not
    the cause: on the H100 (seed 163) nearest and bilinear interpolation under bfloat16 autocast
    came back float32 in eager and bfloat16 compiled, both from aot_eager, one typing rule lost.
    None for any other root cause, or one with no stage."""
    key = rc.lead.key
    if key.kind != TYPE_MISMATCH or key.culprit is None or not key.culprit.stage:
        return None
    return (f"{key.kind} {key.device_type} {key.culprit.stage} autocast={key.autocast or '-'} "
            f"{'backward' if key.backward else 'forward'}")


def by_upstream(groups: Sequence[tuple[RootCause, ...]]) -> list[tuple[RootCause, ...]]:
    """`groups` (`by_culprit`'s) with the groups whose first known upstream issue is one folded
    into one, in the order of their first: a maintainer reads one line per filed bug, whichever
    parts of the compiler or op patterns its root causes named. A part of the compiler whose root
    causes match several issues joins its first one's line (H100 seed 211: Inductor's lowering of
    eq, met by where_scalar alone and before an E8M0 encoding, matched 173987 and 178045, and read
    as a second line of 173987). New groups stay as they are."""
    merged: dict[str, list[RootCause]] = {}
    for i, group in enumerate(groups):
        upstream = _upstream(group).removesuffix("+").removeprefix("possibly ")
        key = upstream if upstream != "new" else f"#{i}"
        merged.setdefault(key, []).extend(group)
    return [tuple(g) for g in merged.values()]


def upstream_of(known: str) -> str:
    """A root cause's `known` label as the first screen says it: `pytorch#N` for a match
    (`KnownMatch.describe`'s "known: "), `possibly pytorch#N` for a low-confidence one (its culprit
    names something else: the pattern fits, the cause may not), else `new`."""
    word, _, rest = known.partition(": ")
    issue = rest.split(" ", 1)[0]
    if word == "known" and issue:
        return issue
    if word == "possibly" and issue:
        return f"possibly {issue}"
    return "new"


def _upstream(group: Sequence[RootCause]) -> str:
    """The first upstream issue among a group's root causes (`upstream_of`: `pytorch#N`, or
    `possibly pytorch#N` when no root cause of the group matches it with more confidence), then `+`
    when there are more, else `new`."""
    labels = [upstream_of(rc.known) for rc in group]
    issues = list(dict.fromkeys(label.removeprefix("possibly ") for label in labels if label != "new"))
    if not issues:
        return "new"
    first = issues[0] if issues[0] in labels else f"possibly {issues[0]}"
    return first + ("+" if len(issues) > 1 else "")


def _upstream_order(group: Sequence[RootCause]) -> int:
    """New first (what nobody has filed), then the possible matches, then the known ones."""
    upstream = _upstream(group)
    return 0 if upstream == "new" else 1 if upstream.startswith("possibly ") else 2


# A line of several root causes names this many of their op patterns, then how many more.
PATTERNS_NAMED = 6


@dataclass(frozen=True)
class BugLine:
    """One line of the first screen's bug list, before it is fitted to a width: its text, the lead
    bucket's folder (None where the store names none) and how many root causes it holds."""

    text: str
    folder: str | None
    root_causes: int


def bug_lines(causes: Sequence[RootCause], *, severity: str = "bug", new_in_run: int | None = None,
              rechecks: Mapping[int, str] | None = None) -> list[BugLine]:
    """One `BugLine` per culprit of `severity`'s root causes (`by_culprit`: one for each part of
    the compiler, one for each other root cause; `by_upstream`: one per known upstream issue), new
    first, then possible matches, then known ones. A root cause alone reads
    `#6 1,250 cases (5 buckets, new this run)  pytorch#197895  div+floor @ inductor lowering of aten.div`
    (lead bucket, cases, its buckets when more than one and `new this run` when one of them was
    first seen in run `new_in_run`, the upstream issue (`upstream_of`) or `new`, title); a part met
    by several reads `#6 1,400 cases (new this run)  pytorch#197895+  inductor lowering of aten.div
    (3): div+floor, fmod, remainder` (the lead of its largest root cause, the first upstream issue
    and `+` for more, the count of its root causes and their op patterns, largest first: at most
    PATTERNS_NAMED, then `and N more`). A lead bucket that `divfuzz recheck` ran under another
    torch ends with what that gave, from `rechecks` (bucket id -> "passes in 2.14.1"). Last, on
    one line, the new numeric findings whose analysis has not run."""
    of_severity = [rc for rc in causes if rc.severity == severity]
    awaiting = tuple(rc for rc in of_severity if awaiting_analysis(rc) and rc.is_new)
    groups = by_upstream(by_culprit([rc for rc in of_severity if not any(rc is a for a in awaiting)]))
    groups.sort(key=_upstream_order)  # stable otherwise
    # Then the new numeric findings whose analysis has not run (found as the budget ended):
    # candidates with no minimal graph and no culprit, which no reader can act on yet (one that
    # matches a known upstream issue joins its line).
    if awaiting:
        groups.append(awaiting)
    lines = []
    for group in groups:
        lead = group[0]
        cases = sum(rc.cases for rc in group)
        new = new_in_run is not None and any(b.first_run_id == new_in_run for rc in group for b in rc.buckets)
        notes = ([f"{lead.bucket_count} buckets"] if len(group) == 1 and lead.bucket_count > 1 else []) + (["new this run"] if new else [])
        counted = f"#{lead.lead.id} {cases:,} case{'s' if cases != 1 else ''}" + (f" ({', '.join(notes)})" if notes else "")
        if group is awaiting:
            text = (f"{counted}  {len(group)} not analysed yet (the budget ended first; divfuzz minimize --pending "
                    f"finishes them): {', '.join(ops_of(rc.lead) for rc in group)}")
            tagged = [f"#{rc.lead.id} {rechecks[rc.lead.id]}" for rc in group if rechecks and rechecks.get(rc.lead.id)]
            text += f"  [{'; '.join(tagged)}]" if tagged else ""
        elif len(group) == 1:
            text = f"{counted}  {_upstream(group)}  {lead.title}"
            if rechecks and rechecks.get(lead.lead.id):
                text += f"  [{rechecks[lead.lead.id]}]"
        else:
            every = list(dict.fromkeys(ops_of(rc.lead) for rc in group))
            patterns = ", ".join(every[:PATTERNS_NAMED]) + (f" and {len(every) - PATTERNS_NAMED} more" if len(every) > PATTERNS_NAMED else "")
            culprits = {rc.culprit for rc in group}
            head = lead.culprit if len(culprits) == 1 else f"{len(culprits)} culprits"
            if _typing_part(lead) is not None and all(_typing_part(rc) == _typing_part(lead) for rc in group):
                head = f"output dtype or shape changed @ {head}"
            text = f"{counted}  {_upstream(group)}  {head} ({len(group)}): {patterns}"
        folder = getattr(lead.lead, "folder", None)
        lines.append(BugLine(text, str(folder) if folder and group is not awaiting else None, len(group)))
    return lines


def summary_lines(causes: Sequence[RootCause], *, width: int = 80, max_lines: int = 15,
                  severity: str = "bug", new_in_run: int | None = None, rechecks: Mapping[int, str] | None = None) -> list[str]:
    """`bug_lines` one line each, indented by two, at most `width` columns (cut with '…'), at most
    `max_lines` lines in all, the last of them `... and N more` (root causes) when they do not all
    fit: the report's first screen, whose lines are whole at its width."""
    entries = bug_lines(causes, severity=severity, new_in_run=new_in_run, rechecks=rechecks)
    shown = entries if len(entries) <= max_lines else entries[: max(0, max_lines - 1)]
    lines = [clip(f"  {entry.text}", width) for entry in shown]
    left = sum(e.root_causes for e in entries) - sum(e.root_causes for e in shown)
    if left:
        lines.append(clip(f"  ... and {left} more {severity} root causes", width))
    return lines


# The end of `divfuzz fuzz` fits one terminal screen of this size.
SCREEN_WIDTH, SCREEN_HEIGHT = 80, 24
MAX_BUG_LINES = 15


def screen_summary(buckets: Sequence, *, head: Sequence[str], store_dir: str, run_id: int | None = None,
                   reserve: int = 1, width: int = SCREEN_WIDTH, height: int = SCREEN_HEIGHT,
                   rest: str | None = None) -> list[str]:
    """The end of a campaign as at most `height - reserve` lines of at most `width` columns (the
    caller prints `reserve` more: the path of report.html): `head` (the run's own lines), the
    bucket and root-cause counts by severity, the eager-worse count apart, each bug line
    (`bug_lines`) wrapped whole, never cut, with its lead bucket's folder on a line of its own, as
    many as fit (at most MAX_BUG_LINES, then `... and N more`; the first whatever its length, so
    a narrow terminal or a long path may take more lines), the explained mechanisms, and the
    command (`rest`, default `divfuzz report --out STORE_DIR`) that prints every root cause."""
    causes = root_cause_groups(buckets)
    b_count = Counter(b.severity for b in buckets)
    rc_count = Counter(rc.severity for rc in causes)
    lines = [clip(line, width) for line in head]
    lines.append(clip("buckets:     " + ", ".join(f"{b_count.get(s, 0)} {s}" for s in COMPILER_ORDER), width))
    lines.append(clip("root causes: " + ", ".join(f"{rc_count.get(s, 0)} {s}" for s in COMPILER_ORDER), width))
    if b_count.get(EAGER_WORSE):
        lines.append(clip(f"about eager, not counted above: {rc_count[EAGER_WORSE]} eager-worse root causes "
                          f"({b_count[EAGER_WORSE]} buckets)", width))
    tail = wrap(f"every root cause, why and repro: {rest or f'divfuzz report --out {store_dir}'}", width)
    explained = mechanism_lines(causes, width=width)
    if rc_count.get("bug", 0):
        lines += wrap("bug root causes, new first (bucket, cases, upstream, ops @ culprit, folder):", width)
        room = height - reserve - len(lines) - len(tail) - min(len(explained), 4)
        lines += _fitted_bug_lines(bug_lines(causes, new_in_run=run_id), width=width, room=max(2, room), store_dir=store_dir)
    else:
        lines.append("no bug root cause")
    room = height - reserve - len(lines) - len(tail)
    if explained and room >= 2:
        lines += explained[:room] if len(explained) <= room else explained[:room - 1] + [clip(f"  ... and {len(explained) - room + 1} more", width)]
    return lines + tail


def _fitted_bug_lines(entries: Sequence[BugLine], *, width: int, room: int, store_dir: str) -> list[str]:
    """`entries` wrapped whole (indented by two, continued by four) with `folder: PATH` beneath
    each (`_folder_lines`, under the campaign folder as the user named it, `store_dir`), in at most `room` lines and
    MAX_BUG_LINES entries; the last line `... and N more bug root causes` when some do not fit. The
    first entry is shown whatever its length."""
    lines: list[str] = []
    shown = 0
    for i, entry in enumerate(entries[:MAX_BUG_LINES]):
        block = wrap(f"  {entry.text}", width, indent="    ") + (_folder_lines(_under(entry.folder, store_dir), width)
                                                                   if entry.folder else [])
        last = i == len(entries) - 1
        if shown and len(lines) + len(block) + (0 if last else 1) > room:
            break
        lines += block
        shown += 1
    left = sum(e.root_causes for e in entries[shown:])
    if left:
        lines.append(clip(f"  ... and {left} more bug root causes", width))
    return lines


def _folder_lines(folder: str, width: int) -> list[str]:
    """`    folder: PATH`; a path too long for that alone on its line (a bucket folder's name is up
    to 65 characters), whole where it fits so, split only where it does not."""
    for line in (f"    folder: {folder}", f"    {folder}"):
        if len(line) <= width:
            return [line]
    return wrap(f"    folder: {folder}", width, indent="      ")


def _under(folder: str, store_dir: str) -> str:
    """`folder` (a store holds it absolute) as a path under `store_dir` when it lies there, as the
    user named that folder (`divfuzz-out/buckets/0006-...`), else as stored."""
    root = os.path.abspath(store_dir)
    absolute = os.path.abspath(folder)
    if absolute.startswith(root + os.sep):
        return os.path.join(store_dir, os.path.relpath(absolute, root))
    return folder


def wrap(text: str, width: int, *, indent: str = "  ") -> list[str]:
    """`text` on lines of at most `width` columns (20 at least), the ones after the first indented
    by `indent`; a word longer than a line (a path) is split rather than let past the edge."""
    return textwrap.wrap(text.replace("\n", " "), width=max(20, width), subsequent_indent=indent, break_on_hyphens=False) or [""]


def mechanism_lines(causes: Sequence[RootCause], *, width: int = 80) -> list[str]:
    """One line per mechanism that explains findings without a compiler defect (`divfuzz.oracles.mechanisms`),
    most cases first: its severity, buckets, cases and the ops it met, under a heading; [] when none.
    What each mechanism is and why it has its severity: `divfuzz.oracles.mechanisms.MECHANISMS`,
    which `divfuzz report` prints."""
    groups: dict[str, list[RootCause]] = {}
    for rc in causes:
        if rc.lead.key.mechanism and excuses(rc.lead.key.mechanism):
            groups.setdefault(rc.lead.key.mechanism, []).append(rc)
    if not groups:
        return []
    lines = [clip("explained, not compiler defects (severity mechanism: buckets, cases: ops):", width)]
    for mechanism, rcs in sorted(groups.items(), key=lambda kv: -sum(rc.cases for rc in kv[1])):
        ops = ", ".join(dict.fromkeys(op for rc in rcs for b in rc.buckets for op in b.key.ops))
        cases = sum(rc.cases for rc in rcs)
        buckets = sum(len(rc.buckets) for rc in rcs)
        lines.append(clip(f"  {rcs[0].severity} {mechanism}: {buckets} bucket{'s' if buckets != 1 else ''}, "
                          f"{cases:,} case{'s' if cases != 1 else ''}: {ops}", width))
    return lines


def clip(text: str, width: int) -> str:
    """`text` on one line of at most `width` columns: cut with '…' when longer."""
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
