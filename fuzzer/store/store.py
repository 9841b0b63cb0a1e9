"""The SQLite store: runs, cases and buckets in one embedded file, and every write to it.

Invariants:
- every write is one `Store.transaction()` (`divfuzz.fuzzer.store.connection.transaction`): every
  case is committed with its bucket update, so a killed campaign loses at most the case in flight,
  and resuming skips what is stored; `divfuzz merge` runs the same methods inside its one
  transaction, so a merge is all or nothing;
- a new bucket's folder is written after its row is committed; a case that opened a bucket
  whose folder was never recorded (a full disk, a kill in between) is not "stored" for a resume
  (`stored_case`), and storing it again replaces it and its folder-less bucket, so the resume
  writes both: a bucket never stays without its folder;
- a new store file is made whole or not at all (`divfuzz.fuzzer.store.schema.create_store_file`);
- a bucket's key is unique across runs: a key seen in an earlier run is not new;
- opening a file that is not a divfuzz store (empty, another application's SQLite file, a
  non-integer schema version, a symlink) raises StoreError and writes nothing; `create=False`
  (readers such as `report`) opens it read-only (`mode=ro`) and never migrates it: a store that
  needs upgrading is refused there, naming the writing command that upgrades it; `open_input`
  (merge's inputs) never writes next to the input;
- every SQLite error of a method is a StoreError naming the file and saying what it is (corrupt,
  disk full, read-only), never a bare sqlite3 traceback; a row that does not decode is a
  "damaged row" naming the file;
- rows are read by column name (`sqlite3.Row`) into the named values of `divfuzz.fuzzer.store.rows`;
- a raw bucket key is either open (a `pending_analyses` row, its cases in the raw bucket) or filed
  (a `root_causes` row, its cases in the root-cause bucket), never both: `add_case_for_analysis`
  and `resolve_root_cause` each decide it in one transaction, so the buckets at the end are the
  same whether an analysis ran inline, in the analysis pool or later (`minimize --pending`);
- a bucket's severity and shown reason are given to the store as a value (`BucketSeverity`,
  judged above it by `divfuzz.fuzzer.campaign.bucket_folders.Filing`, or another store's as
  stored); the store derives none itself, and refuses a bucket without one. Only the migration
  of a store older than its keys' fields (`divfuzz.fuzzer.store.schema`) judges, once, on conversion.
"""

from __future__ import annotations

import functools
import inspect
import json
import shutil
import sqlite3
import threading
import time
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from divfuzz.fuzzer.store import connection
from divfuzz.fuzzer.store.cause_index import RootCauseIndex
from divfuzz.fuzzer.store.connection import connect, describe_sqlite_error, errors_named, sqlite_errors_named
from divfuzz.fuzzer.store.lock import refuse_if_live
from divfuzz.fuzzer.store.rows import (
    AnalysisIntake,
    BucketRow,
    CaseRow,
    Fields,
    PendingAnalysis,
    RecheckRow,
    RootCauseFiled,
    RootCauseRow,
    RunRow,
    case_summary,
)
from divfuzz.fuzzer.store.schema import (
    SCHEMA_VERSION,
    check_divfuzz_store,
    create_store_file,
    migrate,
    refuse_old_schema,
    write_schema,
)
from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import InternalError, StoreError
from divfuzz.records.severity import BucketSeverity, Severity
from divfuzz.records.safe_paths import check_plain, refuse_hard_link

SEVERITIES = tuple(s.value for s in Severity)
_CASE_PAGE = 500  # cases read at a time by `iter_cases` (a shard's store may not fit in memory)


