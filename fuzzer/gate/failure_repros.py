"""What the gate leaves for a failing spec under `--repro-dir`: a folder named after the spec
(kept a direct child of the folder: the name comes from a corpus file) with spec.json, gate.json
(its result) and repro.py (the perf repro under `--oracle perf`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from divfuzz.fuzzer.gate.corpus import CorpusSpec
from divfuzz.records.config import CompileConfig
from divfuzz.records.safe_paths import child_path
from divfuzz.reports.repro import render_repro


def write_failure_repros(results: Sequence, specs: list[CorpusSpec], *, repro_dir: Path, device: str, config: CompileConfig,
                         oracle: str, perf_margin: float | None, timeout_s: float) -> list[Path]:
    """For each failing spec of `results` (the gate's `SpecResult`s): a folder with spec.json,
    gate.json (its result) and repro.py."""

    by_name = {s.name: s for s in specs}
    written = []
    for r in results:
        if r.passed or r.observed is None:
            continue
        repro_dir.mkdir(parents=True, exist_ok=True)
        # The name comes from a corpus file: it must stay a direct child of --repro-dir.
        folder = child_path(repro_dir, r.name, what="corpus spec name")
        folder.mkdir(exist_ok=True)
        spec = by_name[r.name].spec
        (folder / "spec.json").write_text(spec.to_json() + "\n")
        (folder / "gate.json").write_text(json.dumps(r.to_dict(), indent=2) + "\n")
        notes = tuple(f"gate: {p}" for p in r.problems)
        title = f"divfuzz gate: {r.name}"
        if oracle == "perf":
            # lazy: heavy: the perf engine imports torch; only --oracle perf needs it
            from divfuzz.fuzzer.engine.execute_perf import default_margin
            from divfuzz.reports.perf_repro import render_perf_repro

            margin = perf_margin if perf_margin is not None else default_margin(device)
            text = render_perf_repro(spec, device=device, config=config, title=title, margin=margin, notes=notes)
        else:
            text = render_repro(spec, device=device, config=config, title=title, notes=notes, timeout_s=int(timeout_s))
        (folder / "repro.py").write_text(text)
        (folder / "repro.py").chmod(0o755)
        written.append(folder)
    return written
