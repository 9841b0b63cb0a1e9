"""Filing into a campaign folder: one object, `Filing`, stores a case, files a finished analysis,
and writes a bucket's folder under `out_dir/buckets`.

The campaign's slots (a case and its new bucket's folder; an analysis in the slot), the results
of its analysis pool, `divfuzz minimize --pending` and `divfuzz merge` (which copies another
store's folders in, and closes the analyses another store filed) all file through it; nothing
else writes bucket folders or gives the store a bucket's severity. Invariants:
- judge, then store: a bucket's severity and the reason it shows are judged here, once, when a
  bucket is stored or re-keyed (`severity_policy.bucket_severity`, from its key and a case's
  reason), in the transaction that stores them; the store takes them as a value and derives
  none, and every reader reads what was stored;
- the store records the folder it wrote (and the analysis, when there is one, in the same
  transaction); a root cause is filed, its folder written and recorded in one transaction;
- one folder is written at a time (`_FOLDER_WRITE`, always taken before the store's lock);
- a raw bucket's folder is removed once its analysis re-keys it; its path is built from ids and
  a sanitised slug, never read from the store;
- after a kill at any moment, `Filing.finish_interrupted` (a campaign calls it before it draws)
  leaves every bucket pointing at a stored case and with its folder, and no `buckets/.tmp-*`.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob
from divfuzz.fuzzer.engine.environment import environment_versions
from divfuzz.fuzzer.store import Store
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import StoreError
from divfuzz.records.severity import Severity
from divfuzz.records.verdict import Verdict
from divfuzz.generators.validate import load_spec
from divfuzz.reports.bucket_files import bucket_folder_path, buckets_root
from divfuzz.reports.bucket_folder import remove_unfinished_folders, write_bucket_folder
from divfuzz.reports.kill_points import kill_point
from divfuzz.records.safe_paths import copy_plain_tree, plain_folder

# Bucket folders are written from the slots' and the pool's threads: one at a time, so that two
# writers never race on one bucket's folder name. Reentrant: filing a root cause holds it around
# its transaction and the folder it writes there.
_FOLDER_WRITE = threading.RLock()


class Filing:
    """The one owner of filing into `store` and `out_dir/buckets`; `timeout_s` is what a folder's
    repro.py allows a case (the campaign's, or `minimize --pending`'s; None for `divfuzz merge`,
    which writes no repro, only copies folders)."""

    def __init__(self, store: Store, out_dir: Path, *, timeout_s: float | None):
        self.store = store
        self.out_dir = out_dir
        self.timeout_s = timeout_s

    def store_case(self, row: dict, *, key, raw_key, triage: str, severity: dict | None, for_analysis: bool) -> CaseFiled:
        """One committed case row and its bucket's update, with the bucket's verdict judged here
        (`bucket_severity`: its key's severity, `severity` (the case's reason) as it shows it).
        A case for analysis goes in under the key the store files `raw_key` under (a known root
        cause, else `raw_key`, opening its pending analysis: `Store.add_case_for_analysis`),
        looked up, judged and stored in one transaction; any other case under `key`. The
        severity returned is the one its bucket holds once stored."""
        store = self.store
        with store.transaction():
            if for_analysis:
                key = store.key_for_case(raw_key)
                intake = store.add_case_for_analysis(raw_key=raw_key, key=key, judged=bucket_severity(key, severity),
                                                     triage=triage, **row)
                case_id, bucket_id, is_new, queued = intake.case_id, intake.bucket_id, intake.is_new, intake.queued
            else:
                case_id, bucket_id, is_new = store.add_case(**row, key=key, triage=triage,
                                                            judged=bucket_severity(key, severity) if key is not None else None)
                queued = False
            stored = Severity(store.bucket(bucket_id).severity) if bucket_id is not None else None
        return CaseFiled(case_id, bucket_id, is_new, key, queued, stored)

    def _judged_root_cause(self, raw_key, key):
        """Inside a transaction: the verdict of `key`'s bucket when the raw bucket becomes it,
        judged from `key` and the raw bucket's stored reason (whose words the renamed bucket keeps)."""
        raw = self.store.bucket_of_key(raw_key)
        return bucket_severity(key, (raw.severity_reason or None) if raw is not None else None)

    def _resolve(self, raw_key, key):
        """Inside a transaction: `Store.resolve_root_cause`, with the root-cause bucket's verdict judged here."""
        return self.store.resolve_root_cause(raw_key, key, judged=self._judged_root_cause(raw_key, key))

    def file_in_slot(self, raw_key, key):
        """An analysis a slot ran: its raw key's bucket (a pending one included) joins `key`'s,
        whose folder the slot then writes with its case (`write_folder`). Returns what
        `Store.resolve_root_cause` did."""
        with self.store.transaction():
            return self._resolve(raw_key, key)

    def close_pending_already_filed(self) -> int:
        """Close every analysis still pending for a raw key that `root_causes` now files (another
        shard filed it: `divfuzz merge`), as `file_in_slot` files one: its cases move into the
        root-cause bucket, whose verdict is judged here when it is new. One transaction (joins
        the caller's); returns how many were closed."""
        store = self.store
        with store.transaction():
            filed = store.pending_already_filed()
            for raw_key, key in filed:
                store.close_pending(raw_key, key, judged=self._judged_root_cause(raw_key, key))
        return len(filed)

    def copy_folder(self, *, bucket_id: int, key, origin: Path, what: str) -> Path:
        """Another store's bucket folder (`divfuzz merge`), copied whole as this store's bucket
        `bucket_id` (regular files only: `copy_plain_tree` refuses a symlink, so nothing outside
        `origin` is read) and recorded. `origin` is a path the caller checked (`child_path` under
        the other store's own buckets/, never a stored path). StoreError when the destination is
        taken already; UnsafePathError (naming `what`) for what is not a plain file or folder. A
        copy that fails is removed. Called in the merge's transaction (no other thread runs)."""
        with _FOLDER_WRITE:
            dest = bucket_folder_path(self.out_dir, bucket_id, key)
            if dest.exists():
                raise StoreError(f"{dest}: already exists, and the output store names no bucket folder there; move it away")
            plain_folder(buckets_root(self.out_dir), root=self.out_dir, create=True, what="merge OUT's buckets folder")
            try:
                copy_plain_tree(origin, dest, what=what)
            except BaseException:
                shutil.rmtree(dest, ignore_errors=True)
                raise
            self.store.set_bucket_folder(bucket_id, str(dest.resolve()))
            return dest

    def write_folder(self, *, bucket_id: int, case_id: int, key, spec: GraphSpec, verdict, analysis, device: str,
                     config: CompileConfig, case_output: str = "") -> Path:
        """A bucket's folder under `out_dir/buckets`: the minimized repro and its attribution when
        analysed, else the case as drawn; the store records the folder (and the analysis). One
        folder is written at a time (`_FOLDER_WRITE`). What the compiler printed while the case ran
        (`case_output`) and while its analysis ran goes to the folder's compile.log."""
        with _FOLDER_WRITE:
            return _write_bucket_files(self.store, self.out_dir, bucket_id=bucket_id, case_id=case_id, key=key, spec=spec,
                                       verdict=verdict, analysis=analysis, device=device, config=config,
                                       timeout_s=self.timeout_s, case_output=case_output)

    def file_analysis(self, job: AnalysisJob, key, analysis, *, device: str, config: CompileConfig):
        """File a finished analysis: re-key its raw bucket (`Store.resolve_root_cause`: its
        severity becomes the root-cause key's), give a bucket that became a root cause its
        minimized folder, and remove the raw bucket's folder. The same for the pool's results
        and `minimize --pending`. Filing, the new root cause's folder and its record are one
        transaction: a kill before it commits leaves the raw bucket and its open analysis as they
        were (the analysis runs again), never a filed root cause without its folder and analysis."""
        store, out_dir = self.store, self.out_dir
        with _FOLDER_WRITE, store.transaction():
            filed = self._resolve(job.raw_key, key)
            kill_point("root-cause-filed")
            folder = None
            if filed.created:
                verdict = Verdict.from_dict(store.case(job.case_id).verdict)
                folder = self.write_folder(bucket_id=filed.bucket_id, case_id=job.case_id, key=key, spec=job.spec,
                                           verdict=verdict, analysis=analysis, device=device, config=config)
        if filed.raw_bucket_id is not None:  # its path is built from ids and a sanitised slug, never read from the store
            raw_folder = bucket_folder_path(out_dir, filed.raw_bucket_id, job.raw_key)
            if raw_folder.is_dir() and raw_folder != folder:
                shutil.rmtree(raw_folder)
        return filed

    def finish_interrupted(self) -> list[int]:
        """Put right what a kill left (a campaign calls this on its store before it draws; no
        other campaign holds the store): remove `buckets/.tmp-*`; point every bucket at a stored
        case (`Store.repair_interrupted_buckets`); and write the folder of every bucket that a run
        which did not finish opened without recording its folder, from its first case as stored
        (the case as drawn, as a slot writes a new bucket's). A recorded folder is always in
        place: it is moved in before the store records it. The stored spec and config are
        untrusted data, loaded and checked as such (`load_spec`, `CompileConfig.from_dict`): a bad
        one stops the campaign (exit 2) naming the case and the store. Returns the ids of the
        buckets whose folder was written."""
        store = self.store
        remove_unfinished_folders(buckets_root(self.out_dir))
        unwritten = store.repair_interrupted_buckets()
        for bucket_id in unwritten:
            b = store.bucket(bucket_id)
            case = store.case(b.first_case_id)
            where = f"case {case.id} in {store.path}"
            config = CompileConfig.from_dict(case.config, where=f"the stored config of {where}")
            self.write_folder(bucket_id=b.id, case_id=case.id, key=b.key, spec=load_spec(case.spec_json, source=where),
                              verdict=Verdict.from_dict(case.verdict), analysis=None, device=case.device, config=config)
        return unwritten


