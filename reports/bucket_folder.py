"""A bucket's folder, written whole (`write_bucket_folder`) and read back as a record
(`BucketFolder.load`): the only code that touches a folder's files. Its file names and its place
under the store are `divfuzz.reports.bucket_files`'.

Invariants: the folder is written whole or not at all (files go to a temporary folder that is
renamed into place), so a killed campaign never leaves half a bucket. The folder it is written
into is a real folder, not a symlink (`divfuzz.records.safe_paths.plain_folder`). Every file or folder name
that comes from data goes through `slugify` or `is_slug` and `child_path`: it is a plain slug
and resolves (symlinks followed) to a direct child of its target folder, or it is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from divfuzz.records.buckets import BucketKey
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import DivfuzzError, SpecError, StoreError
from divfuzz.records.verdict import Verdict
from divfuzz.reports.bucket_files import (ANALYSIS_FILE, CASE_FILE, REPRO_FILE, REQUIRED_FILES, SPEC_FILE,
                                          UNFINISHED_PREFIX, VERDICT_FILE, bucket_folder_name, bucket_folder_path)
from divfuzz.records.severity import SeverityReason
from divfuzz.reports.kill_points import kill_point
from divfuzz.records.safe_paths import check_plain, child_path, is_slug, plain_folder, read_text, write_atomic
from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import load_spec
from divfuzz.reports.issue_check import DefaultsCheck, run_rendered_script
from divfuzz.reports.issue_folder import issue_files, write_issue_files
from divfuzz.reports.perf_repro import render_perf_repro
from divfuzz.reports.repro import render_repro

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["BucketCase", "BucketFolder", "bucket_case", "bucket_folder_name", "remove_unfinished_folders",
           "write_bucket_folder"]


def remove_unfinished_folders(root: Path) -> list[str]:
    """Remove what a killed `write_bucket_folder` left in `root` (a store's `buckets/`): every
    `.tmp-*` entry, a folder with what it holds, anything else (a link, a file) as the entry itself,
    never followed. Returns the names removed. Nothing when `root` does not exist."""
    if not check_plain(root, what="buckets folder", folder=True):
        return []
    removed = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.name.startswith(UNFINISHED_PREFIX):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
        removed.append(entry.name)
    return removed


@dataclass(frozen=True)
class BucketCase:
    """What a bucket folder's `case.json` says its spec was judged under, beyond its config: the
    switch its culprit names (`CulpritKey.switch`: what removes its divergence, which its severity
    is judged under) and torch's CPU threads its case ran with (`Verdict.threads`)."""

    switch: str | None = None
    threads: int | None = None
    subsystem: str | None = None  # the part of the compiler the culprit names (a decomposition makes a compiled-worse rule a bug)


def bucket_case(spec_file: Path) -> BucketCase:
    """`BucketCase` from the `case.json` beside a bucket folder's `spec.json`; empty where there is
    none, or it is not a plain file holding a bucket key (a spec from anywhere else is judged as
    it is)."""
    path = Path(spec_file).parent / CASE_FILE
    try:
        if not path.is_file() or path.is_symlink():
            return BucketCase()
        data = json.loads(path.read_text())
        key = BucketKey.from_dict(data["bucket"], where=str(path))
    except (OSError, ValueError, KeyError, TypeError, RecursionError, DivfuzzError):
        return BucketCase()
    threads = data.get("threads")
    return BucketCase(switch=(key.culprit.switch or None) if key.culprit is not None else None,
                      subsystem=(key.culprit.subsystem or None) if key.culprit is not None else None,
                      threads=threads if isinstance(threads, int) and not isinstance(threads, bool) and 0 < threads <= 4096 else None)


def write_bucket_folder(
    root: Path,
    *,
    bucket_id: int,
    key: "BucketKey",
    spec: GraphSpec,
    device: str,
    config: "CompileConfig",
    verdict: "Verdict",
    case_id: int | None = None,
    notes: tuple[str, ...] = (),
    timeout_s: int = 600,
    knob: tuple | None = None,
    culprit: dict | None = None,
    versions: dict | None = None,
    compile_log: str | None = None,
    severity: dict | None = None,
    extra_files: dict[str, str] | None = None,
    check_issue: "bool | DefaultsCheck" = True,
) -> Path:
    """A bucket's folder: spec.json, case.json, verdict.json and repro.py (the perf repro, with
    `knob` the culprit switch flipped, for a perf verdict); for a bug, issue.py and issue.md
    (`divfuzz.reports.issue_folder`, with the `culprit` as a dict, the `versions`, and the bucket's
    stored `severity` reason as a dict); what the compiler printed while the case and its analysis
    ran, as compile.log; and `extra_files` (name -> text: an analysis's `analysis.json` and
    `report.md`). A bug's issue.py is run in a fresh process first, under torch's defaults
    (`check_issue`; `divfuzz.reports.issue_folder`), or that check as already run elsewhere (a
    `DefaultsCheck`: the analysis worker's), or not at all (False: every pin kept, unchecked). Written to a temporary folder `.tmp-*` and moved into place whole: a kill leaves
    the folder as it was or whole, and at most a `.tmp-*` folder that the next campaign on this
    store removes (`remove_unfinished_folders`)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    plain_folder(root, create=True, what="buckets folder")  # a symlinked buckets/ is refused, never followed
    final = child_path(root, bucket_folder_name(bucket_id, key), what="bucket folder")
    # What is there now is replaced only when it is a real folder: a symlink (to another bucket's
    # folder, or anywhere) or a file under the bucket's name is refused, naming it, before anything is written.
    check_plain(final, what="bucket folder", folder=True)
    tmp = Path(tempfile.mkdtemp(prefix=UNFINISHED_PREFIX, dir=root))
    try:
        _fill_bucket_folder(tmp, spec=spec, case_id=case_id, device=device, config=config, key=key, verdict=verdict,
                            notes=notes, timeout_s=timeout_s, knob=knob, severity=severity, culprit=culprit,
                            versions=versions, compile_log=compile_log, extra_files=extra_files, check_issue=check_issue)
        kill_point("folder-written")
        if check_plain(final, what="bucket folder", folder=True):  # again: nothing planted meanwhile is followed
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # no .tmp-* left by a refusal or an error (a kill leaves one: removed on resume)
        raise
    return final


def _fill_bucket_folder(tmp: Path, *, spec, case_id, device, config, key, verdict, notes, timeout_s, knob, severity,
                        culprit, versions, compile_log, extra_files, check_issue=True) -> None:
    """`write_bucket_folder`'s files, into its temporary folder `tmp`."""
    (tmp / SPEC_FILE).write_text(spec.to_json() + "\n")
    (tmp / CASE_FILE).write_text(
        json.dumps(
            {"case_id": case_id, "device": device, "config": config.to_dict(), "bucket": key.to_dict()}
            | ({"threads": verdict.threads} if getattr(verdict, "threads", None) else {}), indent=2
        )
        + "\n"
    )
    (tmp / VERDICT_FILE).write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
    if getattr(verdict, "perf", ()):
        repro = render_perf_repro(spec, device=device, config=config, title=str(key), notes=notes,
                                  margin=verdict.perf[0].margin, knob=knob)
    else:
        # `verdict` is the spec's own run when it is this spec's (a case as drawn, or the analysis's
        # minimal spec): the script takes from it what it does not measure, and only while its own
        # numbers are the recorded ones. The culprit's switch is the one its bucket's severity is under.
        switch = key.culprit.switch if getattr(key, "culprit", None) is not None else None
        repro = render_repro(spec, device=device, config=config, title=str(key), notes=notes, timeout_s=timeout_s,
                             recorded=verdict, switch=switch, threads=getattr(verdict, "threads", None),
                             subsystem=key.culprit.subsystem if getattr(key, "culprit", None) is not None else None)
    (tmp / REPRO_FILE).write_text(repro)
    os.chmod(tmp / REPRO_FILE, 0o755)
    reason = SeverityReason.from_dict(severity) if severity else None
    write_issue_files(tmp, issue_files(spec, device=device, config=config, verdict=verdict, reason=reason, culprit=culprit,
                                       versions=versions, check=run_rendered_script if check_issue is True else None,
                                       checked=check_issue if isinstance(check_issue, DefaultsCheck) else None), compile_log)
    for name, text in (extra_files or {}).items():
        stem, _, suffix = name.partition(".")
        if not is_slug(stem) or suffix not in ("json", "md"):  # divfuzz's own names, never data
            raise ValueError(f"extra_files: {name!r} is not a bucket file name")
        (tmp / name).write_text(text)


@dataclass(frozen=True)
class BucketFolder:
    """A written bucket folder, read back and checked: its spec, what its `case.json` records, its
    verdict, and an analysis's summary where one ran. `load` is the one way a command reads a
    folder (`report --issue`, `recheck`, the scripts that re-run folders), and `file`/`read_file`/
    `replace_file` are the one way to reach a file in it.

    Invariants: `path` was built from the bucket's id and key (`load`) or checked as a plain folder
    below the store's folder (`load_folder`), never taken from a store row; every file it hands out
    is a plain file named by `divfuzz.reports.bucket_files` (a symlink or a FIFO there is refused,
    exit 2); a file that does not parse is a `StoreError` naming the file and what is wrong."""

    path: Path
    root: Path  # the store's folder (`--out`): nothing below it is followed
    spec: GraphSpec
    key: BucketKey
    device: str
    config: CompileConfig
    verdict: Verdict
    case_id: int | None = None
    threads: int | None = None
    analysis: dict | None = None

    @classmethod
    def load(cls, out_dir: Path, bucket_id: int, key: BucketKey) -> "BucketFolder":
        """Bucket `bucket_id`'s folder under the store folder `out_dir`; StoreError when it is
        missing or a file in it does not parse."""
        return cls.load_folder(bucket_folder_path(out_dir, bucket_id, key), root=out_dir)

    @classmethod
    def exists(cls, out_dir: Path, bucket_id: int, key: BucketKey) -> bool:
        """Whether the bucket's folder is there (a plain folder; UnsafePathError for anything else)."""
        return check_plain(bucket_folder_path(out_dir, bucket_id, key), root=out_dir, what="bucket folder", folder=True)

    @classmethod
    def load_folder(cls, folder: Path, *, root: Path) -> "BucketFolder":
        """The folder `folder`, below the store folder `root` (a path the caller built or the user named)."""
        if not check_plain(folder, root=root, what="bucket folder", folder=True):
            raise StoreError(f"{folder}: no such bucket folder")
        missing = [n for n in REQUIRED_FILES if not check_plain(folder / n, root=root, what=f"bucket file {n}")]
        if missing:
            raise StoreError(f"{folder}: {', '.join(missing)} missing (a folder divfuzz writes holds {', '.join(REQUIRED_FILES)})")

        def text(name: str) -> str:
            try:
                return read_text(folder / name, root=root, what=f"bucket file {name}")
            except UnicodeDecodeError:
                raise StoreError(f"{folder / name}: not UTF-8 text") from None

        def json_object(name: str) -> dict:
            try:
                data = json.loads(text(name))
            except (ValueError, RecursionError) as e:
                raise StoreError(f"{folder / name}: not JSON ({e})") from None
            if not isinstance(data, dict):
                raise StoreError(f"{folder / name}: a JSON object expected, found {type(data).__name__}")
            return data

        where = str(folder / CASE_FILE)
        try:
            spec = load_spec(text(SPEC_FILE), source=str(folder / SPEC_FILE))  # parsed and validated, as every spec file
        except SpecError as e:
            raise StoreError(f"{folder / SPEC_FILE}: {e}") from None
        case = json_object(CASE_FILE)
        for field, kind in (("device", str), ("config", dict), ("bucket", dict)):
            if not isinstance(case.get(field), kind):
                raise StoreError(f"{where}: field {field!r} is missing or not a {kind.__name__}")
        try:
            key = BucketKey.from_dict(case["bucket"], where=where)
            config = CompileConfig.from_dict(case["config"], where=where)
        except (KeyError, TypeError, ValueError, DivfuzzError) as e:
            raise StoreError(f"{where}: {e}") from None
        try:
            verdict = Verdict.from_dict(json_object(VERDICT_FILE))
        except (KeyError, TypeError, ValueError, AttributeError, DivfuzzError) as e:
            raise StoreError(f"{folder / VERDICT_FILE}: not a verdict ({type(e).__name__}: {e})") from None
        analysis = json_object(ANALYSIS_FILE) if check_plain(folder / ANALYSIS_FILE, root=root, what=ANALYSIS_FILE) else None
        case_id, threads = case.get("case_id"), case.get("threads")
        return cls(path=folder, root=root, spec=spec, key=key, device=case["device"], config=config, verdict=verdict,
                   case_id=case_id if _small_int(case_id) else None, threads=threads if _small_int(threads) else None,
                   analysis=analysis)

    def file(self, name: str) -> Path | None:
        """The folder's file `name` (one of `divfuzz.reports.bucket_files`' names), or None when it has none."""
        _check_name(name)
        return self.path / name if check_plain(self.path / name, root=self.root, what=name) else None

    def read_file(self, name: str) -> str | None:
        """The text of the folder's file `name`, or None when it has none; StoreError when not UTF-8."""
        path = self.file(name)
        if path is None:
            return None
        try:
            return read_text(path, root=self.root, what=name)
        except UnicodeDecodeError:
            raise StoreError(f"{path}: not UTF-8 text") from None

    def replace_file(self, name: str, text: str) -> Path:
        """Write the folder's file `name` whole (a temporary file renamed into place)."""
        _check_name(name)
        return write_atomic(self.path / name, text, root=self.root, what=name)

    def names(self) -> "Iterable[str]":
        """The plain files the folder holds, by name (sorted)."""
        return sorted(e.name for e in os.scandir(self.path) if e.is_file(follow_symlinks=False))


def _small_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**62


def _check_name(name: str) -> None:
    stem, _, suffix = name.partition(".")
    if not is_slug(stem) or suffix not in ("json", "md", "py", "log", "bin"):  # issue_inputs.bin: an issue.py's exact inputs
        raise ValueError(f"{name!r} is not a bucket file name")
