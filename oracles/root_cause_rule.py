"""The root-cause rule: which raw buckets are one cause, and which known upstream bug that cause is.

- a bucket joins a root cause only when it was minimized (its stored analysis holds a
  `MinimizeResult` record and a minimized spec that `GraphSpec` loads) and attributed (a culprit
  summary); every other bucket (pending, not minimizable such as a hang, a spec that does not
  load) is a root cause of its own;
- the pattern is the minimized graph's (`divfuzz.generators.pattern.graph_pattern`);
- two minimized buckets are one root cause when their pattern, culprit summary, device type and
  finding kind agree, where the three ULP kinds (bf16/fp16/fp32) count as one kind (they only
  name the case's dtype) and an error kind keeps its exception type;
- a finding about eager (severity "eager-worse": eager grossly further from fp64 than compiled)
  never shares a root cause with the compiler's findings.
A root cause's severity is its most severe bucket's. `cause_parts(bucket, pattern)` is the rule;
the store's index (`divfuzz.fuzzer.store.cause_index`) and the reports
(`divfuzz.reports.root_causes.root_cause_groups`) both file buckets by it. Torch-free: it reads
stored rows only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Iterable

from divfuzz.records.known_bugs import RootCausePattern, default_known_bugs, describe
from divfuzz.records.outcomes import ERROR_KINDS, FindingKind
from divfuzz.records.severity import COMPILER_SEVERITIES, ORDER, Severity

# A finding about eager (rule "eager-gross-worse"), not the compiler: reported apart, never counted.
EAGER_WORSE = Severity.EAGER_WORSE.value
# The compiler's severities, most severe first.
COMPILER_ORDER: tuple[str, ...] = tuple(s.value for s in COMPILER_SEVERITIES)
_DEVICE = 2  # where the device type sits in `RootCause.parts`
ULP_KINDS = frozenset({"bf16-ulp", "fp16-ulp", "fp32-ulp"})
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


def _kind_family(key) -> str:
    if key.kind in ULP_KINDS:
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
