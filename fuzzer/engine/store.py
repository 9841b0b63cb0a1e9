"""The SQLite store: runs, cases and buckets in one embedded file.

Invariants:
- every case is committed in its own transaction with its bucket update, so a killed campaign
  loses at most the case in flight, and resuming skips what is stored;
- a new bucket's folder is written after its row is committed; a case that opened a bucket
  whose folder was never recorded (a full disk, a kill in between) is not "stored" for a resume
  (`stored_case`), and storing it again replaces it and its folder-less bucket, so the resume
  writes both: a bucket never stays without its folder;
- a new store file is made whole or not at all: its schema and `meta` are written to a temporary
  file beside it that is renamed into place (a full disk leaves no half-made store);
- a bucket's key is unique across runs: a key seen in an earlier run is not new;
- opening a file that is not a divfuzz store (empty, another application's SQLite file, a
  non-integer schema version) raises StoreError and writes nothing; `create=False` (readers such as
  `report`) never writes to the file at all;
- every SQLite error of a method is a StoreError naming the file and saying what it is (corrupt,
  disk full, read-only), never a bare sqlite3 traceback;
- one live campaign per store (`CampaignLock`); a killed campaign's lock is taken over;
- a raw bucket key is either open (a `pending_analyses` row, its cases in the raw bucket) or filed
  (a `root_causes` row, its cases in the root-cause bucket), never both: `add_case_for_analysis`
  and `resolve_root_cause` each decide it in one transaction, so the buckets at the end are the
  same whether an analysis ran inline, in the analysis pool or later (`minimize --pending`).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import StoreBusyError, StoreError
from divfuzz.reports.safe_paths import check_plain, open_plain

# 2: buckets carry a severity (divfuzz.oracles.severity) and its reason;
# 3: cases record the device they ran on (`ran_on`: 'cpu', 'cuda:1', in the driver's numbering);
# 4: raw bucket keys whose analysis (minimize + attribute) is still open (`pending_analyses`).
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL,              -- running | finished | interrupted | failed
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
    ran_on TEXT,                       -- the device its worker was pinned to (NULL: stored before schema 3)
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
CREATE TABLE IF NOT EXISTS run_failures (  -- why a run is `failed`: divfuzz's own error, not a finding
    run_id INTEGER PRIMARY KEY REFERENCES runs(id),
    error TEXT NOT NULL,
    log_path TEXT
);
CREATE TABLE IF NOT EXISTS root_causes (   -- a finding's raw key -> its minimized, attributed key
    raw_key TEXT PRIMARY KEY,
    key_json TEXT NOT NULL
);
"""

_PENDING_TABLE = """
CREATE TABLE IF NOT EXISTS pending_analyses (  -- a raw key stored before its root cause was known
    raw_key TEXT PRIMARY KEY,                  -- never also in root_causes: resolving deletes the row
    key_json TEXT NOT NULL,
    case_id INTEGER NOT NULL REFERENCES cases(id),  -- the case whose spec the analysis minimizes
    queued_at REAL NOT NULL
)"""
_SCHEMA += _PENDING_TABLE + ";\n"


def _migrate(db: sqlite3.Connection) -> None:
    """Bring an older store to the current version, in one transaction. 1 -> 2: its buckets get a
    severity column, "suspect" until `divfuzz report` or a new case re-judges them from their
    stored verdicts. 2 -> 3: its cases get `ran_on`, NULL (unknown) for the cases already stored.
    3 -> 4: an empty `pending_analyses` table (every earlier store analysed inline, so no raw key
    is left open)."""
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is not None and int(row[0]) >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        columns = {r[1] for r in db.execute("PRAGMA table_info(buckets)")}
        if "severity" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity TEXT NOT NULL DEFAULT 'suspect'")
        if "severity_json" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity_json TEXT")
        if "ran_on" not in {r[1] for r in db.execute("PRAGMA table_info(cases)")}:
            db.execute("ALTER TABLE cases ADD COLUMN ran_on TEXT")
        db.execute(_PENDING_TABLE)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


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
    severity: str = "suspect"  # divfuzz.oracles.severity.Severity value: the most severe of its cases
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
    ran_on: str | None = None  # the device its worker was pinned to; None before schema 3


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


