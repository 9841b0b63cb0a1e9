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
- a bucket's severity and reason are copied as its input stored them (read, never judged again);
- analyses a shard left pending stay pending in the output (pointing at the copied case), unless
  another shard filed that raw key's root cause: then its cases move into the root-cause bucket,
  as the campaign files an analysis (`Filing.close_pending_already_filed`: a bucket that becomes
  the root cause is judged there), so a raw key is open or filed, never both;
- a bucket new to the output gets its input's folder copied into `out_dir/buckets/` under its
  new number by the one writer of bucket folders (`Filing.copy_folder`; regular files only: a
  symlink in an input never leads outside it). The folder is looked up by its name under the
  input's own `buckets/` (`child_path`), never by the stored path, so a shard moved off its node
  still merges, and a stored path cannot point the copy elsewhere;
- inputs are never written: each is opened immutable (read-only, no lock, no journal files),
  or when it has a write-ahead log or an older schema, from a private copy (`Store.open_input`);
  a store a campaign holds is refused;
- all or nothing: one `Store.transaction()` on the output, which every `Store.import_*` write
  joins; on any error it rolls back, copied folders are removed and a store that did not exist
  before is deleted. Errors are StoreError naming the file.
- merge writes no SQL of its own: it reads each input and writes the output through `Store`
  and `Filing`. It sits in the campaign layer, above the store, so that it can file as a
  campaign files.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.store import STORE_NAME, CampaignLock, Store, describe_sqlite_error, resolve_store
from divfuzz.records.errors import StoreError, UnsafePathError
from divfuzz.records.severity import Severity
from divfuzz.records.safe_paths import child_path
from divfuzz.records.safe_paths import remove_made
from divfuzz.reports.bucket_files import buckets_root

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


def merge_stores(out_dir: Path, inputs: list[Path]) -> MergeSummary:
    """Fold `inputs` (store files or campaign folders) into `out_dir`'s store; see the module docstring."""
    files = [resolve_store(p) for p in inputs]
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
    buckets_made = not buckets_root(out_dir).exists()  # likewise, when empty
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = CampaignLock(out_path)
    lock_existed = lock.path.exists()
    try:
        lock.acquire()
    except BaseException:
        remove_made(made, lock.path if not lock_existed else None)
        raise
    copied: list[Path] = []
    store = None
    failed = True
    try:
        store = Store(out_path)
        summary = MergeSummary()
        with ExitStack() as stack:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="divfuzz-merge-")))
            sources = [(f, stack.enter_context(Store.open_input(f, scratch))) for f in files]
            filing = Filing(store, out_dir, timeout_s=None)  # copies folders, writes no repro
            with store.transaction():
                for path, source in sources:
                    _merge_one(filing, path, source, summary, copied)
                summary.pending_open = store.pending_count()
        failed = False
        return summary
    except BaseException as e:
        for folder in copied:
            shutil.rmtree(folder, ignore_errors=True)
        if buckets_made:
            try:
                buckets_root(out_dir).rmdir()  # only when empty: what this merge made and nothing else
            except OSError:
                pass
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
            remove_made(made, lock.path if not lock_existed else None)


def _merge_one(filing: Filing, path: Path, source: Store, summary: MergeSummary, copied: list[Path]) -> None:
    """One input, inside the merge's transaction. The input's own errors (a damaged row, a case
    naming a run it does not hold) are StoreError naming the input."""
    store = filing.store
    try:
        source.check_stored_keys()
        run_ids = _merge_runs(store, source, summary)
        bucket_ids, folders = _merge_buckets(store, source, run_ids, summary)
        case_ids = _merge_cases(store, path, source, run_ids, bucket_ids, summary)
        for filed in source.root_cause_rows():
            store.import_root_cause(filed)
        for pending in source.pending_analyses():
            if pending.case_id not in case_ids:
                raise ValueError(f"pending analysis {pending.raw_key!s} names case {pending.case_id!r}, "
                                 "which this store does not hold")
            store.import_pending(pending, case_ids[pending.case_id])
        _finish_buckets(filing, path, bucket_ids, folders, summary, copied)
        summary.pending_filed += filing.close_pending_already_filed()
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # a row that does not decode
        raise StoreError(f"{path}: the store holds a damaged row ({type(e).__name__}: {e}); nothing was merged") from None


