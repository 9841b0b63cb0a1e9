"""The store's rows as named, frozen values, and the one decoder of each table's row.

A decoder reads a `sqlite3.Row` by column name, never by position, and decodes the JSON columns;
a row that does not decode raises ValueError/TypeError/KeyError, which `Store` reports as a
damaged row naming the file.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import NamedTuple

from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import StoreError


def _json_or_none(text: str | None):
    return json.loads(text) if text else None


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
        return cls(id=r["id"], started_at=r["started_at"], finished_at=r["finished_at"], status=r["status"],
                   seed=r["seed"], device=r["device"], config_json=r["config_json"], options_json=r["options_json"],
                   versions_json=r["versions_json"])

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
        try:
            key = BucketKey.from_dict(json.loads(r["key_json"]), where=f"bucket {r['id']}'s key")
        except StoreError as e:  # reported by the store as a damaged row naming its file
            raise ValueError(str(e)) from None
        return cls(id=r["id"], key=key, triage=r["triage"], count=r["count"],
                   first_seen=r["first_seen"], last_seen=r["last_seen"], first_run_id=r["first_run_id"],
                   first_case_id=r["first_case_id"], folder=r["folder"], minimized=_json_or_none(r["minimized_json"]),
                   culprit=_json_or_none(r["culprit_json"]), severity=r["severity"],
                   severity_reason=_json_or_none(r["severity_json"]))


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
        return cls(id=r["id"], run_id=r["run_id"], slot=r["slot"], idx=r["idx"], spec_json=r["spec_json"],
                   device=r["device"], config=json.loads(r["config_json"]), status=r["status"],
                   finding_kind=r["finding_kind"], bucket_id=r["bucket_id"], score=r["score"],
                   verdict=json.loads(r["verdict_json"]), wall_s=r["wall_s"], ran_on=r["ran_on"],
                   spec_digest=r["spec_digest"], created_at=r["created_at"])


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
