"""The store's rows as named, frozen values, and the one decoder of each table's row.

A decoder reads a `sqlite3.Row` by column name, never by position, and checks every field it
reads as it decodes it (`Fields`): a store is data from anyone, so a field that is not what divfuzz
writes there (a list where an object belongs, text in a time, a verdict that does not decode, a
number past SQLite's integers) raises `DamagedRow` naming the table, the row and the field, which
`Store` reports as StoreError naming the file too (exit 2; no log is written, the store is left as
it is). Nothing above the store meets an unchecked field.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Any, NamedTuple

from divfuzz.records.buckets import BucketKey
from divfuzz.records.culprit import Culprit
from divfuzz.records.errors import StoreError
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Verdict

RUN_STATUSES = ("running", "finished", "interrupted", "failed")
# What a bug folder's issue.py gave under another torch (`divfuzz.reports.issue_check.ScriptOutcome`'s values).
RECHECK_OUTCOMES = ("still fails", "passes", "errors")
# A torch version as `torch.__version__` prints it, as `divfuzz recheck` stores it.
TORCH_VERSION_TEXT = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,63}")


class DamagedRow(ValueError):
    """A stored field that is not what divfuzz writes there: its table, row (its id or key) and field."""

    def __init__(self, table: str, row: Any, field: str, why: str):
        self.table, self.row, self.field, self.why = table, row, field, why
        shown = row if isinstance(row, int) else repr(f"{row!s:.120}")  # an id, or a key's text
        super().__init__(f"table {table}, row {shown}, field {field}: {why}")


def _shown(value: Any) -> str:
    return f"{value!r:.80}"


class Fields:
    """One stored row's fields, each checked as it is read: `DamagedRow` names the first bad one."""

    def __init__(self, r: sqlite3.Row, table: str, id_column: str = "id"):
        self.r, self.table = r, table
        self.row = r[id_column] if id_column in r.keys() else "?"

    def bad(self, field: str, why: str) -> DamagedRow:
        return DamagedRow(self.table, self.row, field, why)

    def int(self, field: str, *, null: bool = False, low: int | None = None) -> int | None:
        v = self.r[field]
        if v is None and null:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or (low is not None and v < low):
            raise self.bad(field, f"expected an integer{f' >= {low}' if low is not None else ''} but got {_shown(v)}")
        return v

    def real(self, field: str, *, null: bool = False) -> float | None:
        v = self.r[field]
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.bad(field, f"expected a finite number but got {_shown(v)}")
        return float(v)

    def text(self, field: str, *, null: bool = False, choices: tuple[str, ...] | None = None,
             most: int | None = None) -> str | None:
        """The field's text (one of `choices`; at most `most` characters); None for SQL NULL with `null`."""
        v = self.r[field]
        if v is None and null:
            return None
        if not isinstance(v, str) or (choices is not None and v not in choices):
            wanted = f"one of {', '.join(choices)}" if choices is not None else "text"
            raise self.bad(field, f"expected {wanted} but got {_shown(v)}")
        if most is not None and len(v) > most:
            raise self.bad(field, f"expected text of at most {most} characters but got {len(v)}")
        return v

    def json(self, field: str, kind: type = dict, *, null: bool = False) -> Any:
        """The field's JSON, which must be a `kind` (an object, a list); None for SQL NULL with `null`."""
        text = self.r[field]
        if text is None and null:
            return None
        if not isinstance(text, (str, bytes)):
            raise self.bad(field, f"expected JSON text but got {_shown(text)}")
        try:
            value = json.loads(text)
        except RecursionError:
            raise self.bad(field, "its JSON is nested deeper than Python reads") from None
        except ValueError as e:
            raise self.bad(field, f"not JSON ({e!s:.80})") from None
        if not isinstance(value, kind):
            raise self.bad(field, f"expected a JSON {'object' if kind is dict else kind.__name__} but got {_shown(value)}")
        return value

    def key(self, field: str = "key_json") -> BucketKey:
        try:
            return BucketKey.from_dict(self.json(field), where="its key")
        except StoreError as e:
            raise self.bad(field, str(e)) from None

    def verdict(self, field: str = "verdict_json") -> dict:
        """The verdict's JSON object, checked to decode as a `Verdict` (kept as the dict it is)."""
        d = self.json(field)
        try:
            Verdict.from_dict(d)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            raise self.bad(field, f"not a verdict ({type(e).__name__}: {e!s:.80})") from None
        return d

    def spec_text(self, field: str = "spec_json") -> str:
        """The spec's JSON text, checked to have a spec's shape (an object; its inputs and nodes
        lists of objects, its outputs a list of names): what reports count ops from. A spec is
        built (and checked whole) by `divfuzz.generators.validate.load_spec` where it runs."""
        spec = self.json(field)
        for part, item in (("inputs", dict), ("nodes", dict), ("outputs", str)):
            value = spec.get(part, [])
            if not isinstance(value, list) or not all(isinstance(x, item) for x in value):
                raise self.bad(field, f"{part} must be a list of {'objects' if item is dict else 'names'} but got {_shown(value)}")
        for node in spec.get("nodes", []):
            if not isinstance(node.get("op", ""), str):
                raise self.bad(field, f"a node's op must be a name but got {_shown(node.get('op'))}")
        return self.r[field]

    def severity_reason(self, field: str = "severity_json") -> dict | None:
        d = self.json(field, null=True)
        if d is None:
            return None
        try:
            SeverityReason.from_dict(d)
        except (ValueError, TypeError, KeyError) as e:
            raise self.bad(field, f"not a severity reason ({type(e).__name__}: {e!s:.80})") from None
        return d

    def culprit(self, field: str = "culprit_json") -> dict | None:
        d = self.json(field, null=True)
        if d is None:
            return None
        try:
            Culprit.from_dict(d)
        except (ValueError, TypeError, KeyError, AttributeError, StoreError) as e:
            raise self.bad(field, f"not a culprit ({type(e).__name__}: {e!s:.80})") from None
        return d


