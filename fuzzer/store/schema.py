"""The store file's name, tables and version: creating a store, recognising one, upgrading an older one.

Invariants:
- `STORE_NAME` is the one name of a campaign's store file inside its `--out` folder; every module
  that looks for a store imports it from here;
- a new store file is made whole or not at all: its schema and `meta` are written to a temporary
  file beside it that is renamed into place (a full disk leaves no half-made store);
- a file that is not a divfuzz store (another application's SQLite file, a missing table or
  column, a non-integer or newer schema version) is refused by `check_divfuzz_store`, which only reads;
- an older store is migrated in one transaction, here and nowhere else.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from pathlib import Path

from divfuzz.fuzzer.store.connection import connect, transaction
from divfuzz.records.errors import StoreError

STORE_NAME = "divfuzz.sqlite"

# 2: buckets carry a severity (divfuzz.oracles.severity_policy) and its reason;
# 3: cases record the device they ran on (`ran_on`: 'cpu', 'cuda:1', in the driver's numbering);
# 4: raw bucket keys whose analysis (minimize + attribute) is still open (`pending_analyses`).
SCHEMA_VERSION = 4

PENDING_TABLE = """
CREATE TABLE IF NOT EXISTS pending_analyses (  -- a raw key stored before its root cause was known
    raw_key TEXT PRIMARY KEY,                  -- never also in root_causes: resolving deletes the row
    key_json TEXT NOT NULL,
    case_id INTEGER NOT NULL REFERENCES cases(id),  -- the case whose spec the analysis minimizes
    queued_at REAL NOT NULL
)"""

TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """
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
)""",
    """
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
)""",
    """
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
)""",
    "CREATE INDEX IF NOT EXISTS cases_by_bucket ON cases(bucket_id)",
    """
CREATE TABLE IF NOT EXISTS run_failures (  -- why a run is `failed`: divfuzz's own error, not a finding
    run_id INTEGER PRIMARY KEY REFERENCES runs(id),
    error TEXT NOT NULL,
    log_path TEXT
)""",
    """
CREATE TABLE IF NOT EXISTS root_causes (   -- a finding's raw key -> its minimized, attributed key
    raw_key TEXT PRIMARY KEY,
    key_json TEXT NOT NULL
)""",
    PENDING_TABLE,
)

# The tables (and the columns of each) that make a file a divfuzz store; checked before any write.
REQUIRED_COLUMNS = {
    "meta": {"key", "value"},
    "runs": {"id", "status", "seed", "device", "config_json", "options_json"},
    "cases": {"id", "run_id", "slot", "idx", "spec_digest", "spec_json", "verdict_json"},
    "buckets": {"id", "key", "key_json", "count", "folder"},
}


def write_schema(db: sqlite3.Connection) -> None:
    """The tables a store lacks and its schema version (kept when already there), in one transaction."""
    with transaction(db):
        for statement in TABLES:
            db.execute(statement)
        db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}


def _stored_version(db: sqlite3.Connection) -> sqlite3.Row | None:
    return db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()


def migrate(db: sqlite3.Connection) -> None:
    """Bring an older store to the current version, in one transaction. 1 -> 2: its buckets get a
    severity column, "suspect" until `divfuzz report` or a new case re-judges them from their
    stored verdicts. 2 -> 3: its cases get `ran_on`, NULL (unknown) for the cases already stored.
    3 -> 4: an empty `pending_analyses` table (every earlier store analysed inline, so no raw key
    is left open). A current store is not written to."""
    row = _stored_version(db)
    if row is not None and int(row["value"]) >= SCHEMA_VERSION:
        return
    with transaction(db):
        columns = _columns(db, "buckets")
        if "severity" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity TEXT NOT NULL DEFAULT 'suspect'")
        if "severity_json" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity_json TEXT")
        if "ran_on" not in _columns(db, "cases"):
            db.execute("ALTER TABLE cases ADD COLUMN ran_on TEXT")
        db.execute(PENDING_TABLE)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


def check_divfuzz_store(db: sqlite3.Connection, path: Path) -> int:
    """Only reads: the schema version of a divfuzz store, or StoreError naming `path` when the file
    is another application's SQLite file, lacks a table or column, or is from a newer divfuzz."""
    tables = {r["name"] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise StoreError(f"{path}: an SQLite file, but not a divfuzz store (no meta table); left as it is")
    for table, columns in REQUIRED_COLUMNS.items():
        have = _columns(db, table) if table in tables else set()
        if not columns <= have:
            raise StoreError(
                f"{path}: an SQLite file with a meta table but not a divfuzz store (table {table!r} "
                f"{'lacks ' + ', '.join(sorted(columns - have)) if have else 'is missing'}); refused and left as it is"
            )
    row = _stored_version(db)
    if row is None:
        raise StoreError(f"{path}: no schema_version in its meta table: not a divfuzz store; left as it is")
    try:
        version = int(row["value"])
    except (TypeError, ValueError):
        raise StoreError(f"{path}: schema_version {row['value']!r} in its meta table is not an integer; left as it is") from None
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {version} is newer than this divfuzz")
    return version


def create_store_file(path: Path) -> None:
    """A new, empty divfuzz store at `path`, whole or not at all: built in a temporary file in the
    same folder (schema and `meta` in one transaction) and renamed into place. On any failure
    (a full disk) the temporary files are removed and StoreError says why; `path` is not created."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    db = None
    try:
        db = connect(str(tmp))
        db.execute("PRAGMA journal_mode=WAL")
        write_schema(db)
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
