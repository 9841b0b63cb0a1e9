"""Merging the stores of shards (a Slurm array of `divfuzz fuzz --seed N`, several hosts) into one.

`merge_stores(out_dir, inputs)` folds each input store into `out_dir/divfuzz.sqlite`, so that
the result is the store one host would hold had it run the same campaigns one after another:
- runs are preserved, one row each, with their seed, options, versions and status (renumbered);
- a case is copied once: a case whose run, slot, index, spec digest and config are already in
  the output (the same shard merged twice, or into a store that holds it) is a duplicate and
  skipped. Separate runs that drew the same graph keep a case each, as one store would;
- buckets are merged by root-cause key: a bucket's count is the number of its cases in the output,
  first/last seen are the earliest/latest of its inputs, its severity the most severe of theirs,
  its first run the run that saw it first; raw-key -> root-cause memories are merged too;
- analyses a shard left pending stay pending in the output (pointing at the copied case), unless
  another shard filed that raw key's root cause: then its cases move into the root-cause bucket,
  as `Store.resolve_root_cause` would, so a raw key is open or filed, never both;
- a bucket new to the output gets its input's folder copied into `out_dir/buckets/` under its
  new number (regular files only: a symlink in an input never leads outside it). The folder is
  looked up by its name under the input's own `buckets/`, never by the stored path, so a shard
  moved off its node still merges, and a stored path cannot point the copy elsewhere;
- inputs are never written: each is opened immutable (read-only, no lock, no journal files),
  or when it has a write-ahead log, from a private copy; a store a campaign holds is refused;
- all or nothing: one transaction on the output; on any error it rolls back, copied folders are
  removed and a store that did not exist before is deleted. Errors are StoreError naming the file.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import StoreError, UnsafePathError
from divfuzz.reports.safe_paths import open_plain, plain_folder
from divfuzz.fuzzer.engine.store import CampaignLock, Store, check_divfuzz_store, describe_sqlite_error

STORE_NAME = "divfuzz.sqlite"


@dataclass
class MergeSummary:
    runs_added: int = 0
    runs_known: int = 0
    cases_added: int = 0
    cases_duplicate: int = 0
    buckets_new: int = 0
    buckets_merged: int = 0
    folders_copied: int = 0
    folders_missing: list[str] = field(default_factory=list)  # buckets whose input folder was not there
    pending_open: int = 0  # analyses still open in the output (`divfuzz minimize --pending` finishes them)
    pending_filed: int = 0  # open in one shard, filed by another: closed by the merge


def store_file(path: Path) -> Path:
    """A store argument: a campaign's folder (holding divfuzz.sqlite) or the .sqlite file itself."""
    path = Path(path)
    candidate = path / STORE_NAME if path.is_dir() else path
    if not candidate.is_file():
        raise StoreError(f"{path}: no divfuzz store there (expected {STORE_NAME} in a folder, or the file itself)")
    return candidate


def _refuse_if_live(path: Path) -> None:
    """A campaign still writing the input would make the copy torn: refused, naming it. The lock
    file is only opened read-only, and only if it is there (nothing is created next to an input)."""
    lock = path.with_suffix(".lock")
    if not lock.is_file():
        return
    fd = open_plain(lock, what="campaign lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        raise StoreError(f"{path}: a divfuzz campaign is running on this store; merge it once it has finished") from None
    finally:
        os.close(fd)


@contextmanager
def open_input(path: Path, scratch: Path):
    """A read-only connection to an input store that writes nothing next to it."""
    _refuse_if_live(path)
    wal = Path(f"{path}-wal")
    try:
        if wal.exists() and wal.stat().st_size > 0:  # a killed campaign's log: read it from a private copy
            copy = scratch / f"input-{len(list(scratch.iterdir()))}.sqlite"
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, Path(f"{copy}-wal"))
            db = sqlite3.connect(copy.as_uri() + "?mode=ro", uri=True)
        else:
            db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    except (OSError, sqlite3.Error) as e:
        raise StoreError(f"{path}: cannot read this store ({e})") from None
    try:
        try:
            check_divfuzz_store(db, path)
        except sqlite3.Error as e:
            raise StoreError(f"not a usable divfuzz store: {describe_sqlite_error(path, e)}") from None
        yield db
    finally:
        db.close()


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _or_null(columns: set[str], name: str, default: str = "NULL") -> str:
    """A column of an older schema version reads as its default."""
    return name if name in columns else default