@dataclass(frozen=True)
class RunRow:
    """A run as stored; its config, options and versions stay the JSON text they were stored as
    (a run's identity for resuming and merging compares that text)."""

    id: int
    started_at: float
    finished_at: float | None
    status: str  # running | finished | interrupted | failed
    seed: int
    device: str
    config_json: str
    options_json: str
    versions_json: str

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "RunRow":
        f = Fields(r, "runs")
        for name in ("config_json", "options_json", "versions_json"):
            f.json(name)
        return cls(id=f.int("id"), started_at=f.real("started_at"), finished_at=f.real("finished_at", null=True),
                   status=f.text("status", choices=RUN_STATUSES), seed=f.int("seed"), device=f.text("device"),
                   config_json=r["config_json"], options_json=r["options_json"], versions_json=r["versions_json"])

    def info(self) -> dict:
        """What `Store.run_info` gives: the JSON columns decoded."""
        return {"id": self.id, "started_at": self.started_at, "finished_at": self.finished_at, "status": self.status,
                "seed": self.seed, "device": self.device, "config": json.loads(self.config_json),
                "versions": json.loads(self.versions_json)}


@dataclass(frozen=True)
class BucketRow:
    id: int
    key: BucketKey
    triage: str
    count: int
    first_seen: float
    last_seen: float
    first_run_id: int
    first_case_id: int | None
    folder: str | None
    minimized: dict | None
    culprit: dict | None
    severity: str = "suspect"  # divfuzz.records.severity.Severity value: the most severe of its cases
    severity_reason: dict | None = None  # SeverityReason.to_dict() of that case

    COLUMNS = ("id, key_json, triage, count, first_seen, last_seen, first_run_id, first_case_id, folder,"
               " minimized_json, culprit_json, severity, severity_json")

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "BucketRow":
        f = Fields(r, "buckets")
        minimized = f.json("minimized_json", null=True)
        if minimized is not None and not isinstance(minimized.get("spec", {}), dict):
            raise f.bad("minimized_json", f"its spec must be an object but got {_shown(minimized.get('spec'))}")
        return cls(id=f.int("id"), key=f.key(), triage=f.text("triage"), count=f.int("count", low=0),
                   first_seen=f.real("first_seen"), last_seen=f.real("last_seen"), first_run_id=f.int("first_run_id"),
                   first_case_id=f.int("first_case_id", null=True), folder=f.text("folder", null=True), minimized=minimized,
                   culprit=f.culprit(), severity=f.text("severity", choices=tuple(s.value for s in Severity)),
                   severity_reason=f.severity_reason())


