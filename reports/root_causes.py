"""Root causes: what a reader sees. Raw buckets are bookkeeping; buckets whose minimized graph
pattern and culprit agree are one root cause (`root_cause_groups`).

The rule, in one place (`report`, `report --html`, `diff`, `fuzz`'s summary and the gate call it):
- a bucket joins a root cause only when it was minimized (its stored analysis holds a
  `MinimizeResult` record and a minimized spec that `GraphSpec` loads) and attributed (a culprit
  summary); every other bucket (pending, not minimizable such as a hang, a spec that does not
  load) is a root cause of its own;
- the pattern is the minimized graph's ops and their wiring: each node's op, which inputs or
  earlier nodes it reads (renamed by position), its categorical parameters (strings, flags and
  None: a rounding mode, a comparison, `affine`, a cast's target), the outputs, each input's role
  (data, or a parameter's initialisation, and whether it takes a gradient), and whether autocast
  and backward are on. Tensor sizes, dtypes of inputs and nodes, numeric parameters (eps, a
  divisor, a feature count), the input recipe and its seed are left out: they are the case, not
  the cause;
- two minimized buckets are one root cause when their pattern, culprit summary, device type and
  finding kind agree, where the three ULP kinds (bf16/fp16/fp32) count as one kind (they only
  name the case's dtype) and an error kind keeps its exception type;
- a finding about eager (severity "eager-worse": eager grossly further from fp64 than compiled)
  never shares a root cause with the compiler's findings.
A root cause's severity is its most severe bucket's. Torch-free: it reads stored rows only.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from dataclasses import dataclass, replace
from typing import Mapping, Any, Iterable, Sequence

from divfuzz.records.errors import DivfuzzError
from divfuzz.records.outcomes import ERROR_KINDS, FindingKind
from divfuzz.records.severity import COMPILER_SEVERITIES, ORDER, Severity
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.culprit import names_one_part
from divfuzz.records.known_bugs import default_known_bugs, describe, RootCausePattern
from divfuzz.oracles.mechanisms import excuses

# A finding about eager (rule "eager-gross-worse"), not the compiler: reported apart, never counted.
EAGER_WORSE = Severity.EAGER_WORSE.value
# The compiler's severities, most severe first.
COMPILER_ORDER: tuple[str, ...] = tuple(s.value for s in COMPILER_SEVERITIES)
_DEVICE = 2  # where the device type sits in `RootCause.parts`
_ULP_KINDS = frozenset({"bf16-ulp", "fp16-ulp", "fp32-ulp"})
_ERROR_KINDS = frozenset(kind.value for kind in ERROR_KINDS)
TYPE_MISMATCH = FindingKind.TYPE_MISMATCH.value


def about_eager(severity: str) -> bool:
    """A finding about eager rather than the compiler: reported apart, never counted with them."""
    return severity == EAGER_WORSE


def severity_rank(severity: str) -> int:
    """`Severity.rank` (0 for bug; eager-worse after the compiler's), and a value this divfuzz does
    not know (a newer store's) after all of them."""
    known = {s.value: s.rank for s in ORDER}
    return known.get(severity, len(ORDER))


def culprit_of(bucket) -> str:
    """A bucket's culprit: attribution's summary, else its key's culprit fields described, else '-'."""
    summary = (bucket.culprit or {}).get("summary")
    if isinstance(summary, str) and summary:
        return summary
    return bucket.key.culprit.describe() if bucket.key.culprit is not None else "-"


def ops_of(bucket) -> str:
    """The graph part of a bucket's key: its ops and modes, or where an error was raised."""
    return bucket.key.ops_text()


def graph_pattern(spec_dict: Any, *, own_names: bool = False) -> str | None:
    """The canonical pattern of a stored spec (see the module docstring), as readable text such as
    `v1 = div(x0; mode=floor) -> v1`, or None when the spec does not load. With `own_names`, the
    same text under the spec's own value names (what a bucket's spec.json, repro.py and severity
    reason call them), for a reader; the canonical names are for grouping."""
    try:
        spec = GraphSpec.from_dict(spec_dict, source="minimized spec")
    except (DivfuzzError, ValueError, KeyError, TypeError, AttributeError):
        return None
    names: dict[str, str] = {}
    for i, t in enumerate(spec.inputs):
        names[t.name] = t.name if own_names else f"x{i}"
    lines = []
    for j, n in enumerate(spec.nodes, start=1):
        names[n.name] = n.name if own_names else f"v{j}"
        args = ", ".join(names.get(a, "?") for a in n.inputs)
        params = ", ".join(f"{k}={v}" for k, v in sorted(n.params) if v is None or isinstance(v, (str, bool)))
        lines.append(f"{names[n.name]} = {n.op}({args}{'; ' + params if params else ''})")
    roles = [f"{names[t.name]}:{t.init}{'+grad' if t.requires_grad else ''}" for t in spec.inputs
             if t.init != "data" or t.requires_grad]
    modes = ["autocast"] * bool(spec.autocast) + ["backward"] * spec.backward
    tail = " -> " + ", ".join(names.get(o, "?") for o in spec.outputs)
    extra = (f" [{', '.join(roles + modes)}]" if roles or modes else "")
    return "; ".join(lines) + tail + extra


def minimized_pattern(bucket) -> str | None:
    """The pattern of a bucket that was minimized and attributed, else None (it stays alone)."""
    m = bucket.minimized
    if not isinstance(m, dict) or "ops_before" not in m or not (bucket.culprit or {}).get("summary"):
        return None
    return graph_pattern(m.get("spec"))


def bucket_cause(bucket) -> tuple[tuple[str, ...], str | None]:
    """One bucket as `root_cause_groups` folds it: its `cause_parts` and its minimized pattern
    (None when it was not minimized and attributed). A store's report index
    (`divfuzz.fuzzer.store.cause_index`) files every bucket by this, a page of buckets at a time."""
    pattern = minimized_pattern(bucket)
    return cause_parts(bucket, pattern), pattern


def _kind_family(key) -> str:
    if key.kind in _ULP_KINDS:
        return "float-ulp"
    return f"{key.kind} {key.detail}" if key.detail else key.kind


def _culprit_fields(key) -> str:
    return key.culprit.describe() + repr(sorted(key.culprit.to_dict().items())) if key.culprit is not None else "-"


def cause_parts(bucket, pattern: str | None) -> tuple[str, ...]:
    """What makes a bucket one root cause with others (the module docstring's rule), from its
    key's fields: an explained finding by its mechanism; a compiler error by its exception, the
    masked site and the culprit; a minimized finding by its pattern and culprit; anything else
    alone, by its whole key. The device type is always `parts[_DEVICE]`."""
    k = bucket.key
    realm = "eager" if about_eager(bucket.severity) else "compiler"
    if k.mechanism:
        return ("explained", realm, k.device_type, k.mechanism)
    if k.kind in _ERROR_KINDS and k.culprit is not None and pattern is not None:
        return ("error", realm, k.device_type, k.kind, k.detail, k.site, _culprit_fields(k))
    if pattern is None:
        return ("raw", realm, k.device_type, k.kind, k.detail, k.dtype, k.identity())
    return ("minimized", realm, k.device_type, _kind_family(k), pattern, _culprit_fields(k))


@dataclass(frozen=True)
class CauseTotals:
    """What a root cause counts over all its buckets, when `RootCause.buckets` holds only the
    first of them (a store's report index reads no more buckets than a page shows)."""

    buckets: int
    cases: int
    severities: tuple[tuple[str, int], ...]  # (severity, buckets), most severe first
    known: str  # `known_label` over every bucket


@dataclass(frozen=True)
class RootCause:
    """Raw buckets that are one cause: their pattern, culprit, and the buckets most severe first."""

    parts: tuple[str, ...]  # what makes it one cause; the device type is parts[DEVICE]
    severity: str  # the most severe of its buckets' severities
    culprit: str
    pattern: str | None  # the minimized graph's pattern; None: not minimized (one bucket)
    buckets: tuple  # most severe first, then most cases, then oldest; only the first of them with `totals`
    totals: CauseTotals | None = None  # None: `buckets` holds every bucket, and the counts are theirs

    @property
    def lead(self):
        """The bucket shown for the root cause: the most severe, with the most cases."""
        return self.buckets[0]

    @property
    def bucket_count(self) -> int:
        """How many raw buckets it has (`buckets` may hold only the first of them: `totals`)."""
        return self.totals.buckets if self.totals is not None else len(self.buckets)

    @property
    def cases(self) -> int:
        return self.totals.cases if self.totals is not None else sum(b.count for b in self.buckets)

    @property
    def minimized(self) -> bool:
        return self.pattern is not None

    @property
    def about_eager(self) -> bool:
        return about_eager(self.severity)

    @property
    def title(self) -> str:
        """One line: the lead's ops and the culprit (`div @ inductor lowering of aten.div`), or
        `... (not attributed yet)` for a raw bucket whose analysis is pending."""
        if self.culprit == "-":
            return f"{ops_of(self.lead)} (not attributed yet)"
        return f"{ops_of(self.lead)} @ {self.culprit}"

    def severity_counts(self) -> list[tuple[str, int]]:
        """(severity, buckets) of its raw buckets, most severe first."""
        if self.totals is not None:
            return list(self.totals.severities)
        counts = Counter(b.severity for b in self.buckets)
        return sorted(counts.items(), key=lambda kv: severity_rank(kv[0]))

    def counted(self) -> str:
        """Its raw buckets counted: `5 buckets (4 bug, 1 suspect), 1,250 cases`."""
        n = self.bucket_count
        sev = ", ".join(f"{c} {s}" for s, c in self.severity_counts())
        return f"{n} bucket{'s' if n != 1 else ''} ({sev}), {self.cases:,} case{'s' if self.cases != 1 else ''}"

    @property
    def known(self) -> str:
        """"known: pytorch#N (state)" when the lead's pattern matches an entry of the curated
        upstream file (`divfuzz.records.known_bugs`, matched by pattern: ops, dtypes, backward, rule),
        "possibly: pytorch#N (state)" when the match is of low confidence (the culprits name
        different things), else "new". A finding about eager is never matched."""
        return self.totals.known if self.totals is not None else known_label(self)

    @property
    def is_new(self) -> bool:
        return self.known == "new"

    def to_dict(self) -> dict[str, Any]:
        """As JSON for machines (the gate's `--json`): its title, severity, culprit, pattern,
        whether it is a known upstream bug, cases, and its raw buckets most severe first."""
        return {"root_cause": self.title, "severity": self.severity, "culprit": self.culprit, "pattern": self.pattern,
                "known": self.known, "cases": self.cases,
                "buckets": [{"id": b.id, "key": str(b.key), "severity": b.severity, "cases": b.count} for b in self.buckets]}

    def identity(self, *, match_device: bool = True) -> str:
        """Equal for the same root cause in any store (`diff` matches on it); without
        `match_device` the device type is left out (`diff --any-device`)."""
        parts = self.parts if match_device else (*self.parts[:_DEVICE], "any device", *self.parts[_DEVICE + 1:])
        return " \u00b7 ".join(parts)


def _rule_of(bucket) -> str:
    """The severity rule a bucket was rated by, or its finding kind for a compiler failure."""
    rule = (bucket.severity_reason or {}).get("rule") if isinstance(bucket.severity_reason, dict) else None
    return rule if isinstance(rule, str) and rule not in ("-", "") else bucket.key.kind


def known_label(rc: RootCause, known=None) -> str:
    """`RootCause.known`, against `known` (a `divfuzz.records.known_bugs.KnownBugs`; the committed file
    when None): the first of its buckets (most severe first) that matches an entry, each by its
    minimized spec when it has one, else by its bucket key."""
    return known_of_buckets(rc.buckets, culprit=rc.culprit, severity=rc.severity, known=known)


def known_of_buckets(buckets: Iterable, *, culprit: str, severity: str, known=None,
                     torch_versions: dict | None = None) -> str:
    """`known_label` of a root cause of `severity` and `culprit` whose buckets (most severe first)
    are `buckets`: any iterable, read only until one matches (a store's index streams them).
    `torch_versions` maps a run id to the torch it ran: a match is described on the torch of the
    bucket's first run (a fix already in it reads "possibly": `KnownMatch.describe`)."""
    if about_eager(severity):
        return "new"
    known = known or default_known_bugs()
    for b in buckets:
        pattern = _known_pattern(b, culprit)
        match = known.match(pattern) if pattern is not None else None
        if match is not None:
            return describe(match, (torch_versions or {}).get(getattr(b, "first_run_id", None)))
    return "new"


def _known_pattern(bucket, culprit: str):
    """A bucket as `divfuzz.records.known_bugs` matches it, or None when its stored data does not say."""
    rule = _rule_of(bucket)
    try:
        m = bucket.minimized if isinstance(bucket.minimized, dict) else {}
        if isinstance(m.get("spec"), dict):
            return RootCausePattern.from_spec_dict(m["spec"], rule=rule, culprit=None if culprit == "-" else culprit,
                                                   device_type=bucket.key.device_type, output_dtype=bucket.key.dtype,
                                                   mechanism=bucket.key.mechanism, site=bucket.key.site)
        pattern = RootCausePattern.from_bucket(bucket.key, rule=rule)
        # A raw bucket's key may carry no culprit where its root cause has one (attribution's
        # summary): matched without it, a match whose culprit names something else read as
        # "known" here and "low confidence" in the bucket's issue.md (issue 57).
        return replace(pattern, culprit=culprit) if pattern.culprit is None and culprit not in ("-", "") else pattern
    except (ValueError, TypeError, KeyError):
        return None


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
_NUMERIC_KINDS = _ULP_KINDS | {FindingKind.NAN_INF.value, FindingKind.INT_GROSS.value, FindingKind.INT_BOUNDARY.value}


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