def merge_stores(out_dir: Path, inputs: list[Path]) -> MergeSummary:
    """Fold `inputs` (store files or campaign folders) into `out_dir`'s store; see the module docstring."""
    files = [store_file(p) for p in inputs]
    out_dir = Path(out_dir)
    out_path = out_dir / STORE_NAME
    seen: dict[Path, Path] = {}
    for given, f in zip(inputs, files):
        real = f.resolve()
        if out_path.exists() and real == out_path.resolve():
            raise StoreError(f"{given}: is the output store itself; name another OUT")
        if real in seen:
            raise StoreError(f"{given}: named twice (also as {seen[real]})")
        seen[real] = Path(given)
    out_existed = out_path.exists()
    made = [p for p in reversed([out_dir, *out_dir.parents]) if not p.exists()]  # removed again if the merge is refused
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = CampaignLock(out_path)
    lock_existed = lock.path.exists()
    try:
        lock.acquire()
    except BaseException:
        _remove_made(made, lock.path if not lock_existed else None)
        raise
    copied: list[Path] = []
    store = None
    failed = True
    try:
        store = Store(out_path)
        summary = MergeSummary()
        with ExitStack() as stack:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="divfuzz-merge-")))
            sources = [(f, stack.enter_context(open_input(f, scratch))) for f in files]
            db = store.db
            db.execute("BEGIN IMMEDIATE")
            try:
                for path, source in sources:
                    _merge_one(store, path, source, out_dir, summary, copied)
                summary.pending_open = db.execute("SELECT count(*) FROM pending_analyses").fetchone()[0]
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        failed = False
        return summary
    except BaseException as e:
        for folder in copied:
            shutil.rmtree(folder, ignore_errors=True)
        if store is not None:
            store.close()
            store = None
        if not out_existed:
            for leftover in (out_path, Path(f"{out_path}-wal"), Path(f"{out_path}-shm")):
                leftover.unlink(missing_ok=True)
        if isinstance(e, sqlite3.Error):
            raise StoreError(describe_sqlite_error(out_path, e)) from e
        raise
    finally:
        if store is not None:
            store.close()
        lock.release()
        if failed and not out_existed:
            _remove_made(made, lock.path if not lock_existed else None)


def _remove_made(made: list[Path], lock: Path | None) -> None:
    """A refused merge leaves no trace: the lock it created, and the folders it made if still empty."""
    if lock is not None:
        lock.unlink(missing_ok=True)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            break


def _merge_one(store: Store, path: Path, source: sqlite3.Connection, out_dir: Path,
               summary: MergeSummary, copied: list[Path]) -> None:
    db = store.db
    try:
        run_ids = _merge_runs(db, source, summary)
        bucket_ids = _merge_buckets(db, source, run_ids, summary)
        case_ids = _merge_cases(db, path, source, run_ids, bucket_ids, summary)
        _merge_root_causes(db, source)
        _merge_pending(db, source, case_ids)
        _finish_buckets(db, path, source, bucket_ids, out_dir, summary, copied)
        summary.pending_filed += store.close_pending_already_filed(_severity_under)
    except sqlite3.Error as e:
        if "no such table" in str(e) or "no such column" in str(e) or "malformed" in str(e) or "not a database" in str(e):
            raise StoreError(describe_sqlite_error(path, e)) from None
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # a row that does not decode
        raise StoreError(f"{path}: the store holds a damaged row ({type(e).__name__}: {e}); nothing was merged") from None


_RUN_IDENTITY = ("started_at", "seed", "device", "config_json", "options_json", "versions_json")


def _merge_runs(db, source, summary: MergeSummary) -> dict[int, int]:
    """Input run id -> output run id; a run already in the output (same start, seed, options) is reused."""
    mapping = {}
    for r in source.execute("SELECT id, started_at, finished_at, status, seed, device, config_json, options_json,"
                            " versions_json FROM runs ORDER BY id"):
        old_id, started, finished, status, seed, device, cfg, opts, versions = r
        known = db.execute("SELECT id FROM runs WHERE " + " AND ".join(f"{c}=?" for c in _RUN_IDENTITY),
                           (started, seed, device, cfg, opts, versions)).fetchone()
        if known:
            mapping[old_id] = known[0]
            summary.runs_known += 1
            continue
        cur = db.execute("INSERT INTO runs(started_at, finished_at, status, seed, device, config_json, options_json,"
                         " versions_json) VALUES (?,?,?,?,?,?,?,?)", (started, finished, status, seed, device, cfg, opts, versions))
        mapping[old_id] = cur.lastrowid
        summary.runs_added += 1
    if "run_failures" in {t[0] for t in source.execute("SELECT name FROM sqlite_master WHERE type='table'")}:
        for run_id, error, log_path in source.execute("SELECT run_id, error, log_path FROM run_failures"):
            if run_id in mapping:
                db.execute("INSERT OR IGNORE INTO run_failures(run_id, error, log_path) VALUES (?,?,?)",
                           (mapping[run_id], error, log_path))
    return mapping