@dataclass(frozen=True)
class CaseRow:
    id: int
    run_id: int
    slot: int
    idx: int
    spec_json: str
    device: str
    config: dict
    status: str
    finding_kind: str | None
    bucket_id: int | None
    score: float
    verdict: dict
    wall_s: float
    ran_on: str | None = None  # the device its worker was pinned to; None before schema 3
    spec_digest: str = ""
    created_at: float = 0.0

    COLUMNS = ("id, run_id, slot, idx, spec_digest, spec_json, device, config_json, status, finding_kind, bucket_id,"
               " score, verdict_json, wall_s, created_at, ran_on")

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "CaseRow":
        f = Fields(r, "cases")
        return cls(id=f.int("id"), run_id=f.int("run_id"), slot=f.int("slot", low=0), idx=f.int("idx", low=0),
                   spec_json=f.spec_text(), device=f.text("device"), config=f.json("config_json"), status=f.text("status"),
                   finding_kind=f.text("finding_kind", null=True), bucket_id=f.int("bucket_id", null=True),
                   score=f.real("score"), verdict=f.verdict(), wall_s=f.real("wall_s"), ran_on=f.text("ran_on", null=True),
                   spec_digest=f.text("spec_digest"), created_at=f.real("created_at"))


def case_summary(r: sqlite3.Row, columns: tuple[str, ...]) -> dict[str, Any]:
    """A case's summary (`Store.case_summaries`): `columns` as stored, each checked, and its verdict decoded."""
    f = Fields(r, "cases")
    checks = {"id": f.int, "run_id": f.int, "bucket_id": lambda c: f.int(c, null=True), "created_at": f.real,
              "wall_s": f.real, "status": f.text, "finding_kind": lambda c: f.text(c, null=True), "spec_digest": f.text,
              "spec_json": f.spec_text}
    return {**{name: checks[name](name) for name in columns}, "verdict": f.verdict()}


RECHECK_TEXT_MAX = 300  # a recheck's interpreter path and detail, as written (`Store.record_recheck` clips them)


@dataclass(frozen=True)
class RecheckRow:
    """A bug folder's issue.py run under another torch (`divfuzz recheck`): the bucket, that
    interpreter's torch version and path, what it gave (`RECHECK_OUTCOMES`), the run's exit code
    and last line, and when."""

    bucket_id: int
    torch_version: str
    python: str
    outcome: str
    detail: str
    checked_at: float

    COLUMNS = "bucket_id, torch_version, python, outcome, detail, checked_at"

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "RecheckRow":
        f = Fields(r, "rechecks", id_column="bucket_id")
        version = f.text("torch_version")
        if not TORCH_VERSION_TEXT.fullmatch(version):
            raise f.bad("torch_version", f"expected a torch version such as '2.13.0' but got {_shown(version)}")
        return cls(bucket_id=f.int("bucket_id"), torch_version=version, python=f.text("python", most=RECHECK_TEXT_MAX),
                   outcome=f.text("outcome", choices=RECHECK_OUTCOMES), detail=f.text("detail", most=RECHECK_TEXT_MAX),
                   checked_at=f.real("checked_at"))


@dataclass(frozen=True)
class RootCauseRow:
    """A remembered analysis: the raw key's text (as stored) and the root-cause key it was filed under."""

    raw_key: str
    key: BucketKey


class AnalysisIntake(NamedTuple):
    """What `add_case_for_analysis` did: the case's row, its bucket, and whether it opened an analysis."""

    case_id: int
    bucket_id: int
    is_new: bool  # a new bucket
    key: BucketKey  # the key it was stored under: its root cause when known, else the raw key
    queued: bool  # this case opened its raw key's pending analysis (the caller schedules it)


class PendingAnalysis(NamedTuple):
    raw_key: BucketKey
    case_id: int
    queued_at: float = 0.0


class RootCauseFiled(NamedTuple):
    """What `resolve_root_cause` did to the buckets."""

    bucket_id: int | None  # the root-cause bucket (None: no case stored under either key yet)
    created: bool  # the raw bucket became the root-cause bucket (renamed, same id)
    raw_bucket_id: int | None  # the raw bucket it came from (deleted when merged), or None
    severity: str | None = None  # the root-cause bucket's severity after filing