class Store:
    def __init__(self, path: str | Path, *, create: bool = True, read_only: bool | None = None):
        """Open (or with `create`, make) a store. Without `create` the file must already be a
        divfuzz store, and it is opened read-only (SQLite's `mode=ro`; `immutable` too when no
        journal is beside it, so reading creates no `-wal`/`-shm` files): what every command that
        only reads (`report`, `diff`, `minimize CASE-ID`, `bench --breakdown`) opens. A store of
        an older schema is refused there, never upgraded (`refuse_old_schema`). A writing command
        on an existing store passes `create=False, read_only=False`: checked, then upgraded."""
        self.path = Path(path)
        self.read_only = (not create) if read_only is None else read_only
        self._lock = threading.RLock()
        journals = [self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal")]
        for part in (self.path, *journals):
            check_plain(part, what="store file")  # SQLite would follow a symlink, and block on a FIFO
        for part in ([] if self.read_only else [self.path]) + journals:  # a reader writes -shm too
            refuse_hard_link(part, what="store file")  # SQLite would write through a hard link
        if self.path.exists() and self.path.is_file() and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: an empty file, not a divfuzz store; refused and left as it is")
        if not self.path.exists():
            if not create or self.read_only:
                raise StoreError(f"{self.path}: no store here")
            create_store_file(self.path)
        self.db = None
        try:
            if self.read_only:
                wal, _, rollback = journals
                quiet = not (wal.exists() or rollback.exists())  # no writer's log to read
                uri = self.path.resolve().as_uri() + ("?mode=ro&immutable=1" if quiet else "?mode=ro")
                self.db = connect(uri, uri=True, check_same_thread=False, timeout=30)
            else:
                self.db = connect(str(self.path), check_same_thread=False, timeout=30)
            self._prepare(create=create and not self.read_only)
        except sqlite3.Error as e:
            if self.db is not None:
                self.db.close()
            raise StoreError(f"not a usable divfuzz store: {describe_sqlite_error(self.path, e)}") from None
        except StoreError:
            if self.db is not None:
                self.db.close()
            raise

    def _prepare(self, *, create: bool) -> None:
        """Only reads until the file is known to be a divfuzz store; then, with `create`, WAL mode
        and the tables it lacks; an older store (checked) is upgraded in place, a current one is
        not touched. Read-only, an older store is refused: nothing on a read path migrates."""
        version = check_divfuzz_store(self.db, self.path)
        if self.read_only:
            refuse_old_schema(self.path, version)
            return
        if create:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            write_schema(self.db)
        migrate(self.db, self.path)

    @classmethod
    @contextmanager
    def open_input(cls, path: Path, scratch: Path) -> Iterator["Store"]:
        """Another store, read only, writing nothing next to it (`divfuzz merge`'s inputs): opened
        immutable, or, when it holds a killed campaign's write-ahead log or is of an older schema,
        from a private copy in `scratch` (upgraded there). A store a campaign holds is refused.
        Its errors name `path`, never the copy."""
        path = Path(path)
        refuse_if_live(path)
        wal = Path(f"{path}-wal")
        store = cls.__new__(cls)
        store.path, store._lock, store.db, store.read_only = path, threading.RLock(), None, False
        try:
            try:
                if not (wal.exists() and wal.stat().st_size > 0):
                    store.db = connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
                    if check_divfuzz_store(store.db, path) < SCHEMA_VERSION:
                        store.db.close()
                        store.db = None
                if store.db is None:
                    copy = scratch / f"input-{len(list(scratch.iterdir()))}.sqlite"
                    shutil.copyfile(path, copy)
                    if wal.exists():
                        shutil.copyfile(wal, Path(f"{copy}-wal"))
                    store.db = connect(str(copy))
                    store._prepare(create=True)
            except OSError as e:
                raise StoreError(f"{path}: cannot read this store ({e})") from None
            except sqlite3.Error as e:
                raise StoreError(f"not a usable divfuzz store: {describe_sqlite_error(path, e)}") from None
            yield store
        finally:
            if store.db is not None:
                store.db.close()

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @contextmanager
    def transaction(self) -> Iterator["Store"]:
        """Every write of the block, or none (`connection.transaction`); inside an open one, joins it.
        Its own SQLite errors (a COMMIT on a full disk) are StoreError naming the file, as every
        method's are, whoever holds the block (`Filing` judges and stores in one)."""
        with self._lock, sqlite_errors_named(self.path), connection.transaction(self.db):
            yield self

    # ---- runs --------------------------------------------------------------------------------
    def _insert_run(self, *, started_at: float, finished_at: float | None, status: str, seed: int, device: str,
                    config_json: str, options_json: str, versions_json: str) -> int:
        return self.db.execute(
            "INSERT INTO runs(started_at, finished_at, status, seed, device, config_json, options_json, versions_json)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (started_at, finished_at, status, seed, device, config_json, options_json, versions_json),
        ).lastrowid

    def start_run(self, *, seed: int, device: str, config: dict, options: dict, versions: dict) -> tuple[int, bool]:
        """A new run, or the unfinished run with the same seed, device, config and options (resumed)."""
        cfg, opts = json.dumps(config, sort_keys=True), json.dumps(options, sort_keys=True)
        with self.transaction():
            row = self.db.execute(
                "SELECT id FROM runs WHERE status != 'finished' AND seed=? AND device=? AND config_json=?"
                " AND options_json=? ORDER BY id DESC LIMIT 1",
                (seed, device, cfg, opts),
            ).fetchone()
            if row:
                self.db.execute("UPDATE runs SET status='running' WHERE id=?", (row["id"],))
                return row["id"], True
            return self._insert_run(started_at=time.time(), finished_at=None, status="running", seed=seed,
                                    device=device, config_json=cfg, options_json=opts,
                                    versions_json=json.dumps(versions, sort_keys=True)), False

    def unfinished_runs(self, *, seed: int, device: str, config: dict) -> list[tuple[int, dict]]:
        """(id, options) of the runs not finished with this seed, device and config, newest first:
        what a campaign whose worker count was not given may resume (`start_run` matches options too)."""
        cfg = json.dumps(config, sort_keys=True)
        with self._lock:
            rows = self.db.execute("SELECT id, options_json FROM runs WHERE status != 'finished' AND seed=? AND device=?"
                                   " AND config_json=? ORDER BY id DESC", (seed, device, cfg)).fetchall()
        return [(Fields(r, "runs").int("id"), Fields(r, "runs").json("options_json")) for r in rows]

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        with self.transaction():
            self.db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?", (status, time.time(), run_id))

    def fail_run(self, run_id: int, error: str, log_path: str | None) -> None:
        """Mark a run `failed` by divfuzz's own error (kept apart from findings), atomically."""
        with self.transaction():
            self.db.execute("UPDATE runs SET status='failed', finished_at=? WHERE id=?", (time.time(), run_id))
            self.db.execute(
                "INSERT OR REPLACE INTO run_failures(run_id, error, log_path) VALUES (?, ?, ?)", (run_id, error, log_path)
            )

    def run_failure(self, run_id: int) -> tuple[str, str | None] | None:
        """(error, log path) of a failed run, or None."""
        with self._lock:
            r = self.db.execute("SELECT error, log_path FROM run_failures WHERE run_id=?", (run_id,)).fetchone()
        if r is None:
            return None
        f = Fields(r, "run_failures", "run_id")
        return f.text("error"), f.text("log_path", null=True)

    def run_rows(self) -> list[RunRow]:
        """Every run as stored, oldest first."""
        with self._lock:
            rows = self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [RunRow.from_row(r) for r in rows]

    def run_info(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            r = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no run {run_id}")
        return RunRow.from_row(r).info()

    def latest_run_id(self) -> int | None:
        with self._lock:
            return self.db.execute("SELECT max(id) AS id FROM runs").fetchone()["id"]

    # ---- cases -------------------------------------------------------------------------------
    def stored_case(self, run_id: int, slot: int, idx: int) -> tuple[str, float] | None:
        """(digest, score) of a stored case, or None when it must run (again): not stored, or it
        opened a bucket whose folder was never recorded."""
        with self._lock:
            r = self.db.execute(
                "SELECT c.spec_digest, c.score, b.first_case_id = c.id AND b.folder IS NULL AS unfinished FROM cases c"
                " LEFT JOIN buckets b ON b.id = c.bucket_id WHERE c.run_id=? AND c.slot=? AND c.idx=?", (run_id, slot, idx)
            ).fetchone()
        return (r["spec_digest"], r["score"]) if r and not r["unfinished"] else None

    def _drop_unfinished_case(self, run_id: int, slot: int, idx: int) -> None:
        """Inside a transaction: the earlier copy of a case run again (`stored_case`), its pending
        analysis, and its bucket when no other case is in it and it has no folder."""
        row = self.db.execute("SELECT id, bucket_id FROM cases WHERE run_id=? AND slot=? AND idx=?", (run_id, slot, idx)).fetchone()
        if row is None:
            return
        self.db.execute("DELETE FROM pending_analyses WHERE case_id=?", (row["id"],))
        self.db.execute("DELETE FROM cases WHERE id=?", (row["id"],))
        if row["bucket_id"] is not None:
            self.db.execute("UPDATE buckets SET count=count-1 WHERE id=?", (row["bucket_id"],))
            self.db.execute("DELETE FROM buckets WHERE id=? AND count<=0 AND folder IS NULL", (row["bucket_id"],))

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
        judged: BucketSeverity | None = None,
        ran_on: str | None = None,
    ) -> tuple[int, int | None, bool]:
        """Store one case (and bump its bucket) atomically. Returns (case id, bucket id, new bucket?).
        A case with a `key` comes with its bucket's verdict, `judged` (`BucketSeverity`): a new
        bucket stores it, a known one keeps its own (and takes its reason when it had none).
        Without it, InternalError: the store derives no severity."""
        case = dict(run_id=run_id, slot=slot, idx=idx, spec_digest=spec_digest, spec_json=spec_json, device=device,
                    config=config, verdict=verdict, score=score, wall_s=wall_s, finding_kind=finding_kind, ran_on=ran_on)
        with self.transaction():
            return self._insert_case(case, key, triage, judged)

    def key_for_case(self, raw_key: BucketKey) -> BucketKey:
        """The key a finding's case of `raw_key` is stored under: its root cause when one is filed
        (`root_causes`), else `raw_key`. Read it in the transaction that stores the case
        (`add_case_for_analysis` checks it)."""
        with self._lock:
            known = self._root_cause_locked(raw_key)
        return known if known is not None else raw_key

    def add_case_for_analysis(self, *, raw_key: BucketKey, key: BucketKey, judged: BucketSeverity, triage: str = "",
                              **case) -> AnalysisIntake:
        """Store a finding's case at once, before its analysis: under its root-cause key when one
        is known (`root_causes`), else under `raw_key` with a `pending_analyses` row for it (one
        per raw key: `queued` says this case opened it). `key` is that key as the caller read it
        (`key_for_case`) and `judged` its bucket's verdict; the caller holds the transaction
        around both, and this one checks `key` again: a case never lands under a raw key whose
        root cause is already filed (`resolve_root_cause`). InternalError (a caller's bug) when
        `key` is not the key the store files `raw_key` under."""
        with self.transaction():
            known = self._root_cause_locked(raw_key)
            if key != (known if known is not None else raw_key):
                raise InternalError(f"{self.path}: a case of {raw_key} given key {key}, but the store files it under "
                                    f"{known if known is not None else raw_key}: read the key (`key_for_case`) in the "
                                    "transaction that stores the case")
            case_id, bucket_id, is_new = self._insert_case(case, key, triage, judged)
            queued = known is None and self._queue_pending(raw_key, case_id, time.time())
        return AnalysisIntake(case_id, bucket_id, is_new, key, queued)

    def _insert_case_row(self, *, run_id: int, slot: int, idx: int, spec_digest: str, spec_json: str, device: str,
                         config_json: str, status: str, finding_kind: str | None, bucket_id: int | None, score: float,
                         verdict_json: str, wall_s: float, created_at: float, ran_on: str | None) -> int:
        return self.db.execute(
            "INSERT INTO cases(run_id, slot, idx, spec_digest, spec_json, device, config_json, status,"
            " finding_kind, bucket_id, score, verdict_json, wall_s, created_at, ran_on)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, slot, idx, spec_digest, spec_json, device, config_json, status, finding_kind, bucket_id, score,
             verdict_json, wall_s, created_at, ran_on),
        ).lastrowid

    def _insert_case(self, case: dict, key: BucketKey | None, triage: str,
                     judged: BucketSeverity | None) -> tuple[int, int | None, bool]:
        """Inside a transaction: the case row and its bucket's update. `judged` is the bucket's
        verdict (`BucketSeverity`), required with a key: a new bucket stores it as given."""
        if key is not None and not isinstance(judged, BucketSeverity):
            raise InternalError(f"a case of bucket {key} came without its bucket's verdict (a BucketSeverity): the store "
                                "derives no severity itself; judge it above the store (severity_policy.bucket_severity)")
        self._drop_unfinished_case(case["run_id"], case["slot"], case["idx"])
        now = time.time()
        bucket_id, is_new = None, False
        if key is not None:
            bucket_id, is_new = self._touch_bucket(key, triage, case["run_id"], now, judged)
        case_id = self._insert_case_row(
            run_id=case["run_id"], slot=case["slot"], idx=case["idx"], spec_digest=case["spec_digest"],
            spec_json=case["spec_json"], device=case["device"], config_json=json.dumps(case["config"], sort_keys=True),
            status=case["verdict"]["status"], finding_kind=case["finding_kind"], bucket_id=bucket_id,
            score=case["score"], verdict_json=json.dumps(case["verdict"]), wall_s=case["wall_s"], created_at=now,
            ran_on=case.get("ran_on"),
        )
        if is_new:
            self.db.execute("UPDATE buckets SET first_case_id=? WHERE id=?", (case_id, bucket_id))
        return case_id, bucket_id, is_new

    def _insert_bucket(self, key: BucketKey, *, triage: str, first_seen: float, last_seen: float, first_run_id: int,
                       count: int, judged: BucketSeverity, minimized_json: str | None = None,
                       culprit_json: str | None = None) -> int:
        """A bucket row, with the severity and reason it was given (`judged`), stored as they are."""
        severity = judged.severity.value
        reason_json = json.dumps(judged.reason) if judged.reason is not None else None
        return self.db.execute(
            "INSERT INTO buckets(key, key_json, kind, dtype, device_type, signature, detail, triage, first_seen,"
            " last_seen, first_run_id, count, minimized_json, culprit_json, severity, severity_json)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (key.identity(), json.dumps(key.to_dict()), key.kind, key.dtype, key.device_type, key.ops_text(), key.detail,
             triage, first_seen, last_seen, first_run_id, count, minimized_json, culprit_json, severity, reason_json),
        ).lastrowid

    def _bucket_id(self, key: BucketKey) -> int | None:
        row = self.db.execute("SELECT id FROM buckets WHERE key=?", (key.identity(),)).fetchone()
        return row["id"] if row else None

    def _touch_bucket(self, key: BucketKey, triage: str, run_id: int, now: float, judged: BucketSeverity) -> tuple[int, bool]:
        bucket_id = self._bucket_id(key)
        if bucket_id is not None:
            self.db.execute("UPDATE buckets SET count=count+1, last_seen=? WHERE id=?", (now, bucket_id))
            if judged.reason is not None:  # the first case stored with a reason shows it
                self.db.execute("UPDATE buckets SET severity_json=? WHERE id=? AND severity_json IS NULL",
                                (json.dumps(judged.reason), bucket_id))
            return bucket_id, False
        return self._insert_bucket(key, triage=triage, first_seen=now, last_seen=now, first_run_id=run_id, count=1,
                                   judged=judged), True

    def case(self, case_id: int) -> CaseRow:
        with self._lock:
            r = self.db.execute(f"SELECT {CaseRow.COLUMNS} FROM cases WHERE id=?", (case_id,)).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no case {case_id}")
        return CaseRow.from_row(r)

    def case_at(self, run_id: int, slot: int, idx: int) -> CaseRow | None:
        """The case stored at a run's slot and index, or None."""
        with self._lock:
            r = self.db.execute(f"SELECT {CaseRow.COLUMNS} FROM cases WHERE run_id=? AND slot=? AND idx=?",
                                (run_id, slot, idx)).fetchone()
        return CaseRow.from_row(r) if r else None

    def iter_cases(self) -> Iterator[CaseRow]:
        """Every case in the order stored, read a page at a time."""
        after = 0
        while True:
            with self._lock:
                rows = self.db.execute(f"SELECT {CaseRow.COLUMNS} FROM cases WHERE id > ? ORDER BY id LIMIT ?",
                                       (after, _CASE_PAGE)).fetchall()
            if not rows:
                return
            after = rows[-1]["id"]
            for r in rows:
                yield CaseRow.from_row(r)
            del rows, r  # else the next page is read while this one is still held: two pages at the peak

    def run_stats(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            by_status = {r["status"]: r["n"] for r in self.db.execute(
                "SELECT status, count(*) AS n FROM cases WHERE run_id=? GROUP BY status", (run_id,))}
            wall = self.db.execute("SELECT coalesce(sum(wall_s),0) AS wall FROM cases WHERE run_id=?", (run_id,)).fetchone()["wall"]
        return {"cases": sum(by_status.values()), "by_status": by_status, "case_wall_s": wall}

    # ---- root causes (so a resumed campaign does not minimize again) ---------------------------
    def root_cause_of(self, raw_key: BucketKey) -> BucketKey | None:
        with self._lock:
            return self._root_cause_locked(raw_key)

    def _root_cause_locked(self, raw_key: BucketKey) -> BucketKey | None:
        r = self.db.execute("SELECT key_json FROM root_causes WHERE raw_key=?", (raw_key.identity(),)).fetchone()
        return Fields(r, "root_causes", "raw_key").key() if r else None

    def _file_root_cause(self, raw_identity: str, key: BucketKey, *, replace: bool) -> None:
        self.db.execute(f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO root_causes(raw_key, key_json) VALUES (?, ?)",
                        (raw_identity, json.dumps(key.to_dict())))

    def remember_root_cause(self, raw_key: BucketKey, key: BucketKey) -> None:
        with self.transaction():
            self._file_root_cause(raw_key.identity(), key, replace=True)

    def root_cause_rows(self) -> list[RootCauseRow]:
        """Every remembered analysis (raw key -> root-cause key)."""
        with self._lock:
            rows = self.db.execute("SELECT raw_key, key_json FROM root_causes ORDER BY raw_key").fetchall()
        return [RootCauseRow(Fields(r, "root_causes", "raw_key").text("raw_key"), Fields(r, "root_causes", "raw_key").key())
                for r in rows]

    def bucket_of_key(self, key: BucketKey) -> BucketRow | None:
        """The bucket stored under `key`, or None."""
        with self._lock:
            r = self.db.execute(f"SELECT {BucketRow.COLUMNS} FROM buckets WHERE key=?", (key.identity(),)).fetchone()
        return BucketRow.from_row(r) if r else None

    def resolve_root_cause(self, raw_key: BucketKey, key: BucketKey, *, judged: BucketSeverity) -> RootCauseFiled:
        """File an analysis: `raw_key`'s root cause is `key`. One transaction: remember it, close
        the raw key's pending analysis, and move the cases stored under the raw key into the
        root-cause bucket (the raw bucket is renamed when the root-cause bucket is new, else merged
        into it: counts add, first/last seen widen). A renamed bucket takes `judged`, the
        root-cause bucket's verdict its filer judged from the raw bucket's reason
        (`divfuzz.fuzzer.campaign.bucket_folders.Filing`); a known one keeps its own.

        The end state depends only on (raw key, root-cause key) and the cases stored: the same
        whether the analysis ran inline, in the pool or later (`minimize --pending`)."""
        with self.transaction():
            self._file_root_cause(raw_key.identity(), key, replace=True)
            self.db.execute("DELETE FROM pending_analyses WHERE raw_key=?", (raw_key.identity(),))
            return self._move_bucket(raw_key, key, judged)

    def _move_bucket(self, raw_key: BucketKey, key: BucketKey, judged: BucketSeverity) -> RootCauseFiled:
        raw = self.db.execute("SELECT id, count, first_seen, last_seen FROM buckets WHERE key=?",
                              (raw_key.identity(),)).fetchone()
        root = self.db.execute("SELECT id, severity FROM buckets WHERE key=?", (key.identity(),)).fetchone()
        if raw is None or raw_key == key:  # nothing stored under the raw key (inline analysis)
            return RootCauseFiled(root["id"] if root else None, created=False, raw_bucket_id=None)
        if root is None:
            severity = judged.severity.value
            self.db.execute("UPDATE buckets SET key=?, key_json=?, kind=?, dtype=?, device_type=?, signature=?, detail=?,"
                            " severity=?, severity_json=? WHERE id=?",
                            (key.identity(), json.dumps(key.to_dict()), key.kind, key.dtype, key.device_type, key.ops_text(),
                             key.detail, severity, json.dumps(judged.reason) if judged.reason else None, raw["id"]))
            bucket_id, created = raw["id"], True
        else:
            bucket_id, created, severity = root["id"], False, root["severity"]
            self.db.execute("UPDATE cases SET bucket_id=? WHERE bucket_id=?", (bucket_id, raw["id"]))
            self.db.execute("UPDATE buckets SET count=count+?, first_seen=min(first_seen, ?), last_seen=max(last_seen, ?)"
                            " WHERE id=?", (raw["count"], raw["first_seen"], raw["last_seen"], bucket_id))
            self.db.execute("DELETE FROM buckets WHERE id=?", (raw["id"],))
        return RootCauseFiled(bucket_id, created=created, raw_bucket_id=raw["id"], severity=severity)

    def pending_already_filed(self) -> list[tuple[BucketKey, BucketKey]]:
        """(raw key, root-cause key) of every pending raw key that `root_causes` now files (another
        shard analysed it, `divfuzz merge`), in the order queued: what `close_pending` closes."""
        with self._lock:
            rows = self.db.execute("SELECT p.key_json AS raw_json, r.key_json AS root_json FROM pending_analyses p"
                                   " JOIN root_causes r ON r.raw_key = p.raw_key ORDER BY p.case_id").fetchall()
        return [(Fields(r, "pending_analyses", "raw_key").key("raw_json"), Fields(r, "root_causes", "raw_key").key("root_json"))
                for r in rows]

    def close_pending(self, raw_key: BucketKey, key: BucketKey, *, judged: BucketSeverity) -> RootCauseFiled:
        """A pending raw key that `root_causes` files under `key` (`pending_already_filed`),
        resolved as `resolve_root_cause` would, its remembered root cause left as stored: its
        pending row goes, its cases move into the root-cause bucket (`judged` as there).
        Restores the invariant that a raw key is open or filed, never both. Joins the caller's
        transaction when one is open."""
        with self.transaction():
            self.db.execute("DELETE FROM pending_analyses WHERE raw_key=?", (raw_key.identity(),))
            return self._move_bucket(raw_key, key, judged)

    def _queue_pending(self, raw_key: BucketKey, case_id: int, queued_at: float) -> bool:
        """Inside a transaction: open `raw_key`'s analysis on `case_id` unless it is open already."""
        return self.db.execute(
            "INSERT OR IGNORE INTO pending_analyses(raw_key, key_json, case_id, queued_at) VALUES (?,?,?,?)",
            (raw_key.identity(), json.dumps(raw_key.to_dict()), case_id, queued_at),
        ).rowcount == 1

    def pending_analyses(self) -> list[PendingAnalysis]:
        """The raw keys whose analysis is still open, oldest first, each with the case to minimize."""
        with self._lock:
            rows = self.db.execute("SELECT key_json, case_id, queued_at FROM pending_analyses ORDER BY case_id").fetchall()
        pending = []
        for r in rows:
            f = Fields(r, "pending_analyses", "raw_key")
            pending.append(PendingAnalysis(f.key(), f.int("case_id"), f.real("queued_at")))
        return pending

    def pending_count(self) -> int:
        with self._lock:
            return self.db.execute("SELECT count(*) AS n FROM pending_analyses").fetchone()["n"]

    def check_stored_keys(self) -> None:
        """ValueError naming the row when a bucket's or a pending analysis's key text is not the
        key its JSON decodes to (what `merge` matches buckets and analyses by)."""
        with self._lock:
            for table, row_id, column in (("buckets", "id", "key"), ("pending_analyses", "raw_key", "raw_key")):
                for r in self.db.execute(f"SELECT {row_id} AS id, {column} AS text, key_json FROM {table}"):
                    f = Fields(r, table)
                    if f.key().identity() != r["text"]:
                        raise f.bad(column, f"the key {r['text']!s:.120} does not match its key_json")

    # ---- buckets -----------------------------------------------------------------------------
    def set_bucket_folder(self, bucket_id: int, folder: str) -> None:
        with self.transaction():
            self.db.execute("UPDATE buckets SET folder=? WHERE id=?", (folder, bucket_id))

    def repair_interrupted_buckets(self) -> list[int]:
        """After a kill (before a campaign on this store draws): every bucket points at a stored
        case. One transaction: a bucket whose first case is gone (a case dropped to run again,
        `_drop_unfinished_case`, while another slot's case had joined its bucket) points at its
        earliest stored case; a bucket with no stored case left is removed. Returns the ids of the
        buckets that have no folder recorded and were opened by a run that did not finish (killed,
        interrupted or failed), for the caller to write (`bucket_folders`); a finished run's
        bucket without a folder (a merged shard's folder that was missing) is left as it is."""
        with self.transaction():
            dangling = self.db.execute(
                "SELECT b.id, (SELECT min(c.id) FROM cases c WHERE c.bucket_id = b.id) AS earliest FROM buckets b"
                " WHERE b.first_case_id IS NULL OR NOT EXISTS (SELECT 1 FROM cases c WHERE c.id = b.first_case_id)").fetchall()
            for row in dangling:
                if row["earliest"] is None:
                    self.db.execute("DELETE FROM buckets WHERE id=?", (row["id"],))
                else:
                    self.db.execute("UPDATE buckets SET first_case_id=? WHERE id=?", (row["earliest"], row["id"]))
            return [r["id"] for r in self.db.execute(
                "SELECT b.id FROM buckets b JOIN cases c ON c.id = b.first_case_id JOIN runs r ON r.id = c.run_id"
                " WHERE b.folder IS NULL AND r.status != 'finished' ORDER BY b.id")]

    def set_bucket_analysis(self, bucket_id: int, *, minimized: dict | None, culprit: dict | None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE buckets SET minimized_json=?, culprit_json=? WHERE id=?",
                (json.dumps(minimized) if minimized else None, json.dumps(culprit) if culprit else None, bucket_id),
            )

    def buckets(self, *, run_id: int | None = None) -> list[BucketRow]:
        """All buckets, or those that a run's cases fell into."""
        q = f"SELECT {BucketRow.COLUMNS} FROM buckets"
        args: tuple = ()
        if run_id is not None:
            q += " WHERE id IN (SELECT DISTINCT bucket_id FROM cases WHERE run_id=? AND bucket_id IS NOT NULL)"
            args = (run_id,)
        with self._lock:
            rows = self.db.execute(q + " ORDER BY id", args).fetchall()
        return [BucketRow.from_row(r) for r in rows]

    def bucket(self, bucket_id: int) -> BucketRow:
        with self._lock:
            r = self.db.execute(f"SELECT {BucketRow.COLUMNS} FROM buckets WHERE id=?", (bucket_id,)).fetchone()
        if r is None:
            raise StoreError(f"{self.path}: no bucket {bucket_id}")
        return BucketRow.from_row(r)

    # ---- bug folders re-run under other torch builds (`divfuzz recheck`) -----------------------
    def record_recheck(self, row: RecheckRow) -> None:
        """One bucket's issue.py run under another torch, replacing an earlier run of the same interpreter and version."""
        with self.transaction():
            self.db.execute(f"INSERT OR REPLACE INTO rechecks({RecheckRow.COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                            (row.bucket_id, row.torch_version, row.python, row.outcome, row.detail, row.checked_at))

    def rechecks(self, *, bucket_id: int | None = None) -> list[RecheckRow]:
        """Every recorded recheck (or one bucket's), by bucket, then oldest first."""
        q, args = f"SELECT {RecheckRow.COLUMNS} FROM rechecks", ()
        if bucket_id is not None:
            q, args = q + " WHERE bucket_id=?", (bucket_id,)
        with self._lock:
            rows = self.db.execute(q + " ORDER BY bucket_id, checked_at", args).fetchall()
        return [RecheckRow.from_row(r) for r in rows]

    # ---- folding another store in (`divfuzz merge`: each joins the merge's one transaction) -----
    def import_run(self, run: RunRow) -> tuple[int, bool]:
        """Another store's run: (its id here, whether it was here already: same start, seed,
        device, config, options and versions)."""
        with self.transaction():
            known = self.db.execute(
                "SELECT id FROM runs WHERE started_at=? AND seed=? AND device=? AND config_json=? AND options_json=?"
                " AND versions_json=?",
                (run.started_at, run.seed, run.device, run.config_json, run.options_json, run.versions_json),
            ).fetchone()
            if known:
                return known["id"], True
            return self._insert_run(started_at=run.started_at, finished_at=run.finished_at, status=run.status,
                                    seed=run.seed, device=run.device, config_json=run.config_json,
                                    options_json=run.options_json, versions_json=run.versions_json), False

    def import_run_failure(self, run_id: int, error: str, log_path: str | None) -> None:
        """Why a run copied from another store failed, unless this store knows already."""
        with self.transaction():
            self.db.execute("INSERT OR IGNORE INTO run_failures(run_id, error, log_path) VALUES (?,?,?)",
                            (run_id, error, log_path))

    def import_bucket(self, bucket: BucketRow, first_run_id: int) -> tuple[int, bool]:
        """Another store's bucket, by key: (its id here, new?). A new one is copied with no cases
        (`recount_bucket` counts them once they are copied); a known one widens its first/last
        seen, takes the more severe severity, and its analysis when it has none."""
        minimized = json.dumps(bucket.minimized) if bucket.minimized is not None else None
        culprit = json.dumps(bucket.culprit) if bucket.culprit is not None else None
        severity_json = json.dumps(bucket.severity_reason) if bucket.severity_reason is not None else None
        with self.transaction():
            out_id = self._bucket_id(bucket.key)
            if out_id is None:  # its verdict as the other store holds it: read, never judged again
                return self._insert_bucket(bucket.key, triage=bucket.triage, first_seen=bucket.first_seen,
                                           last_seen=bucket.last_seen, first_run_id=first_run_id, count=0,
                                           judged=BucketSeverity(Severity(bucket.severity), bucket.severity_reason),
                                           minimized_json=minimized, culprit_json=culprit), True
            out = self.bucket(out_id)
            if bucket.first_seen < out.first_seen:
                self.db.execute("UPDATE buckets SET first_seen=?, first_run_id=? WHERE id=?",
                                (bucket.first_seen, first_run_id, out_id))
            if bucket.last_seen > out.last_seen:
                self.db.execute("UPDATE buckets SET last_seen=? WHERE id=?", (bucket.last_seen, out_id))
            if severity_json is not None and (out.severity_reason is None
                                              or Severity(bucket.severity).rank < Severity(out.severity).rank):
                self.db.execute("UPDATE buckets SET severity=?, severity_json=? WHERE id=?",
                                (bucket.severity, severity_json, out_id))
            if out.minimized is None and minimized is not None:
                self.db.execute("UPDATE buckets SET minimized_json=?, culprit_json=? WHERE id=?", (minimized, culprit, out_id))
            return out_id, False

    def import_case(self, case: CaseRow, run_id: int, bucket_id: int | None) -> int:
        """Another store's case, as it was stored, into run `run_id` and bucket `bucket_id` here
        (the caller checked with `case_at` that its slot is free)."""
        with self.transaction():
            return self._insert_case_row(
                run_id=run_id, slot=case.slot, idx=case.idx, spec_digest=case.spec_digest, spec_json=case.spec_json,
                device=case.device, config_json=json.dumps(case.config, sort_keys=True), status=case.status,
                finding_kind=case.finding_kind, bucket_id=bucket_id, score=case.score,
                verdict_json=json.dumps(case.verdict), wall_s=case.wall_s, created_at=case.created_at, ran_on=case.ran_on,
            )

    def import_root_cause(self, filed: RootCauseRow) -> None:
        """Another store's remembered analysis, unless this store remembers that raw key already."""
        with self.transaction():
            self._file_root_cause(filed.raw_key, filed.key, replace=False)

    def import_pending(self, pending: PendingAnalysis, case_id: int) -> None:
        """Another store's open analysis, on its case copied here as `case_id` (one per raw key:
        the first kept). A raw key this store files already is closed by `close_pending_already_filed`."""
        with self.transaction():
            self._queue_pending(pending.raw_key, case_id, pending.queued_at)

    def recount_bucket(self, bucket_id: int) -> None:
        """A bucket's count and first case, from the cases in it."""
        with self.transaction():
            self.db.execute("UPDATE buckets SET count=(SELECT count(*) FROM cases WHERE bucket_id=?) WHERE id=?",
                            (bucket_id, bucket_id))
            self.db.execute("UPDATE buckets SET first_case_id=(SELECT id FROM cases WHERE bucket_id=?"
                            " ORDER BY created_at, id LIMIT 1) WHERE id=?", (bucket_id, bucket_id))

    # ---- read-only queries for reports (`report --html`, `diff`) -----------------------------
    def runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first: what `run_info` gives plus its options and its case count."""
        with self._lock:
            rows = self.db.execute(
                "SELECT r.*, (SELECT count(*) FROM cases c WHERE c.run_id = r.id) AS cases FROM runs r ORDER BY r.id"
            ).fetchall()
        runs = []
        for r in rows:
            info = RunRow.from_row(r).info()
            versions = info.pop("versions")
            runs.append({**info, "options": Fields(r, "runs").json("options_json"), "versions": versions, "cases": r["cases"]})
        return runs

    def has_bucket(self, bucket_id: int) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM buckets WHERE id=?", (bucket_id,)).fetchone() is not None

    def has_run(self, run_id: int) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    _CASE_SUMMARY = ("id", "run_id", "created_at", "wall_s", "status", "finding_kind", "bucket_id", "spec_digest",
                     "spec_json")

    def case_summaries(self, *, run_id: int | None = None) -> list[dict[str, Any]]:
        """Every case (or a run's), in the order stored, as dicts with the keys of `_CASE_SUMMARY`
        and `verdict` (spec as stored JSON text, verdict decoded): what reports draw (coverage,
        timings, error plots) and what `diff` matches replays on."""
        q = f"SELECT {', '.join(self._CASE_SUMMARY)}, verdict_json FROM cases"
        args: tuple = ()
        if run_id is not None:
            q += " WHERE run_id=?"
            args = (run_id,)
        with self._lock:
            rows = self.db.execute(q + " ORDER BY id", args).fetchall()
        return [case_summary(r, self._CASE_SUMMARY) for r in rows]

    def iter_case_summaries(self, *, run_id: int | None = None, bucket_id: int | None = None) -> Iterator[dict[str, Any]]:
        """`case_summaries` (of a run, of a bucket) one at a time, by id, read a page at a time: a
        report of a store of any size holds one page of cases, not the store (`divfuzz.reports.html`)."""
        after = 0
        where, scope = _case_scope(run_id, bucket_id)
        while True:
            with self._lock:
                rows = self.db.execute(f"SELECT {', '.join(self._CASE_SUMMARY)}, verdict_json FROM cases WHERE id > ?{where}"
                                       " ORDER BY id LIMIT ?", (after, *scope, _CASE_PAGE)).fetchall()
            if not rows:
                return
            after = rows[-1]["id"]
            for r in rows:
                yield case_summary(r, self._CASE_SUMMARY)
            del rows, r  # else the next page is read while this one is still held: two pages at the peak

    def _streamed(self, query: str, args: tuple) -> Iterator[sqlite3.Row]:
        """The rows of one query, fetched a page at a time from one cursor: for an order no index
        gives (SQLite sorts once, spilling to its temp files, and hands the rows over in order)."""
        with self._lock:
            cursor = self.db.execute(query, args)
        try:
            while True:
                with self._lock:
                    rows = cursor.fetchmany(_CASE_PAGE)
                if not rows:
                    return
                yield from rows
                del rows  # else the next page is fetched while this one is still held
        finally:
            cursor.close()

    def case_count(self, *, run_id: int | None = None, bucket_id: int | None = None, opened: bool = False) -> int:
        """How many cases (of a run, of a bucket) are stored; with `opened`, how many of them opened
        their bucket (its first case)."""
        where, scope = _case_scope(run_id, bucket_id, opened=opened)
        with self._lock:
            return self.db.execute(f"SELECT count(*) AS n FROM cases WHERE 1{where}", scope).fetchone()["n"]

    def iter_case_times(self, *, run_id: int | None = None, bucket_id: int | None = None,
                        opened: bool = False) -> Iterator[float]:
        """The store times (`created_at`) of the cases `case_count` counts, earliest first, streamed:
        what a report's campaign plots draw over time, without holding a time per case."""
        where, scope = _case_scope(run_id, bucket_id, opened=opened)
        for r in self._streamed(f"SELECT created_at FROM cases WHERE 1{where} ORDER BY created_at", scope):
            yield Fields(r, "cases", "created_at").real("created_at")

    def iter_case_specs(self, *, run_id: int | None = None) -> Iterator[tuple[str, int | None, str | None]]:
        """Each case's (spec as stored JSON, bucket id, its bucket's severity), a bucket's cases
        together (by bucket, then id: the index on cases' buckets gives that order), streamed: what
        the coverage table counts (`divfuzz.generators.coverage.op_coverage(grouped=True)`)."""
        where, scope = _case_scope(run_id, None)
        for r in self._streamed("SELECT cases.id, cases.spec_json, cases.bucket_id, b.severity FROM cases"
                                f" LEFT JOIN buckets b ON b.id = cases.bucket_id WHERE 1{where} ORDER BY cases.bucket_id, cases.id",
                                scope):
            yield (Fields(r, "cases").spec_text(), Fields(r, "cases").int("bucket_id", null=True),
                   Fields(r, "buckets", "bucket_id").text("severity", null=True, choices=SEVERITIES))

    def root_cause_index(self, *, run_id: int | None = None, bucket_id: int | None = None,
                         new_only: bool = False) -> RootCauseIndex:
        """The buckets in scope (a run's, one bucket, or all) filed by root cause in SQLite's temp
        tables (`divfuzz.fuzzer.store.cause_index`): what a report reads instead of every bucket
        row. Use it in a `with` block; it drops its tables at the end."""
        return RootCauseIndex(self.db, self._lock, self.path, run_id=run_id, bucket_id=bucket_id, new_only=new_only)

    def bucket_case_summaries(self, bucket_id: int, *, limit: int, also: int | None = None) -> list[dict[str, Any]]:
        """The first `limit` cases of a bucket, by id, as `case_summaries` gives them, and case
        `also` (its first case) when it is in the bucket and not among them."""
        with self._lock:
            rows = self.db.execute(f"SELECT {', '.join(self._CASE_SUMMARY)}, verdict_json FROM cases WHERE bucket_id=?"
                                   " ORDER BY id LIMIT ?", (bucket_id, limit)).fetchall()
            if also is not None and all(r["id"] != also for r in rows):
                rows += self.db.execute(f"SELECT {', '.join(self._CASE_SUMMARY)}, verdict_json FROM cases"
                                        " WHERE id=? AND bucket_id=?", (also, bucket_id)).fetchall()
        return [case_summary(r, self._CASE_SUMMARY) for r in rows]

    def pending_priorities(self) -> dict[str, tuple[str, int]]:
        """Each open analysis's raw key (`BucketKey.identity`) -> its raw bucket's severity and case count (suspect
        and 0 when no case is stored under it): what the analysis pool orders its queue by."""
        with self._lock:
            rows = self.db.execute("SELECT p.raw_key, b.severity, b.count FROM pending_analyses p"
                                   " LEFT JOIN buckets b ON b.key = p.raw_key").fetchall()
        priorities = {}
        for r in rows:
            f = Fields(r, "buckets", "raw_key")
            priorities[r["raw_key"]] = (f.text("severity", null=True, choices=SEVERITIES) or "suspect", f.int("count", null=True) or 0)
        return priorities

    def case_clock(self, run_id: int) -> list[dict[str, Any]]:
        """A run's cases by slot and index: slot, idx, created_at, wall_s, status and the verdict's
        timings (name -> seconds): what `divfuzz bench --breakdown` splits a run's time by."""
        with self._lock:
            rows = self.db.execute("SELECT slot, idx, created_at, wall_s, status, verdict_json FROM cases WHERE run_id=?"
                                   " ORDER BY slot, idx", (run_id,)).fetchall()
        clock = []
        for r in rows:
            f = Fields(r, "cases", "idx")
            timings = f.verdict().get("timings") or {}
            if not isinstance(timings, dict) or not all(isinstance(v, (int, float)) for v in timings.values()):
                raise f.bad("verdict_json", f"its timings must map names to seconds but got {timings!r:.80}")
            clock.append({"slot": f.int("slot"), "idx": f.int("idx"), "created_at": f.real("created_at"),
                          "wall_s": f.real("wall_s"), "status": f.text("status"), "timings": dict(timings)})
        return clock


def _case_scope(run_id: int | None, bucket_id: int | None, *, opened: bool = False) -> tuple[str, tuple]:
    """` AND ...` conditions on `cases` (and their arguments): of a run, of a bucket, and with
    `opened` only the cases that opened their bucket (a bucket's `first_case_id`)."""
    where, args = "", ()
    if run_id is not None:
        where, args = " AND cases.run_id=?", (run_id,)
    if bucket_id is not None:
        where, args = where + " AND cases.bucket_id=?", (*args, bucket_id)
    if opened:
        where += " AND cases.id IN (SELECT b.first_case_id FROM buckets b WHERE b.id = cases.bucket_id)"
    return where, args


def _named_sqlite_errors(method):
    """`method` with its SQLite errors and undecodable rows raised as StoreError naming the store's file."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self, *args, **kwargs):
            with errors_named(self.path):
                yield from method(self, *args, **kwargs)

        return generator

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with errors_named(self.path):
            return method(self, *args, **kwargs)

    return wrapper


for _name, _method in list(vars(Store).items()):
    if isinstance(_method, types.FunctionType) and not _name.startswith("_") and _name not in ("close", "transaction"):
        setattr(Store, _name, _named_sqlite_errors(_method))