def _merge_buckets(db, source, run_ids: dict[int, int], summary: MergeSummary) -> dict[int, int]:
    """Input bucket id -> output bucket id, merged by key (counts are recounted from the cases later)."""
    from divfuzz.records.severity import Severity

    cols = _columns(source, "buckets")
    mapping = {}
    rows = source.execute(
        "SELECT id, key, key_json, triage, first_seen, last_seen, first_run_id, minimized_json, culprit_json, "
        f"{_or_null(cols, 'severity', repr('suspect'))}, {_or_null(cols, 'severity_json')} FROM buckets ORDER BY id"
    ).fetchall()
    for old_id, key_text, key_json, triage, first_seen, last_seen, first_run, minimized, culprit, severity, severity_json in rows:
        key = BucketKey.from_dict(json.loads(key_json))
        if str(key) != key_text:
            raise ValueError(f"bucket {old_id}: key {key_text!r} does not match its key_json")
        Severity(severity)  # an unknown severity is a damaged row
        out_first_run = run_ids.get(first_run)
        if out_first_run is None:
            raise ValueError(f"bucket {old_id}: first_run_id {first_run!r} is no run of this store")
        known = db.execute("SELECT id, first_seen, last_seen, severity, severity_json, minimized_json FROM buckets WHERE key=?",
                           (key_text,)).fetchone()
        if known is None:
            cur = db.execute(
                "INSERT INTO buckets(key, key_json, kind, dtype, device_type, signature, detail, triage, first_seen,"
                " last_seen, first_run_id, count, minimized_json, culprit_json, severity, severity_json)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?)",
                (key_text, key_json, key.kind, key.dtype, key.device_type, key.signature, key.detail, triage,
                 first_seen, last_seen, out_first_run, minimized, culprit, severity, severity_json),
            )
            mapping[old_id] = cur.lastrowid
            summary.buckets_new += 1
            continue
        out_id, out_first, out_last, out_severity, out_severity_json, out_minimized = known
        mapping[old_id] = out_id
        summary.buckets_merged += 1
        if first_seen < out_first:
            db.execute("UPDATE buckets SET first_seen=?, first_run_id=? WHERE id=?", (first_seen, out_first_run, out_id))
        if last_seen > out_last:
            db.execute("UPDATE buckets SET last_seen=? WHERE id=?", (last_seen, out_id))
        if severity_json is not None and (out_severity_json is None or Severity(severity).rank < Severity(out_severity).rank):
            db.execute("UPDATE buckets SET severity=?, severity_json=? WHERE id=?", (severity, severity_json, out_id))
        if out_minimized is None and minimized is not None:
            db.execute("UPDATE buckets SET minimized_json=?, culprit_json=? WHERE id=?", (minimized, culprit, out_id))
    return mapping


def _merge_cases(db, path: Path, source, run_ids: dict[int, int], bucket_ids: dict[int, int],
                 summary: MergeSummary) -> dict[int, int]:
    """Copy the cases; input case id -> output case id (a duplicate maps to the case already there)."""
    cols = _columns(source, "cases")
    query = ("SELECT id, run_id, slot, idx, spec_digest, spec_json, device, config_json, status, finding_kind, bucket_id,"
             f" score, verdict_json, wall_s, created_at, {_or_null(cols, 'ran_on')} FROM cases ORDER BY id")
    mapping: dict[int, int] = {}
    for row in source.execute(query):
        (case_id, run_id, slot, idx, digest, spec_json, device, cfg, status, finding_kind, bucket_id, score, verdict, wall,
         created, ran_on) = row
        if run_id not in run_ids:
            raise ValueError(f"a case names run {run_id!r}, which this store does not hold")
        if bucket_id is not None and bucket_id not in bucket_ids:
            raise ValueError(f"a case names bucket {bucket_id!r}, which this store does not hold")
        out_run = run_ids[run_id]
        there = db.execute("SELECT spec_digest, config_json, id FROM cases WHERE run_id=? AND slot=? AND idx=?",
                           (out_run, slot, idx)).fetchone()
        if there is not None:
            mapping[case_id] = there[2]
            if there[:2] != (digest, cfg):
                raise StoreError(f"{path}: run {run_id} slot {slot} case {idx} differs from the one already merged "
                                 f"(spec digest {digest!r} against {there[0]!r}): not the same run; nothing was merged")
            summary.cases_duplicate += 1
            continue
        cur = db.execute(
            "INSERT INTO cases(run_id, slot, idx, spec_digest, spec_json, device, config_json, status, finding_kind,"
            " bucket_id, score, verdict_json, wall_s, created_at, ran_on) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (out_run, slot, idx, digest, spec_json, device, cfg, status, finding_kind,
             bucket_ids.get(bucket_id) if bucket_id is not None else None, score, verdict, wall, created, ran_on),
        )
        mapping[case_id] = cur.lastrowid
        summary.cases_added += 1
    return mapping


