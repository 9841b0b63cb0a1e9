"""Before and after a speed change: the same cases, the same verdicts, and where the time went.

    python scripts/bench_compare_stores.py BEFORE_OUT AFTER_OUT

Each side is a campaign's --out folder (or its divfuzz.sqlite), both run with the same command
(e.g. `divfuzz fuzz --device cpu --max-cases 40 --seed 3 --workers 2 --no-minimize`). Exits 1
unless every (slot, index) holds the same spec on both sides with the same verdict (timings
aside: `Verdict` equality leaves them out), then prints both breakdowns' per-case stages side by side.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _verdicts_by_spec(path: Path) -> dict:
    """spec digest -> the sorted verdicts (timings aside) of the latest run's cases of that spec."""
    import json

    from divfuzz.fuzzer.store.schema import resolve_store
    from divfuzz.fuzzer.store import Store
    from divfuzz.records.verdict import Verdict

    store = Store(resolve_store(path), create=False)
    try:
        cases = store.case_summaries(run_id=store.latest_run_id())
    finally:
        store.close()
    found: dict = {}
    for c in cases:
        verdict = Verdict.from_dict(c["verdict"]).to_dict()
        verdict.pop("timings", None)
        found.setdefault(c["spec_digest"], []).append(json.dumps(verdict, sort_keys=True))
    return {d: sorted(v) for d, v in found.items()}, len(cases)


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    from divfuzz.fuzzer.campaign.breakdown import campaign_breakdown

    before, after = (Path(a) for a in sys.argv[1:])
    (a, na), (b, nb) = _verdicts_by_spec(before), _verdicts_by_spec(after)
    same_specs = {d: len(v) for d, v in a.items()} == {d: len(v) for d, v in b.items()}
    differ = [d for d in set(a) & set(b) if a[d] != b[d]]
    print(f"{na} cases before, {nb} after ({len(a)} distinct specs); same specs: {same_specs}; specs whose verdicts differ: {len(differ)}")
    for d in differ[:5]:
        print(f"  spec {d[:12]}")
    ba, bb = campaign_breakdown(before), campaign_breakdown(after)
    print("\n| per case, ms | before | after |\n| --- | --- | --- |")
    for k in sorted(set(ba.stages) | set(bb.stages)):
        print(f"| {k} | {ba.stages.get(k, 0) / max(ba.cases, 1) * 1000:.0f} | {bb.stages.get(k, 0) / max(bb.cases, 1) * 1000:.0f} |")
    print(f"| cases/s over the run | {ba.rate_over_run:.2f} | {bb.rate_over_run:.2f} |")
    print(f"| cases/s past start-up | {ba.rate_past_startup:.2f} | {bb.rate_past_startup:.2f} |")
    raise SystemExit(0 if same_specs and not differ else 1)


if __name__ == "__main__":
    main()