@dataclass(frozen=True)
class CaseFiled:
    """A case `Filing.store_case` stored: its row, its bucket, whether that bucket is new, the
    key it went in under, whether it opened an analysis to queue, and its bucket's stored severity."""

    case_id: int
    bucket_id: int | None
    is_new: bool
    key: object  # BucketKey | None
    queued: bool
    severity: Severity | None = None  # as its bucket holds it (None: no bucket)


def compile_log_text(case_id: int | None, case_output: str, analysis) -> str:
    """compile.log's text: what the compiler printed for the case, then for its analysis, each
    under a heading line; empty when it printed nothing."""
    parts = []
    if case_output.strip():
        parts.append(f"=== case {case_id}: what the compiler printed ===\n{case_output}")
    analysis_output = getattr(analysis, "compile_log", "") or ""
    if analysis_output.strip():
        parts.append(f"=== its analysis (minimization, stage ladder, probes, bisector) ===\n{analysis_output}")
    return "\n".join(parts)


def _write_bucket_files(store: Store, out_dir: Path, *, bucket_id: int, case_id: int, key, spec: GraphSpec, verdict,
                        analysis, device: str, config: CompileConfig, timeout_s: float | None, case_output: str = "") -> Path:
    if timeout_s is None:
        raise ValueError("a Filing made without a timeout (divfuzz merge's) writes no repro.py")
    log = compile_log_text(case_id, case_output, analysis)
    stored = store.bucket(bucket_id).severity_reason  # judged once, when its case was stored: read, not judged again
    if analysis is not None:
        # lazy: heavy: the triage imports torch._dynamo; only an analysed bucket needs it
        from divfuzz.fuzzer.triage.analysis import write_bucket

        folder = write_bucket(buckets_root(out_dir), bucket_id=bucket_id, key=key, analysis=analysis,
                              device=device, config=config, fallback_verdict=verdict, case_id=case_id,
                              timeout_s=int(timeout_s), versions=environment_versions(device), compile_log=log,
                              severity=stored, check_unchecked=False)
        kill_point("folder-moved")
        with store.transaction():  # the folder and the analysis it shows, together
            store.set_bucket_folder(bucket_id, str(folder))
            store.set_bucket_analysis(bucket_id, **analysis.to_dict())
        return folder
    # A case as drawn: its issue.py is not run here (the campaign's filing must not stall on a fresh
    # process per bucket); the analysis's folder, which replaces it, carries the analysis's check.
    folder = write_bucket_folder(buckets_root(out_dir), bucket_id=bucket_id, key=key, spec=spec, device=device,
                                 config=config, verdict=verdict, case_id=case_id, timeout_s=int(timeout_s),
                                 versions=environment_versions(device), compile_log=log, severity=stored,
                                 check_issue=False)
    kill_point("folder-moved")
    store.set_bucket_folder(bucket_id, str(folder))
    return folder
