"""`divfuzz recheck`: a store's bug folders' issue.py run again under another Python environment.

"Is it fixed already?": each bug bucket's `issue.py` (or the buckets asked for) runs once, in a
fresh process, under the interpreter given (a venv with a newer torch, a nightly), through
`divfuzz.reports.issue_check.run_issue_script`; what it gave ("still fails", "passes", "errors")
and that interpreter's torch version are recorded per bucket in the store (`Store.record_recheck`,
the latest run of one interpreter and version replacing the one before), and the folder's issue.md gets them
as its last section (`divfuzz.reports.issue_markdown.recheck_section`).

Invariants: the store is opened as a writing command opens it (checked, an older schema upgraded
in place) and held against a campaign (`CampaignLock`: a live campaign on it is refused, and no
campaign starts while a recheck runs); a bucket's folder is built from its id and key
(`divfuzz.reports.bucket_folder.BucketFolder.load`), never read from the store, and its issue.py and issue.md must be plain
files inside it (no symlink followed); the interpreter is a file the user names and may execute,
and its torch version is what it prints, kept only in `torch.__version__`'s shape; nothing the
script prints reaches code: its exit code and last line are stored as text.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from divfuzz.fuzzer.store import CampaignLock, Store, resolve_store
from divfuzz.fuzzer.store.rows import RECHECK_TEXT_MAX, RecheckRow
from divfuzz.records.errors import ConfigError, StoreError
from divfuzz.records.severity import Severity
from divfuzz.reports.bucket_files import ISSUE_MARKDOWN, ISSUE_SCRIPT, bucket_folder_path
from divfuzz.reports.bucket_folder import BucketFolder
from divfuzz.reports.issue_check import CHECK_TIMEOUT_S, interpreter_torch, run_issue_script
from divfuzz.reports.issue_markdown import with_recheck_section


@dataclass(frozen=True)
class Rechecked:
    """One bucket's recheck: its id, its folder, and the stored row (None: no issue.py to run, `why`)."""

    bucket_id: int
    folder: Path
    row: RecheckRow | None
    why: str = ""


def interpreter_of(python: str) -> str:
    """`python` as an absolute path to a file the user may execute, or ConfigError naming --python."""
    path = Path(python).expanduser()
    if not path.is_absolute():
        found = [Path(d) / python for d in os.environ.get("PATH", "").split(os.pathsep) if d and "/" not in python]
        path = next((p for p in found if p.is_file()), path.resolve())
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"--python {python!r}: not an executable file")
    return str(path.absolute())


def recheck_store(out_dir: Path, *, python: str, bucket_ids: tuple[int, ...] = (),
                  timeout_s: float = CHECK_TIMEOUT_S, log=None) -> tuple[str, list[Rechecked]]:
    """(the other interpreter's torch version, each bug bucket rechecked): every bug bucket of the
    store in `out_dir`, or those of `bucket_ids` (each must be a bug bucket of it), its issue.py
    run under `python` and the outcome recorded. `log(line)` hears each bucket as it finishes."""
    interpreter = interpreter_of(python)
    version = interpreter_torch(interpreter)
    if version is None:
        raise ConfigError(f"--python {python!r}: it does not import torch (or prints no torch version)")
    path = resolve_store(out_dir, purpose="to recheck")
    root = path.parent
    lock = CampaignLock(path)
    lock.acquire()
    try:
        store = Store(path, create=False, read_only=False)
        try:
            buckets = _bug_buckets(store, bucket_ids)
            done = []
            for b in buckets:
                result = _recheck_one(store, root, b, interpreter=interpreter, version=version, timeout_s=timeout_s)
                done.append(result)
                if log is not None:
                    log(result)
            return version, done
        finally:
            store.close()
    finally:
        lock.release()


def _bug_buckets(store: Store, bucket_ids: tuple[int, ...]):
    """The store's bug buckets, or the ones asked for: StoreError naming an id that is not one."""
    bugs = [b for b in store.buckets() if b.severity == Severity.BUG.value]
    if not bucket_ids:
        return bugs
    by_id = {b.id: b for b in bugs}
    missing = [i for i in bucket_ids if i not in by_id]
    if missing:
        raise StoreError(f"{store.path}: bucket {missing[0]} is not a bug bucket of this store "
                         f"(its bug buckets: {', '.join(str(i) for i in by_id) or 'none'})")
    return [by_id[i] for i in dict.fromkeys(bucket_ids)]


def _recheck_one(store: Store, root: Path, bucket, *, interpreter: str, version: str, timeout_s: float) -> Rechecked:
    """One bucket: its folder's issue.py run, the outcome stored, its issue.md's last section rewritten."""
    if not BucketFolder.exists(root, bucket.id, bucket.key):
        return Rechecked(bucket.id, bucket_folder_path(root, bucket.id, bucket.key), None, "no folder")
    folder = BucketFolder.load(root, bucket.id, bucket.key)
    script = folder.file(ISSUE_SCRIPT)
    if script is None:
        return Rechecked(bucket.id, folder.path, None, "no issue.py (a bug without a plain-torch check)")
    rule = (bucket.severity_reason or {}).get("rule", "")
    run = run_issue_script(script, rule=rule if isinstance(rule, str) else "", python=interpreter, timeout_s=timeout_s)
    row = RecheckRow(bucket_id=bucket.id, torch_version=version, python=interpreter[:RECHECK_TEXT_MAX], outcome=run.outcome.value,
                     detail=run.words()[:RECHECK_TEXT_MAX], checked_at=time.time())
    store.record_recheck(row)
    try:
        text = folder.read_file(ISSUE_MARKDOWN)
    except StoreError:
        return Rechecked(bucket.id, folder.path, row, "issue.md is not UTF-8 text: left as it is")
    if text is None:
        return Rechecked(bucket.id, folder.path, row, "no issue.md to show it in")
    rows = [(r.torch_version, r.outcome, r.detail) for r in store.rechecks(bucket_id=bucket.id)]
    folder.replace_file(ISSUE_MARKDOWN, with_recheck_section(text, rows))
    return Rechecked(bucket.id, folder.path, row)
