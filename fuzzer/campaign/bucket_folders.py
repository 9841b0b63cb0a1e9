"""A bucket's folder under `out_dir/buckets`, and filing a finished analysis into the store.

One owner for both, used by a campaign's slots (a new bucket's folder), its analysis pool and
`divfuzz minimize --pending` (`file_root_cause`). Invariants:
- the store records the folder it wrote (and the analysis, when there is one);
- one folder is written at a time (`_FOLDER_WRITE`);
- a raw bucket's folder is removed once its analysis re-keys it; its path is built from ids and
  a sanitised slug, never read from the store.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from divfuzz.fuzzer.campaign.analysis_pool import AnalysisJob
from divfuzz.fuzzer.engine.environment import environment_versions
from divfuzz.fuzzer.store import Store
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.config import CompileConfig
from divfuzz.records.verdict import Verdict
from divfuzz.reports.files import bucket_folder_name, write_bucket_folder

# Bucket folders are written from the slots' and the pool's threads, and writing a repro parses
# Python source (`ast.parse`), which CPython 3.11 does not make thread-safe (measured here, 3.11.7:
# "SystemError: AST constructor recursion depth mismatch" with two slots writing at once).
_FOLDER_WRITE = threading.Lock()


def write_bucket_files(store: Store, out_dir: Path, *, bucket_id: int, case_id: int, key, spec: GraphSpec, verdict,
                       analysis, device: str, config: CompileConfig, timeout_s: float, case_output: str = "") -> Path:
    """A bucket's folder under `out_dir/buckets`: the minimized repro and its attribution when
    analysed, else the case as drawn; the store records the folder (and the analysis). One folder
    is written at a time (`_FOLDER_WRITE`). What the compiler printed while the case ran
    (`case_output`) and while its analysis ran goes to the folder's compile.log."""
    with _FOLDER_WRITE:
        return _write_bucket_files(store, out_dir, bucket_id=bucket_id, case_id=case_id, key=key, spec=spec,
                                   verdict=verdict, analysis=analysis, device=device, config=config, timeout_s=timeout_s,
                                   case_output=case_output)


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
                        analysis, device: str, config: CompileConfig, timeout_s: float, case_output: str = "") -> Path:
    log = compile_log_text(case_id, case_output, analysis)
    stored = store.bucket(bucket_id).severity_reason  # judged once, when its case was stored: read, not judged again
    if analysis is not None:
        # lazy: heavy: the triage imports torch._dynamo; only an analysed bucket needs it
        from divfuzz.fuzzer.triage.analysis import write_bucket

        folder = write_bucket(out_dir / "buckets", bucket_id=bucket_id, key=key, analysis=analysis,
                              device=device, config=config, fallback_verdict=verdict, case_id=case_id,
                              timeout_s=int(timeout_s), versions=environment_versions(device), compile_log=log,
                              severity=stored)
        store.set_bucket_folder(bucket_id, str(folder))
        store.set_bucket_analysis(bucket_id, **analysis.to_dict())
        return folder
    folder = write_bucket_folder(out_dir / "buckets", bucket_id=bucket_id, key=key, spec=spec, device=device,
                                 config=config, verdict=verdict, case_id=case_id, timeout_s=int(timeout_s),
                                 versions=environment_versions(device), compile_log=log, severity=stored)
    store.set_bucket_folder(bucket_id, str(folder))
    return folder


def file_root_cause(store: Store, out_dir: Path, job: AnalysisJob, key, analysis, *, device: str, config: CompileConfig,
                    timeout_s: float):
    """File a finished analysis: re-key its raw bucket (`Store.resolve_root_cause`: its severity
    becomes the root-cause key's), give a bucket that became a root cause its
    minimized folder, and remove the raw bucket's folder. The same for the pool and `minimize
    --pending`."""
    filed = store.resolve_root_cause(job.raw_key, key)
    folder = None
    if filed.created:
        verdict = Verdict.from_dict(store.case(job.case_id).verdict)
        folder = write_bucket_files(store, out_dir, bucket_id=filed.bucket_id, case_id=job.case_id, key=key, spec=job.spec,
                                    verdict=verdict, analysis=analysis, device=device, config=config, timeout_s=timeout_s)
    if filed.raw_bucket_id is not None:  # its path is built from ids and a sanitised slug, never read from the store
        raw_folder = out_dir / "buckets" / bucket_folder_name(filed.raw_bucket_id, job.raw_key)
        if raw_folder.is_dir() and raw_folder != folder:
            shutil.rmtree(raw_folder)
    return filed