def _merge_root_causes(db, source) -> None:
    if "root_causes" not in {t[0] for t in source.execute("SELECT name FROM sqlite_master WHERE type='table'")}:
        return
    for raw_key, key_json in source.execute("SELECT raw_key, key_json FROM root_causes"):
        BucketKey.from_dict(json.loads(key_json))  # a damaged memory is refused, not copied
        db.execute("INSERT OR IGNORE INTO root_causes(raw_key, key_json) VALUES (?, ?)", (raw_key, key_json))


def _merge_pending(db, source, case_ids: dict[int, int]) -> None:
    """The input's open analyses, pointing at the copied cases; one per raw key (the first kept).
    A raw key the output already files is closed afterwards (`Store.close_pending_already_filed`)."""
    if "pending_analyses" not in {t[0] for t in source.execute("SELECT name FROM sqlite_master WHERE type='table'")}:
        return
    for raw_key, key_json, case_id, queued_at in source.execute(
            "SELECT raw_key, key_json, case_id, queued_at FROM pending_analyses ORDER BY case_id"):
        key = BucketKey.from_dict(json.loads(key_json))  # a damaged row is refused, not copied
        if str(key) != raw_key:
            raise ValueError(f"pending analysis {raw_key!r} does not match its key_json")
        if case_id not in case_ids:
            raise ValueError(f"pending analysis {raw_key!r} names case {case_id!r}, which this store does not hold")
        db.execute("INSERT OR IGNORE INTO pending_analyses(raw_key, key_json, case_id, queued_at) VALUES (?,?,?,?)",
                   (raw_key, key_json, case_ids[case_id], queued_at))


def _severity_under(verdict: dict, key: BucketKey) -> dict | None:
    """A moved case's severity reason under its new bucket key (as a campaign judges it)."""
    from divfuzz.fuzzer.engine.bucketing import severity_under
    from divfuzz.records.verdict import Verdict

    return severity_under(Verdict.from_dict(verdict), key)


def _finish_buckets(db, path: Path, source, bucket_ids: dict[int, int], out_dir: Path,
                    summary: MergeSummary, copied: list[Path]) -> None:
    """Recount the touched buckets from their cases, point each at its first case, and copy the
    folder of each bucket that has none in the output yet."""
    from divfuzz.reports.files import bucket_folder_name, child_path

    folders = dict(source.execute("SELECT id, folder FROM buckets WHERE folder IS NOT NULL"))
    for old_id, out_id in bucket_ids.items():
        db.execute("UPDATE buckets SET count=(SELECT count(*) FROM cases WHERE bucket_id=?) WHERE id=?", (out_id, out_id))
        db.execute("UPDATE buckets SET first_case_id=(SELECT id FROM cases WHERE bucket_id=? ORDER BY created_at, id LIMIT 1)"
                   " WHERE id=?", (out_id, out_id))
        stored = folders.get(old_id)
        if not stored or db.execute("SELECT folder FROM buckets WHERE id=?", (out_id,)).fetchone()[0]:
            continue
        try:
            origin = child_path(path.parent / "buckets", Path(str(stored)).name, what=f"{path}: bucket {old_id}'s folder")
        except UnsafePathError as e:
            raise StoreError(str(e)) from None
        if not origin.is_dir() or origin.is_symlink():
            summary.folders_missing.append(f"bucket {old_id} of {path}: {origin}")
            continue
        key = BucketKey.from_dict(json.loads(db.execute("SELECT key_json FROM buckets WHERE id=?", (out_id,)).fetchone()[0]))
        dest = out_dir / "buckets" / bucket_folder_name(out_id, key)
        if dest.exists():
            raise StoreError(f"{dest}: already exists, and the output store names no bucket folder there; move it away")
        plain_folder(out_dir / "buckets", root=out_dir, create=True, what="merge OUT's buckets folder")
        copied.append(dest)
        shutil.copytree(origin, dest, ignore=lambda d, names: [n for n in names if (Path(d) / n).is_symlink()])
        db.execute("UPDATE buckets SET folder=? WHERE id=?", (str(dest.resolve()), out_id))
        summary.folders_copied += 1