def _merge_runs(store: Store, source: Store, summary: MergeSummary) -> dict[int, int]:
    """Input run id -> output run id; a run already in the output (same start, seed, options) is reused."""
    mapping = {}
    for run in source.run_rows():
        mapping[run.id], known = store.import_run(run)
        if known:
            summary.runs_known += 1
        else:
            summary.runs_added += 1
        failure = source.run_failure(run.id)
        if failure is not None:
            store.import_run_failure(mapping[run.id], *failure)
    return mapping


def _merge_buckets(store: Store, source: Store, run_ids: dict[int, int],
                   summary: MergeSummary) -> tuple[dict[int, int], dict[int, str]]:
    """Input bucket id -> output bucket id, merged by key (counts are recounted from the cases later),
    and input bucket id -> its stored folder."""
    mapping, folders = {}, {}
    for bucket in source.buckets():
        Severity(bucket.severity)  # an unknown severity is a damaged row
        out_first_run = run_ids.get(bucket.first_run_id)
        if out_first_run is None:
            raise ValueError(f"bucket {bucket.id}: first_run_id {bucket.first_run_id!r} is no run of this store")
        mapping[bucket.id], new = store.import_bucket(bucket, out_first_run)
        if new:
            summary.buckets_new += 1
        else:
            summary.buckets_merged += 1
        if bucket.folder:
            folders[bucket.id] = bucket.folder
    return mapping, folders


def _merge_cases(store: Store, path: Path, source: Store, run_ids: dict[int, int], bucket_ids: dict[int, int],
                 summary: MergeSummary) -> dict[int, int]:
    """Copy the cases; input case id -> output case id (a duplicate maps to the case already there)."""
    mapping: dict[int, int] = {}
    for case in source.iter_cases():
        if case.run_id not in run_ids:
            raise ValueError(f"a case names run {case.run_id!r}, which this store does not hold")
        if case.bucket_id is not None and case.bucket_id not in bucket_ids:
            raise ValueError(f"a case names bucket {case.bucket_id!r}, which this store does not hold")
        out_run = run_ids[case.run_id]
        there = store.case_at(out_run, case.slot, case.idx)
        if there is not None:
            mapping[case.id] = there.id
            if (there.spec_digest, there.config) != (case.spec_digest, case.config):
                raise StoreError(f"{path}: run {case.run_id} slot {case.slot} case {case.idx} differs from the one already "
                                 f"merged (spec digest {case.spec_digest!r} against {there.spec_digest!r}): not the same "
                                 "run; nothing was merged")
            summary.cases_duplicate += 1
            continue
        out_bucket = bucket_ids[case.bucket_id] if case.bucket_id is not None else None
        mapping[case.id] = store.import_case(case, out_run, out_bucket)
        summary.cases_added += 1
    return mapping


def _finish_buckets(filing: Filing, path: Path, bucket_ids: dict[int, int], folders: dict[int, str],
                    summary: MergeSummary, copied: list[Path]) -> None:
    """Recount the touched buckets from their cases, point each at its first case, and copy the
    folder of each bucket that has none in the output yet (`Filing.copy_folder`)."""
    store = filing.store
    for old_id, out_id in bucket_ids.items():
        store.recount_bucket(out_id)
        stored = folders.get(old_id)
        if not stored:
            continue
        out = store.bucket(out_id)
        if out.folder:
            continue
        try:
            origin = child_path(buckets_root(path.parent), Path(str(stored)).name, what=f"{path}: bucket {old_id}'s folder")
        except UnsafePathError as e:
            raise StoreError(str(e)) from None
        if not origin.is_dir() or origin.is_symlink():
            summary.folders_missing.append(f"bucket {old_id} of {path}: {origin}")
            continue
        try:
            copied.append(filing.copy_folder(bucket_id=out_id, key=out.key, origin=origin,
                                             what=f"{path}: bucket {old_id}'s folder"))
        except UnsafePathError as e:
            raise StoreError(f"{e}; nothing was merged") from None
        summary.folders_copied += 1
