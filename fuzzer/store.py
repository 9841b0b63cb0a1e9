"""The SQLite store: runs, cases and buckets in one embedded file.

Invariants:
- every case is committed in its own transaction with its bucket update, so a killed campaign
  loses at most the case in flight, and resuming skips what is stored;
- a bucket's key is unique across runs: a key seen in an earlier run is not new;
- opening a file that is not a divfuzz store raises StoreError and writes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzzer.buckets import BucketKey
from fuzzer.errors import StoreError

SCHEMA_VERSION = 2  # 2: buckets carry a severity (oracles.severity) and its reason

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL,              -- running | finished | interrupted
    seed INTEGER NOT NULL,
    device TEXT NOT NULL,
    config_json TEXT NOT NULL,
    options_json TEXT NOT NULL,
    versions_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cases (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    slot INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    spec_digest TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    device TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    finding_kind TEXT,
    bucket_id INTEGER REFERENCES buckets(id),
    score REAL NOT NULL,
    verdict_json TEXT NOT NULL,
    wall_s REAL NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (run_id, slot, idx)
);
CREATE TABLE IF NOT EXISTS buckets (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    key_json TEXT NOT NULL,
    kind TEXT NOT NULL,
    dtype TEXT NOT NULL,
    device_type TEXT NOT NULL,
    signature TEXT NOT NULL,
    detail TEXT NOT NULL,
    triage TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    first_run_id INTEGER NOT NULL,
    count INTEGER NOT NULL,
    first_case_id INTEGER,
    folder TEXT,
    minimized_json TEXT,
    culprit_json TEXT,
    severity TEXT NOT NULL DEFAULT 'suspect',  -- bug | suspect | by-design | noise
    severity_json TEXT                         -- its reason: rule, output, detail
);
CREATE INDEX IF NOT EXISTS cases_by_bucket ON cases(bucket_id);
CREATE TABLE IF NOT EXISTS root_causes (   -- a finding's raw key -> its minimized, attributed key
    raw_key TEXT PRIMARY KEY,
    key_json TEXT NOT NULL
);
"""


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a version-1 store to version 2: its buckets get a severity column, "suspect" until
    `divfuzz report` or a new case re-judges them from their stored verdicts."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(buckets)")}
    if "severity" not in columns:
        db.execute("ALTER TABLE buckets ADD COLUMN severity TEXT NOT NULL DEFAULT 'suspect'")
    if "severity_json" not in columns:
        db.execute("ALTER TABLE buckets ADD COLUMN severity_json TEXT")
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


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
    severity: str = "suspect"  # oracles.severity.Severity value: the most severe of its cases
    severity_reason: dict | None = None  # SeverityReason.to_dict() of that case


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


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            self.db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30, isolation_level=None)
            if existed:
                self._check_existing()
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            self.db.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            _migrate(self.db)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a usable divfuzz store ({e})") from None

    def _check_existing(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise StoreError(f"{self.path}: an SQLite file, but not a divfuzz store (no meta table)")
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema version {row and row[0]} is newer than this divfuzz")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    # ---- runs --------------------------------------------------------------------------------
    def start_run(self, *, seed: int, device: str, config: dict, options: dict, versions: dict) -> tuple[int, bool]:
        """A new run, or the unfinished run with the same seed, device, config and options (resumed)."""
        cfg, opts = json.dumps(config, sort_keys=True), json.dumps(options, sort_keys=True)
        with self._lock:
            row = self.db.execute(
                "SELECT id FROM runs WHERE status != 'finished' AND seed=? AND device=? AND config_json=?"
                " AND options_json=? ORDER BY id DESC LIMIT 1",
                (seed, device, cfg, opts),
            ).fetchone()
            if row:
                self.db.execute("UPDATE runs SET status='running' WHERE id=?", (row[0],))
                return row[0], True
            cur = self.db.execute(
                "INSERT INTO runs(started_at, status, seed, device, config_json, options_json, versions_json)"
                " VALUES (?, 'running', ?, ?, ?, ?, ?)",
                (time.time(), seed, device, cfg, opts, json.dumps(versions, sort_keys=True)),
            )
            return cur.lastrowid, False

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        with self._lock:
            self.db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?", (status, time.time(), run_id))

    def run_info(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            r = self.db.execute(
                "SELECT id, started_at, finished_at, status, seed, device, config_json, versions_json FROM runs WHERE id=?",
                (run_id,),
            ).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no run {run_id}")
        return {
            "id": r[0],
            "started_at": r[1],
            "finished_at": r[2],
            "status": r[3],
            "seed": r[4],
            "device": r[5],
            "config": json.loads(r[6]),
            "versions": json.loads(r[7]),
        }

    def latest_run_id(self) -> int | None:
        with self._lock:
            r = self.db.execute("SELECT max(id) FROM runs").fetchone()
        return r[0]

    # ---- cases -------------------------------------------------------------------------------
    def stored_case(self, run_id: int, slot: int, idx: int) -> tuple[str, float] | None:
        with self._lock:
            r = self.db.execute(
                "SELECT spec_digest, score FROM cases WHERE run_id=? AND slot=? AND idx=?", (run_id, slot, idx)
            ).fetchone()
        return (r[0], r[1]) if r else None

    def add_case(
        self,
        *,
        run_id: int,
        slot: int,
        idx: int,
        spec_digest: str,
        spec_json: str,
        device: str,
        config: dict,
        verdict: dict,
        score: float,
        wall_s: float,
        finding_kind: str | None,
        key: BucketKey | None,
        triage: str = "",
        severity: dict | None = None,
    ) -> tuple[int, int | None, bool]:
        """Store one case (and bump its bucket) atomically. Returns (case id, bucket id, new bucket?)."""
        now = time.time()
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                bucket_id, is_new = None, False
                if key is not None:
                    bucket_id, is_new = self._touch_bucket(key, triage, run_id, now)
                    if severity is not None:
                        self._raise_severity(bucket_id, severity)
                cur = self.db.execute(
                    "INSERT INTO cases(run_id, slot, idx, spec_digest, spec_json, device, config_json, status,"
                    " finding_kind, bucket_id, score, verdict_json, wall_s, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        run_id,
                        slot,
                        idx,
                        spec_digest,
                        spec_json,
                        device,
                        json.dumps(config, sort_keys=True),
                        verdict["status"],
                        finding_kind,
                        bucket_id,
                        score,
                        json.dumps(verdict),
                        wall_s,
                        now,
                    ),
                )
                case_id = cur.lastrowid
                if is_new:
                    self.db.execute("UPDATE buckets SET first_case_id=? WHERE id=?", (case_id, bucket_id))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return case_id, bucket_id, is_new

    def _touch_bucket(self, key: BucketKey, triage: str, run_id: int, now: float) -> tuple[int, bool]:
        row = self.db.execute("SELECT id FROM buckets WHERE key=?", (str(key),)).fetchone()
        if row:
            self.db.execute("UPDATE buckets SET count=count+1, last_seen=? WHERE id=?", (now, row[0]))
            return row[0], False
        cur = self.db.execute(
            "INSERT INTO buckets(key, key_json, kind, dtype, device_type, signature, detail, triage,"
            " first_seen, last_seen, first_run_id, count) VALUES (?,?,?,?,?,?,?,?,?,?,?,1)",
            (
                str(key),
                json.dumps(key.to_dict()),
                key.kind,
                key.dtype,
                key.device_type,
                key.signature,
                key.detail,
                triage,
                now,
                now,
                run_id,
            ),
        )
        return cur.lastrowid, True

    def _raise_severity(self, bucket_id: int, reason: dict) -> None:
        """A bucket's severity is its most severe case's (a fresh bucket takes the first one's)."""
        from oracles.severity import Severity

        row = self.db.execute("SELECT severity, severity_json FROM buckets WHERE id=?", (bucket_id,)).fetchone()
        new = Severity(reason["severity"])
        if row[1] is None or new.rank < Severity(row[0]).rank:
            self.db.execute(
                "UPDATE buckets SET severity=?, severity_json=? WHERE id=?", (new.value, json.dumps(reason), bucket_id)
            )

    def set_bucket_severity(self, bucket_id: int, reason: dict) -> None:
        """Overwrite a bucket's severity (after attribution named its culprit)."""
        with self._lock:
            self.db.execute(
                "UPDATE buckets SET severity=?, severity_json=? WHERE id=?", (reason["severity"], json.dumps(reason), bucket_id)
            )

    def case(self, case_id: int) -> CaseRow:
        with self._lock:
            r = self.db.execute(
                "SELECT id, run_id, slot, idx, spec_json, device, config_json, status, finding_kind, bucket_id,"
                " score, verdict_json, wall_s FROM cases WHERE id=?",
                (case_id,),
            ).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no case {case_id}")
        return CaseRow(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9], r[10], json.loads(r[11]), r[12])

    def run_stats(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            by_status = dict(self.db.execute("SELECT status, count(*) FROM cases WHERE run_id=? GROUP BY status", (run_id,)))
            wall = self.db.execute("SELECT coalesce(sum(wall_s),0) FROM cases WHERE run_id=?", (run_id,)).fetchone()[0]
        return {"cases": sum(by_status.values()), "by_status": by_status, "case_wall_s": wall}

    # ---- root causes (so a resumed campaign does not minimize again) ---------------------------
    def root_cause_of(self, raw_key: BucketKey) -> BucketKey | None:
        with self._lock:
            r = self.db.execute("SELECT key_json FROM root_causes WHERE raw_key=?", (str(raw_key),)).fetchone()
        return BucketKey.from_dict(json.loads(r[0])) if r else None

    def remember_root_cause(self, raw_key: BucketKey, key: BucketKey) -> None:
        with self._lock:
            self.db.execute(
                "INSERT OR REPLACE INTO root_causes(raw_key, key_json) VALUES (?, ?)",
                (str(raw_key), json.dumps(key.to_dict())),
            )

    # ---- buckets -----------------------------------------------------------------------------
    def set_bucket_folder(self, bucket_id: int, folder: str) -> None:
        with self._lock:
            self.db.execute("UPDATE buckets SET folder=? WHERE id=?", (folder, bucket_id))

    def set_bucket_analysis(self, bucket_id: int, *, minimized: dict | None, culprit: dict | None) -> None:
        with self._lock:
            self.db.execute(
                "UPDATE buckets SET minimized_json=?, culprit_json=? WHERE id=?",
                (json.dumps(minimized) if minimized else None, json.dumps(culprit) if culprit else None, bucket_id),
            )

    def buckets(self, *, run_id: int | None = None) -> list[BucketRow]:
        """All buckets, or those that a run's cases fell into."""
        q = (
            "SELECT id, key_json, triage, count, first_seen, last_seen, first_run_id, first_case_id, folder,"
            " minimized_json, culprit_json, severity, severity_json FROM buckets"
        )
        args: tuple = ()
        if run_id is not None:
            q += " WHERE id IN (SELECT DISTINCT bucket_id FROM cases WHERE run_id=? AND bucket_id IS NOT NULL)"
            args = (run_id,)
        with self._lock:
            rows = self.db.execute(q + " ORDER BY id", args).fetchall()
        return [
            BucketRow(
                r[0],
                BucketKey.from_dict(json.loads(r[1])),
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                json.loads(r[9]) if r[9] else None,
                json.loads(r[10]) if r[10] else None,
                r[11],
                json.loads(r[12]) if r[12] else None,
            )
            for r in rows
        ]