class RootCauseFiled(NamedTuple):
    """What `resolve_root_cause` did to the buckets."""

    bucket_id: int | None  # the root-cause bucket (None: no case stored under either key yet)
    created: bool  # the raw bucket became the root-cause bucket (renamed, same id)
    raw_bucket_id: int | None  # the raw bucket it came from (deleted when merged), or None
    severity: str | None = None  # the root-cause bucket's severity after filing


# The tables (and the columns of each) that make a file a divfuzz store; checked before any write.
_REQUIRED_COLUMNS = {
    "meta": {"key", "value"},
    "runs": {"id", "status", "seed", "device", "config_json", "options_json"},
    "cases": {"id", "run_id", "slot", "idx", "spec_digest", "spec_json", "verdict_json"},
    "buckets": {"id", "key", "key_json", "count", "folder"},
}


def describe_sqlite_error(path: Path, e: sqlite3.Error) -> str:
    """What an SQLite error means for the person running divfuzz, naming the file."""
    text = str(e)
    code = getattr(e, "sqlite_errorname", "")
    if code.startswith("SQLITE_FULL") or "disk is full" in text:
        return f"{path}: the disk is full ({text}); the store keeps every case stored before this one"
    if code.startswith("SQLITE_READONLY") or "readonly" in text:
        return f"{path}: the store is read-only ({text})"
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return f"{path}: the store is corrupt ({text}); it was left as it is"
    return f"{path}: store error ({type(e).__name__}: {text})"


