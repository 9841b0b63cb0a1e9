"""The gate's short campaign (`gate --fuzz`, `--fuzz-cases`): a seeded campaign in a scratch folder,
its buckets judged as campaigns judge them. Only a `bug` not already known fails the gate.

Invariants: the scratch folder is removed whatever happens; an interrupted campaign interrupts the
gate; a failing finding's folder is copied under `repro_dir/fuzz` by its sanitised name.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity
from divfuzz.reports.root_causes import root_cause_groups


def gate_fuzz(*, device: str, config: CompileConfig, seed: int, budget_s: float | None, cases: int | None, timeout_s: float,
              repro_dir: Path | None, known: tuple[str, ...], corpus_buckets: set[str]) -> dict[str, Any]:
    """A short seeded campaign; findings the one severity policy rates `bug` (errors, wrong
    answers: `divfuzz.oracles.severity_policy`, as in a campaign) and not known (in the baseline's known_buckets
    or a known corpus divergence) fail the gate. Each finding names its root cause and whether that
    is a known upstream bug (`divfuzz.reports.root_causes`). A failing finding's folder is copied under
    `repro_dir/fuzz` when given.

    With `cases` the campaign is a fixed number of cases: deterministic. With only a time
    budget the number of cases depends on the machine's speed.
    """
    # lazy: heavy: the campaign loop and its workers; only gate --fuzz needs them
    from divfuzz.fuzzer.campaign import campaign_options, loop
    from divfuzz.fuzzer.store import Store
    from divfuzz.records.safe_paths import child_path

    tmp = Path(tempfile.mkdtemp(prefix="divfuzz-gate-fuzz-"))
    try:
        # The gate's choices: one input per compile, no minimization (a failing bucket's case is
        # its repro), one worker; the baseline's known buckets were written under the same ones.
        copts = campaign_options.build(device=device, out_dir=tmp, config=config, seed=seed, budget_s=budget_s,
                                       max_cases=cases, timeout_s=timeout_s, inputs_per_compile=1, minimize=False, workers=1)
        outcome = loop.run_campaign(copts)
        if outcome.interrupted:  # the campaign saved and stopped on a signal: so does the gate (exit 2)
            raise KeyboardInterrupt
        store = Store(outcome.store_path)
        try:
            findings = []
            buckets = store.buckets(run_id=outcome.run_id)
            causes = root_cause_groups(buckets)
            cause_of = {b.id: rc for rc in causes for b in rc.buckets}
            for b in buckets:
                identity = b.key.identity()
                # Judged as campaigns judge it: only a bug fails a pull request.
                gate_worthy = b.severity == Severity.BUG.value
                is_known = identity in known or identity in corpus_buckets
                folder = None
                if gate_worthy and not is_known and repro_dir is not None and b.folder:
                    (repro_dir / "fuzz").mkdir(parents=True, exist_ok=True)
                    dest = child_path(repro_dir / "fuzz", Path(b.folder).name, what="bucket folder")
                    shutil.copytree(b.folder, dest, dirs_exist_ok=True)
                    folder = str(dest)
                findings.append(
                    {"bucket": str(b.key), "identity": identity, "kind": b.key.kind, "triage": b.triage, "severity": b.severity, "cases": b.count,
                     "fails_gate": gate_worthy and not is_known, "known": is_known, "repro": folder,
                     "root_cause": cause_of[b.id].title, "upstream": cause_of[b.id].known}
                )
            stats = store.run_stats(outcome.run_id)
        finally:
            store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "seed": seed,
        "max_cases": cases,
        "budget_s": budget_s,
        "cases": stats["cases"],
        "by_status": dict(sorted(stats["by_status"].items())),
        "findings": findings,
        "root_causes": [rc.to_dict() for rc in causes],
        "failing": [f["bucket"] for f in findings if f["fails_gate"]],
    }
