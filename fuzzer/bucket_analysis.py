"""Minimize-and-attribute for the campaign: one bucket per root cause, and its folder.

`BucketAnalyzer.key_for` turns a finding's raw key (the graph's op set and modes) into the key of its root
cause: the minimized op pattern plus the culprit. A raw key is analyzed once per campaign (the
answer is cached), so graphs made of the same ops cost one minimization, and different graphs
that shrink to the same op pattern and culprit land in one bucket. `write_bucket` writes the
bucket folder with the minimal spec (repro header: culprit, ladder, minimization record), plus
`report.md` and `analysis.json`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

from fuzzer.buckets import BucketKey
from fuzzer.minimize import Analysis, analyze_finding
from generators.spec import GraphSpec
from reports.bug_report import render_bug_report
from reports.files import write_bucket_folder


class BucketAnalyzer:
    def __init__(self, *, device: str, config, strict: bool, budget_s: float, timeout_s: float, log=None, store=None):
        self.device = device
        self.config = config
        self.strict = strict
        self.budget_s = budget_s
        self.timeout_s = timeout_s
        self.log = log
        self.store = store  # remembers raw key -> root-cause key across runs (resume)
        self._cache: dict[str, tuple[BucketKey, Analysis]] = {}
        self._lock = threading.Lock()
        self.analyses = 0

    def key_for(self, spec: GraphSpec, raw_key: BucketKey, worker, *, budget_s: float | None = None) -> tuple[BucketKey, Analysis | None]:
        """The root-cause key of a finding whose raw key is `raw_key` (analyzing it when new).

        The analysis is None when the answer comes from the store (an earlier run analyzed it).
        """
        with self._lock:
            hit = self._cache.get(str(raw_key))
        if hit is not None:
            return hit
        known = self.store.root_cause_of(raw_key) if self.store is not None else None
        if known is not None:
            return known, None
        analysis = analyze_finding(
            spec,
            worker=worker,
            device=self.device,
            config=self.config,
            kind=raw_key.kind,
            budget_s=self.budget_s if budget_s is None else budget_s,
            timeout_s=min(self.timeout_s, 300.0),
            strict=self.strict,
            log=self.log,
        )
        key = replace(raw_key, signature=analysis.signature())
        if worker.aborted:  # cut short by an interrupt: remember nothing
            return key, analysis
        with self._lock:
            self._cache[str(raw_key)] = (key, analysis)
            self.analyses += 1
        if self.store is not None:
            self.store.remember_root_cause(raw_key, key)
        return key, analysis


def write_bucket(
    root: Path,
    *,
    bucket_id: int,
    key: BucketKey,
    analysis: Analysis,
    device: str,
    config,
    fallback_verdict,
    case_id: int | None,
    timeout_s: int,
    versions: dict,
) -> Path:
    """The bucket folder for a minimized case, with `report.md` and `analysis.json`."""
    verdict = analysis.verdict if analysis.verdict is not None else fallback_verdict
    folder = write_bucket_folder(
        root,
        bucket_id=bucket_id,
        key=key,
        spec=analysis.spec,
        device=device,
        config=config,
        verdict=verdict,
        case_id=case_id,
        notes=analysis.notes(),
        timeout_s=timeout_s,
    )
    data = analysis.to_dict()
    (folder / "analysis.json").write_text(json.dumps(data, indent=2) + "\n")
    (folder / "report.md").write_text(
        render_bug_report(
            analysis.spec,
            title=str(key),
            culprit=data["culprit"],
            versions=versions,
            device=device,
            config_desc=config.describe(),
            verdict=verdict,
            minimized=data["minimized"],
        )
    )
    return folder