def check_divfuzz_store(db: sqlite3.Connection, path: Path) -> int:
    """Only reads: the schema version of a divfuzz store, or StoreError naming `path` when the file
    is another application's SQLite file, lacks a table or column, or is from a newer divfuzz."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise StoreError(f"{path}: an SQLite file, but not a divfuzz store (no meta table); left as it is")
    for table, columns in _REQUIRED_COLUMNS.items():
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")} if table in tables else set()
        if not columns <= have:
            raise StoreError(
                f"{path}: an SQLite file with a meta table but not a divfuzz store (table {table!r} "
                f"{'lacks ' + ', '.join(sorted(columns - have)) if have else 'is missing'}); refused and left as it is"
            )
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        raise StoreError(f"{path}: no schema_version in its meta table: not a divfuzz store; left as it is")
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        raise StoreError(f"{path}: schema_version {row[0]!r} in its meta table is not an integer; left as it is") from None
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {version} is newer than this divfuzz")
    return version


def _named_sqlite_errors(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            raise StoreError(describe_sqlite_error(self.path, e)) from e
        except (ValueError, TypeError, KeyError) as e:  # a row that does not decode: damaged content
            raise StoreError(f"{self.path}: the store holds a damaged row ({type(e).__name__}: {e})") from e

    return wrapper


class Store:
    def __init__(self, path: str | Path, *, create: bool = True):
        """Open (or with `create`, make) a store. Without `create` the file must already be a
        divfuzz store, and nothing is written to it: no schema, no journal-mode change."""
        self.path = Path(path)
        self._lock = threading.RLock()
        for part in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal"))):
            check_plain(part, what="store file")  # SQLite would follow a symlink, and block on a FIFO
        if self.path.exists() and self.path.is_file() and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: an empty file, not a divfuzz store; refused and left as it is")
        existed = self.path.exists()
        if not existed and not create:
            raise StoreError(f"{self.path}: no store here")
        self.db = None
        if not existed:
            _create_store_file(self.path)
            existed = True
        try:
            self.db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30, isolation_level=None)
            if existed:
                self._check_existing()
            if create:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_SCHEMA)
                self.db.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            _migrate(self.db)  # an older divfuzz store (checked above) is upgraded in place; a current one is not touched
        except sqlite3.Error as e:
            if self.db is not None:
                self.db.close()
            raise StoreError(f"not a usable divfuzz store: {describe_sqlite_error(self.path, e)}") from None
        except StoreError:
            self.db.close()
            raise

    def _check_existing(self) -> None:
        """Only reads: a file that is not a divfuzz store is refused before anything is written."""
        check_divfuzz_store(self.db, self.path)

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

    def unfinished_runs(self, *, seed: int, device: str, config: dict) -> list[tuple[int, dict]]:
        """(id, options) of the runs not finished with this seed, device and config, newest first:
        what a campaign whose worker count was not given may resume (`start_run` matches options too)."""
        cfg = json.dumps(config, sort_keys=True)
        with self._lock:
            rows = self.db.execute("SELECT id, options_json FROM runs WHERE status != 'finished' AND seed=? AND device=?"
                                   " AND config_json=? ORDER BY id DESC", (seed, device, cfg)).fetchall()
        return [(run_id, json.loads(options)) for run_id, options in rows]

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        with self._lock:
            self.db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?", (status, time.time(), run_id))

    def fail_run(self, run_id: int, error: str, log_path: str | None) -> None:
        """Mark a run `failed` by divfuzz's own error (kept apart from findings), atomically."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("UPDATE runs SET status='failed', finished_at=? WHERE id=?", (time.time(), run_id))
                self.db.execute(
                    "INSERT OR REPLACE INTO run_failures(run_id, error, log_path) VALUES (?, ?, ?)", (run_id, error, log_path)
                )
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise

    def run_failure(self, run_id: int) -> tuple[str, str | None] | None:
        """(error, log path) of a failed run, or None."""
        with self._lock:
            r = self.db.execute("SELECT error, log_path FROM run_failures WHERE run_id=?", (run_id,)).fetchone()
        return (r[0], r[1]) if r else None

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
        """(digest, score) of a stored case, or None when it must run (again): not stored, or it
        opened a bucket whose folder was never recorded."""
        with self._lock:
            r = self.db.execute(
                "SELECT c.spec_digest, c.score, b.first_case_id = c.id AND b.folder IS NULL FROM cases c"
                " LEFT JOIN buckets b ON b.id = c.bucket_id WHERE c.run_id=? AND c.slot=? AND c.idx=?", (run_id, slot, idx)
            ).fetchone()
        return (r[0], r[1]) if r and not r[2] else None

    def _drop_unfinished_case(self, run_id: int, slot: int, idx: int) -> None:
        """Inside a transaction: the earlier copy of a case run again (`stored_case`), its pending
        analysis, and its bucket when no other case is in it and it has no folder."""
        row = self.db.execute("SELECT id, bucket_id FROM cases WHERE run_id=? AND slot=? AND idx=?", (run_id, slot, idx)).fetchone()
        if row is None:
            return
        self.db.execute("DELETE FROM pending_analyses WHERE case_id=?", (row[0],))
        self.db.execute("DELETE FROM cases WHERE id=?", (row[0],))
        if row[1] is not None:
            self.db.execute("UPDATE buckets SET count=count-1 WHERE id=?", (row[1],))
            self.db.execute("DELETE FROM buckets WHERE id=? AND count<=0 AND folder IS NULL", (row[1],))

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
        ran_on: str | None = None,
    ) -> tuple[int, int | None, bool]:
        """Store one case (and bump its bucket) atomically. Returns (case id, bucket id, new bucket?)."""
        case = dict(run_id=run_id, slot=slot, idx=idx, spec_digest=spec_digest, spec_json=spec_json, device=device,
                    config=config, verdict=verdict, score=score, wall_s=wall_s, finding_kind=finding_kind, ran_on=ran_on)
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                stored = self._insert_case(case, key, triage, severity)
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:  # a full disk may already have rolled it back
                    self.db.execute("ROLLBACK")
                raise
        return stored

    def add_case_for_analysis(self, *, raw_key: BucketKey, severity_for: Callable[[BucketKey], dict | None],
                              triage: str = "", **case) -> "AnalysisIntake":
        """Store a finding's case at once, before its analysis: under its root-cause key when one
        is known (`root_causes`), else under `raw_key` with a `pending_analyses` row for it (one
        per raw key: `queued` says this case opened it). Looking the key up, judging the severity
        under that key (`severity_for`) and storing are one transaction, so a case never lands
        under a raw key whose root cause is already filed (`resolve_root_cause`)."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                known = self._root_cause_locked(raw_key)
                key = known if known is not None else raw_key
                case_id, bucket_id, is_new = self._insert_case(case, key, triage, severity_for(key))
                queued = False
                if known is None:
                    queued = self.db.execute(
                        "INSERT OR IGNORE INTO pending_analyses(raw_key, key_json, case_id, queued_at) VALUES (?,?,?,?)",
                        (str(raw_key), json.dumps(raw_key.to_dict()), case_id, time.time()),
                    ).rowcount == 1
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        return AnalysisIntake(case_id, bucket_id, is_new, key, queued)

    def _insert_case(self, case: dict, key: BucketKey | None, triage: str, severity: dict | None) -> tuple[int, int | None, bool]:
        """Inside a transaction: the case row and its bucket's update."""
        self._drop_unfinished_case(case["run_id"], case["slot"], case["idx"])
        now = time.time()
        bucket_id, is_new = None, False
        if key is not None:
            bucket_id, is_new = self._touch_bucket(key, triage, case["run_id"], now)
            if severity is not None:
                self._raise_severity(bucket_id, severity)
        cur = self.db.execute(
            "INSERT INTO cases(run_id, slot, idx, spec_digest, spec_json, device, config_json, status,"
            " finding_kind, bucket_id, score, verdict_json, wall_s, created_at, ran_on)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                case["run_id"],
                case["slot"],
                case["idx"],
                case["spec_digest"],
                case["spec_json"],
                case["device"],
                json.dumps(case["config"], sort_keys=True),
                case["verdict"]["status"],
                case["finding_kind"],
                bucket_id,
                case["score"],
                json.dumps(case["verdict"]),
                case["wall_s"],
                now,
                case.get("ran_on"),
            ),
        )
        case_id = cur.lastrowid
        if is_new:
            self.db.execute("UPDATE buckets SET first_case_id=? WHERE id=?", (case_id, bucket_id))
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
        from divfuzz.records.severity import Severity

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
                " score, verdict_json, wall_s, ran_on FROM cases WHERE id=?",
                (case_id,),
            ).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no case {case_id}")
        return CaseRow(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9], r[10], json.loads(r[11]), r[12], r[13])

    def run_stats(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            by_status = dict(self.db.execute("SELECT status, count(*) FROM cases WHERE run_id=? GROUP BY status", (run_id,)))
            wall = self.db.execute("SELECT coalesce(sum(wall_s),0) FROM cases WHERE run_id=?", (run_id,)).fetchone()[0]
        return {"cases": sum(by_status.values()), "by_status": by_status, "case_wall_s": wall}

    # ---- root causes (so a resumed campaign does not minimize again) ---------------------------
    def root_cause_of(self, raw_key: BucketKey) -> BucketKey | None:
        with self._lock:
            return self._root_cause_locked(raw_key)

    def _root_cause_locked(self, raw_key: BucketKey) -> BucketKey | None:
        r = self.db.execute("SELECT key_json FROM root_causes WHERE raw_key=?", (str(raw_key),)).fetchone()
        return BucketKey.from_dict(json.loads(r[0])) if r else None

    def remember_root_cause(self, raw_key: BucketKey, key: BucketKey) -> None:
        with self._lock:
            self.db.execute(
                "INSERT OR REPLACE INTO root_causes(raw_key, key_json) VALUES (?, ?)",
                (str(raw_key), json.dumps(key.to_dict())),
            )

    def resolve_root_cause(self, raw_key: BucketKey, key: BucketKey,
                           severity_for: Callable[[dict], dict | None]) -> "RootCauseFiled":
        """File an analysis: `raw_key`'s root cause is `key`. One transaction: remember it, close
        the raw key's pending analysis, and move the cases stored under the raw key into the
        root-cause bucket (the raw bucket is renamed when the root-cause bucket is new, else merged
        into it: counts add, first/last seen widen). The moved cases' severities are judged again
        under `key` (`severity_for(verdict dict)`), as if they had been stored under it.

        The end state depends only on (raw key, root-cause key) and the cases stored: the same
        whether the analysis ran inline, in the pool or later (`minimize --pending`)."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("INSERT OR REPLACE INTO root_causes(raw_key, key_json) VALUES (?, ?)",
                                (str(raw_key), json.dumps(key.to_dict())))
                self.db.execute("DELETE FROM pending_analyses WHERE raw_key=?", (str(raw_key),))
                filed = self._move_bucket(raw_key, key, severity_for)
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        return filed

    def _move_bucket(self, raw_key: BucketKey, key: BucketKey, severity_for) -> "RootCauseFiled":
        raw = self.db.execute("SELECT id, count, first_seen, last_seen FROM buckets WHERE key=?", (str(raw_key),)).fetchone()
        root = self.db.execute("SELECT id FROM buckets WHERE key=?", (str(key),)).fetchone()
        if raw is None or str(raw_key) == str(key):  # nothing stored under the raw key (inline analysis)
            return RootCauseFiled(root[0] if root else None, created=False, raw_bucket_id=None)
        moved = self.db.execute("SELECT verdict_json FROM cases WHERE bucket_id=?", (raw[0],)).fetchall()
        if root is None:
            self.db.execute("UPDATE buckets SET key=?, key_json=?, kind=?, dtype=?, device_type=?, signature=?, detail=?,"
                            " severity='suspect', severity_json=NULL WHERE id=?",
                            (str(key), json.dumps(key.to_dict()), key.kind, key.dtype, key.device_type, key.signature,
                             key.detail, raw[0]))
            bucket_id, created = raw[0], True
        else:
            bucket_id, created = root[0], False
            self.db.execute("UPDATE cases SET bucket_id=? WHERE bucket_id=?", (bucket_id, raw[0]))
            self.db.execute("UPDATE buckets SET count=count+?, first_seen=min(first_seen, ?), last_seen=max(last_seen, ?)"
                            " WHERE id=?", (raw[1], raw[2], raw[3], bucket_id))
            self.db.execute("DELETE FROM buckets WHERE id=?", (raw[0],))
        for (verdict_json,) in moved:
            reason = severity_for(json.loads(verdict_json))
            if reason is not None:
                self._raise_severity(bucket_id, reason)
        severity = self.db.execute("SELECT severity FROM buckets WHERE id=?", (bucket_id,)).fetchone()[0]
        return RootCauseFiled(bucket_id, created=created, raw_bucket_id=raw[0], severity=severity)

    def close_pending_already_filed(self, severity_for: Callable[[dict, BucketKey], dict | None]) -> int:
        """Inside a transaction the caller holds (`divfuzz merge`): every pending raw key that
        `root_causes` now files (another shard analysed it) is resolved as `resolve_root_cause`
        would: its pending row goes, its cases move into the root-cause bucket, judged again under
        it (`severity_for(verdict dict, root-cause key)`). Restores the invariant that a raw key is
        open or filed, never both. Returns how many were closed."""
        rows = self.db.execute("SELECT p.raw_key, p.key_json, r.key_json FROM pending_analyses p"
                               " JOIN root_causes r ON r.raw_key = p.raw_key ORDER BY p.case_id").fetchall()
        for raw_text, raw_json, root_json in rows:
            raw_key, key = BucketKey.from_dict(json.loads(raw_json)), BucketKey.from_dict(json.loads(root_json))
            self.db.execute("DELETE FROM pending_analyses WHERE raw_key=?", (raw_text,))
            self._move_bucket(raw_key, key, lambda v, key=key: severity_for(v, key))
        return len(rows)

    def pending_analyses(self) -> list["PendingAnalysis"]:
        """The raw keys whose analysis is still open, oldest first, each with the case to minimize."""
        with self._lock:
            rows = self.db.execute("SELECT key_json, case_id FROM pending_analyses ORDER BY case_id").fetchall()
        return [PendingAnalysis(BucketKey.from_dict(json.loads(r[0])), r[1]) for r in rows]

    def pending_count(self) -> int:
        with self._lock:
            return self.db.execute("SELECT count(*) FROM pending_analyses").fetchone()[0]

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

    # ---- read-only queries for reports (`report --html`, `diff`) -----------------------------
    def runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first: what `run_info` gives plus its options and its case count."""
        with self._lock:
            rows = self.db.execute(
                "SELECT r.id, r.started_at, r.finished_at, r.status, r.seed, r.device, r.config_json, r.options_json,"
                " r.versions_json, (SELECT count(*) FROM cases c WHERE c.run_id = r.id) FROM runs r ORDER BY r.id"
            ).fetchall()
        return [
            {
                "id": r[0], "started_at": r[1], "finished_at": r[2], "status": r[3], "seed": r[4], "device": r[5],
                "config": json.loads(r[6]), "options": json.loads(r[7]), "versions": json.loads(r[8]), "cases": r[9],
            }
            for r in rows
        ]

    def has_run(self, run_id: int) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def case_summaries(self, *, run_id: int | None = None) -> list[dict[str, Any]]:
        """Every case (or a run's), in the order stored, as dicts with the keys of `_CASE_SUMMARY`
        (spec as stored JSON text, verdict decoded): what reports draw (coverage, timings, error
        plots) and what `diff` matches replays on."""
        q = (
            "SELECT id, run_id, created_at, wall_s, status, finding_kind, bucket_id, spec_digest, spec_json,"
            " verdict_json FROM cases"
        )
        args: tuple = ()
        if run_id is not None:
            q += " WHERE run_id=?"
            args = (run_id,)
        with self._lock:
            rows = self.db.execute(q + " ORDER BY id", args).fetchall()
        return [dict(zip(self._CASE_SUMMARY, (*r[:9], json.loads(r[9])))) for r in rows]

    _CASE_SUMMARY = ("id", "run_id", "created_at", "wall_s", "status", "finding_kind", "bucket_id", "spec_digest",
                     "spec_json", "verdict")

    def pending_priorities(self) -> dict[str, tuple[str, int]]:
        """Each open analysis's raw key (as text) -> its raw bucket's severity and case count (suspect
        and 0 when no case is stored under it): what the analysis pool orders its queue by."""
        with self._lock:
            rows = self.db.execute("SELECT p.raw_key, b.severity, b.count FROM pending_analyses p"
                                   " LEFT JOIN buckets b ON b.key = p.raw_key").fetchall()
        return {r[0]: (r[1] or "suspect", r[2] or 0) for r in rows}

    def case_clock(self, run_id: int) -> list[dict[str, Any]]:
        """A run's cases by slot and index: slot, idx, created_at, wall_s, status and the verdict's
        timings (name -> seconds): what `divfuzz bench --breakdown` splits a run's time by."""
        with self._lock:
            rows = self.db.execute("SELECT slot, idx, created_at, wall_s, status, verdict_json FROM cases WHERE run_id=?"
                                   " ORDER BY slot, idx", (run_id,)).fetchall()
        return [{"slot": r[0], "idx": r[1], "created_at": r[2], "wall_s": r[3], "status": r[4],
                 "timings": dict(json.loads(r[5]).get("timings") or ())} for r in rows]


for _name, _method in list(vars(Store).items()):
    if callable(_method) and not _name.startswith("_") and _name != "close":
        setattr(Store, _name, _named_sqlite_errors(_method))


def _create_store_file(path: Path) -> None:
    """A new, empty divfuzz store at `path`, whole or not at all: built in a temporary file in the
    same folder (schema and `meta` in one transaction) and renamed into place. On any failure
    (a full disk) the temporary files are removed and StoreError says why; `path` is not created."""
    import tempfile

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    db = None
    try:
        db = sqlite3.connect(str(tmp), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript("BEGIN;" + _SCHEMA + f"INSERT INTO meta(key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');COMMIT;")
        db.close()
        db = None
        os.link(tmp, path)  # never over a store another process made meanwhile
    except (sqlite3.Error, OSError) as e:
        if db is not None:
            db.close()
        if isinstance(e, FileExistsError):
            return  # made by another process meanwhile: opened and checked as an existing store
        full = getattr(e, "sqlite_errorname", "").startswith("SQLITE_FULL") or getattr(e, "errno", None) == errno.ENOSPC
        raise StoreError(f"{path}: cannot create the store ({'the disk is full' if full else e}); nothing was created") from None
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            try:
                leftover.unlink()
            except OSError:
                pass


class CampaignLock:
    """One live campaign per store: an exclusive `flock` on `<store>.lock` next to it.

    The kernel drops the lock when the process holding it dies, so a killed campaign's lock is
    taken over by the next one (its stale pid stays in the file only until then). The file holds
    the holder's pid, host and start time, for the message a refused campaign prints.
    """

    def __init__(self, store_path: Path):
        self.store_path = Path(store_path)
        self.path = self.store_path.with_suffix(".lock")
        self.fd: int | None = None
        self.taken_over: dict | None = None  # the holder a killed run left in the file, if any

    def acquire(self) -> None:
        fd = open_plain(self.path, os.O_RDWR | os.O_CREAT, 0o644, what="campaign lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
            raise StoreBusyError(
                f"{self.store_path}: another divfuzz campaign ({who}) is running on this store; "
                f"wait for it to finish or use another --out"
            ) from None
        except OSError:
            os.close(fd)
            raise
        self.taken_over = self._read(fd) or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode(), 0)
        self.fd = fd

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
