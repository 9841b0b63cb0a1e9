"""The store file's name, tables and version: creating a store, recognising one, upgrading an older one.

Invariants:
- `STORE_NAME` is the one name of a campaign's store file inside its `--out` folder; every module
  that looks for a store imports it from here, and every command given a store (a campaign's
  folder or the file itself) finds it with `resolve_store`, which raises one `StoreError`;
- a new store file is made whole or not at all: its schema and `meta` are written to a temporary
  file beside it that is renamed into place (a full disk leaves no half-made store);
- a file that is not a divfuzz store (another application's SQLite file, a missing table or
  column, a non-integer or newer schema version, a trigger, a view or a table or index divfuzz
  never makes) is refused by `check_divfuzz_store`, which only reads;
- an older store is migrated in one transaction, here and nowhere else, and only by a command that
  writes: a reader refuses it (`refuse_old_schema`).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import sqlite3
import tempfile
from pathlib import Path

from divfuzz.fuzzer.store.connection import connect, transaction
from divfuzz.oracles.severity_policy import key_severity, severity_of
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.culprit import Culprit
from divfuzz.records.errors import StoreError
from divfuzz.records.verdict import Verdict

STORE_NAME = "divfuzz.sqlite"


def resolve_store(path: Path, *, purpose: str = "") -> Path:
    """The store file a command was given: `path` itself when it is a file, else `path/STORE_NAME`.
    `StoreError` naming the path looked at when there is no such file (the CLI exits 2);
    `purpose` ("for case 7") says what the store was wanted for."""
    path = Path(path)
    found = path if path.is_file() else path / STORE_NAME
    if not found.is_file():
        raise StoreError(f"{found}: no store here{f' {purpose}' if purpose else ''} "
                         f"(give a campaign's --out folder or its {STORE_NAME})")
    return found

# 2: buckets carry a severity (divfuzz.oracles.severity_policy) and its reason;
# 3: cases record the device they ran on (`ran_on`: 'cpu', 'cuda:1', in the driver's numbering);
# 4: raw bucket keys whose analysis (minimize + attribute) is still open (`pending_analyses`);
# 5: bucket keys are fields (`BucketKey.identity`, the rule and the culprit's fields in them), and
#    a bucket's severity is its key's;
# 6: a bug folder's issue.py re-run under other torch builds (`rechecks`, by `divfuzz recheck`).
SCHEMA_VERSION = 6

RECHECKS_TABLE = """
CREATE TABLE IF NOT EXISTS rechecks (      -- a bug folder's issue.py run under another torch (`divfuzz recheck`)
    bucket_id INTEGER NOT NULL REFERENCES buckets(id),
    torch_version TEXT NOT NULL,           -- what that interpreter's torch.__version__ said
    python TEXT NOT NULL,                  -- the interpreter's absolute path
    outcome TEXT NOT NULL,                 -- still fails | passes | errors (divfuzz.reports.issue_check.ScriptOutcome)
    detail TEXT NOT NULL,                  -- the run's exit code and last line
    checked_at REAL NOT NULL,
    PRIMARY KEY (bucket_id, torch_version, python)  -- the latest run of one interpreter and torch replaces the one before
)"""

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
    RECHECKS_TABLE,
)

# The tables (and the columns of each) that make a file a divfuzz store; checked before any write.
REQUIRED_COLUMNS = {
    "meta": {"key", "value"},
    "runs": {"id", "status", "seed", "device", "config_json", "options_json"},
    "cases": {"id", "run_id", "slot", "idx", "spec_digest", "spec_json", "verdict_json"},
    "buckets": {"id", "key", "key_json", "count", "folder"},
}


# What a divfuzz store's sqlite_master may name: its tables and its one index (SQLite's own
# `sqlite_autoindex_*`, `sqlite_sequence` and `sqlite_stat*` too). Anything else (a trigger, a
# view, another table or index) is refused by `check_divfuzz_store`: a trigger would run its own
# SQL inside divfuzz's writes, and no divfuzz writes one.
KNOWN_OBJECTS = {
    "table": {"meta", "runs", "cases", "buckets", "run_failures", "root_causes", "pending_analyses", "rechecks"},
    "index": {"cases_by_bucket"},
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


def migrate(db: sqlite3.Connection, path: Path | None = None) -> None:
    """Bring an older store to the current version, in one transaction. 1 -> 2: its buckets get a
    severity column. 2 -> 3: its cases get `ran_on`, NULL (unknown) for the cases already stored.
    3 -> 4: an empty `pending_analyses` table (every earlier store analysed inline, so no raw key
    is left open). 4 -> 5: every key becomes fields (`_convert_keys`). 5 -> 6: an empty
    `rechecks` table. A current store is not written to."""
    row = _stored_version(db)
    if row is not None and int(row["value"]) >= SCHEMA_VERSION:
        return
    version = int(row["value"]) if row is not None else SCHEMA_VERSION
    with transaction(db):
        columns = _columns(db, "buckets")
        if "severity" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity TEXT NOT NULL DEFAULT 'suspect'")
        if "severity_json" not in columns:
            db.execute("ALTER TABLE buckets ADD COLUMN severity_json TEXT")
        if "ran_on" not in _columns(db, "cases"):
            db.execute("ALTER TABLE cases ADD COLUMN ran_on TEXT")
        db.execute(PENDING_TABLE)
        db.execute(RECHECKS_TABLE)
        db.execute("CREATE TABLE IF NOT EXISTS root_causes (raw_key TEXT PRIMARY KEY, key_json TEXT NOT NULL)")
        if version < 5:
            _check_legacy_keys(db, path)
            _convert_keys(db)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


def _check_legacy_keys(db: sqlite3.Connection, path: Path | None) -> None:
    """Before schema 4 -> 5 converts a key, it must be a schema-4 key (a `signature`, no `ops`):
    a current store whose `schema_version` was lowered by hand would otherwise lose every key's
    ops and autocast and its remembered root causes. StoreError naming the row; nothing converted."""
    for table, id_column in (("buckets", "id"), ("pending_analyses", "raw_key"), ("root_causes", "raw_key")):
        for r in db.execute(f"SELECT {id_column} AS id, key_json FROM {table}"):
            try:
                old = json.loads(r["key_json"])
            except (TypeError, ValueError):
                old = None
            if not isinstance(old, dict) or "ops" in old or not isinstance(old.get("signature", ""), str):
                raise StoreError(
                    f"{path}: its meta table says schema {_stored_version(db)['value']}, but {table} row {r['id']!r} holds "
                    f"no schema-4 key in key_json ({'a current key, with ops' if isinstance(old, dict) else 'not a JSON object'}): "
                    "not upgraded; refused and left as it is")


def _legacy_key(old: dict, *, rule: str, culprit: CulpritKey | None, backward: bool | None) -> BucketKey:
    """A schema-4 key (kind, dtype, device type, a signature text, detail) as fields. Its
    signature was "raised: <site>", "ops (modes)" or "ops @ culprit text": read here once, for the
    migration, and nowhere else."""
    signature = str(old.get("signature", ""))
    ops_text, sep, culprit_text = signature.partition(" @ ")
    site, modes = "", []
    if ops_text.startswith("raised: ") and not sep:
        site, ops_text = ops_text.removeprefix("raised: "), ""
    elif ops_text.endswith(")") and " (" in ops_text:
        ops_text, _, mode_text = ops_text.removesuffix(")").partition(" (")
        modes = [m.strip() for m in mode_text.split(",")]
    if sep and culprit is None:
        culprit = CulpritKey(stage="unknown", detail=culprit_text)  # an older store's text, kept as it was
    ops = tuple(op for op in ops_text.split("+") if op and op != "(empty)")
    if not sep:
        ops = tuple(sorted(set(ops)))
    autocast = next((m.removeprefix("autocast ") for m in modes if m.startswith("autocast ")), "")
    return BucketKey(kind=str(old["kind"]), dtype=str(old["dtype"]), device_type=str(old["device_type"]), ops=ops,
                     autocast=autocast, backward=("backward" in modes) if backward is None else backward,
                     detail=str(old.get("detail", "")), site=site, rule=rule, culprit=culprit if sep else None)


def _convert_keys(db: sqlite3.Connection) -> None:
    """Schema 4 -> 5, inside the migration's transaction: each bucket's key becomes fields, its
    rule the stored reason's (or, for a store older than severities, its first case's verdict
    judged now), its culprit the stored culprit's fields, its severity its key's; then the pending
    analyses and the remembered root causes are keyed by the new identities."""
    new_text: dict[str, str] = {}
    for b in db.execute("SELECT id, key, key_json, severity_json, culprit_json, minimized_json, first_case_id FROM buckets").fetchall():
        reason = json.loads(b["severity_json"]) if b["severity_json"] else None
        if (reason is None or reason.get("rule") == "precision-knob") and b["first_case_id"] is not None:
            # judged now, without the switch: a key holds the rule its cases were rated by
            # before attribution (`key_severity` applies the switch)
            case = db.execute("SELECT verdict_json FROM cases WHERE id=?", (b["first_case_id"],)).fetchone()
            judged = severity_of(Verdict.from_dict(json.loads(case["verdict_json"]))) if case else None
            reason = judged.to_dict() if judged is not None else reason
        culprit = Culprit.from_dict(json.loads(b["culprit_json"])).key() if b["culprit_json"] else None
        minimized = json.loads(b["minimized_json"]) if b["minimized_json"] else None
        spec = (minimized or {}).get("spec") if isinstance(minimized, dict) else None
        backward = bool(spec.get("backward")) if isinstance(spec, dict) else None
        key = _legacy_key(json.loads(b["key_json"]), rule=(reason or {}).get("rule", ""), culprit=culprit, backward=backward)
        new_text[b["key"]] = key.identity()
        severity = key_severity(key).value
        db.execute("UPDATE buckets SET key=?, key_json=?, signature=?, severity=?, severity_json=? WHERE id=?",
                   (key.identity(), json.dumps(key.to_dict()), key.ops_text(), severity,
                    json.dumps(dict(reason, severity=severity)) if reason else None, b["id"]))
    keys_of = {old: json.loads(db.execute("SELECT key_json FROM buckets WHERE key=?", (new,)).fetchone()["key_json"])
               for old, new in new_text.items()}

    def converted(old_text: str, old_json: str) -> BucketKey:
        if old_text in keys_of:
            return BucketKey.from_dict(keys_of[old_text])
        return _legacy_key(json.loads(old_json), rule="", culprit=None, backward=None)

    for p in db.execute("SELECT raw_key, key_json FROM pending_analyses").fetchall():
        key = converted(p["raw_key"], p["key_json"])
        db.execute("UPDATE pending_analyses SET raw_key=?, key_json=? WHERE raw_key=?",
                   (key.identity(), json.dumps(key.to_dict()), p["raw_key"]))
    rows = db.execute("SELECT raw_key, key_json FROM root_causes").fetchall()
    db.execute("DELETE FROM root_causes")
    for r in rows:
        root = converted(_legacy_text(json.loads(r["key_json"])), r["key_json"])
        raw_identity = new_text.get(r["raw_key"]) or _legacy_raw_identity(r["raw_key"], root.rule)
        if raw_identity is not None:
            db.execute("INSERT OR REPLACE INTO root_causes(raw_key, key_json) VALUES (?, ?)", (raw_identity, json.dumps(root.to_dict())))


def _legacy_text(old: dict) -> str:
    """A schema-4 key's text, as schema 4 wrote it into its `key` columns."""
    detail = f" {old.get('detail')}" if old.get("detail") else ""
    return f"{old['kind']}{detail} \u00b7 {old['dtype']} \u00b7 {old['device_type']} \u00b7 {old.get('signature', '')}"


