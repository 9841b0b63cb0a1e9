"""A bucket's folder: `spec.json`, `case.json`, `verdict.json` and `repro.py`.

Invariants: the folder is written whole or not at all (files go to a temporary folder that is
renamed into place), so a killed campaign never leaves half a bucket. The folder it is written
into is a real folder, not a symlink (`divfuzz.records.safe_paths.plain_folder`). Every file or folder name
that comes from data goes through `slugify` or `is_slug` and `child_path`: it is a plain slug
and resolves (symlinks followed) to a direct child of its target folder, or it is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from divfuzz.records.buckets import BucketKey
from divfuzz.records.errors import DivfuzzError
from divfuzz.records.severity import SeverityReason
from divfuzz.reports.kill_points import kill_point
from divfuzz.records.safe_paths import check_plain, child_path, is_slug, plain_folder
from divfuzz.generators.spec import GraphSpec
from divfuzz.reports.issue_check import DefaultsCheck, run_rendered_script
from divfuzz.reports.issue_folder import issue_files, write_issue_files
from divfuzz.reports.perf_repro import render_perf_repro
from divfuzz.reports.repro import render_repro

if TYPE_CHECKING:
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.verdict import Verdict


def bucket_folder_name(bucket_id: int, key: "BucketKey") -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{key.kind}-{key.ops_text()}").strip("-")[:60]
    return f"{int(bucket_id):04d}-{slug}".rstrip("-")


UNFINISHED_PREFIX = ".tmp-"  # a bucket folder being written (`write_bucket_folder`)


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


CASE_FILE = "case.json"  # beside a bucket's spec.json: its case id, device, config and bucket key


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
    (tmp / "spec.json").write_text(spec.to_json() + "\n")
    (tmp / CASE_FILE).write_text(
        json.dumps(
            {"case_id": case_id, "device": device, "config": config.to_dict(), "bucket": key.to_dict()}
            | ({"threads": verdict.threads} if getattr(verdict, "threads", None) else {}), indent=2
        )
        + "\n"
    )
    (tmp / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
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
    (tmp / "repro.py").write_text(repro)
    os.chmod(tmp / "repro.py", 0o755)
    reason = SeverityReason.from_dict(severity) if severity else None
    write_issue_files(tmp, issue_files(spec, device=device, config=config, verdict=verdict, reason=reason, culprit=culprit,
                                       versions=versions, check=run_rendered_script if check_issue is True else None,
                                       checked=check_issue if isinstance(check_issue, DefaultsCheck) else None), compile_log)
    for name, text in (extra_files or {}).items():
        stem, _, suffix = name.partition(".")
        if not is_slug(stem) or suffix not in ("json", "md"):  # divfuzz's own names, never data
            raise ValueError(f"extra_files: {name!r} is not a bucket file name")
        (tmp / name).write_text(text)