def _legacy_raw_identity(text: str, rule: str) -> str | None:
    """A schema-4 raw key's identity from its text alone (a remembered analysis whose raw bucket
    is gone): its text was `kind[ detail] · dtype · device · signature`."""
    parts = text.split(" \u00b7 ")
    if len(parts) != 4:
        return None
    head, dtype, device_type, signature = parts
    kind, _, detail = head.partition(" ")
    return _legacy_key({"kind": kind, "detail": detail, "dtype": dtype, "device_type": device_type, "signature": signature},
                       rule=rule, culprit=None, backward=None).identity()


def check_divfuzz_store(db: sqlite3.Connection, path: Path) -> int:
    """Only reads: the schema version of a divfuzz store, or StoreError naming `path` when the file
    is another application's SQLite file, lacks a table or column, is from a newer divfuzz, or
    holds a trigger, a view, or a table or index no divfuzz store has (`KNOWN_OBJECTS`)."""
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
    foreign = [f"{r['type']} {r['name']!r}" + (f" on {r['tbl_name']!r}" if r["type"] in ("trigger", "index") else "")
               for r in db.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name")
               if r["name"] not in KNOWN_OBJECTS.get(r["type"], ()) and not r["name"].startswith("sqlite_")]
    if foreign:
        shown = ", ".join(itertools.islice(foreign, 5)) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise StoreError(f"{path}: holds what no divfuzz store has: {shown} (a trigger or view would run its own SQL "
                         "when divfuzz reads or writes the store); refused and left as it is")
    return version


def refuse_old_schema(path: Path, version: int) -> None:
    """A command that only reads a store never upgrades it: StoreError naming the store and the
    writing commands that do (a fuzz campaign on it, in place; a merge, into a new store)."""
    if version < SCHEMA_VERSION:
        folder = Path(path).parent
        raise StoreError(
            f"{path}: store schema version {version} is older than this divfuzz's ({SCHEMA_VERSION}); a command that "
            f"only reads a store does not upgrade it, and it was left as it is: upgrade it in place with a writing "
            f"command (`divfuzz fuzz --out {folder}`), or into a copy (`divfuzz merge NEW_DIR {folder}`)")


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
