"""Issue 54's two-leg measurement: the same campaign (same seed, budget, device) without and with
the analysis cuts (`CampaignOptions.analysis_cuts`; the leg without them sets
`DIVFUZZ_ANALYSIS_CUTS=off`), one after the other in one call, each with its own cold compile
cache; then a small table read from each leg's timings file (`divfuzz bench --breakdown`'s
reading): graphs and cases per second, the analyses' median seconds and compiles, the bug
analyses pending at the end, how far past its budget each leg ended, and, for every raw bucket
both legs analysed, whether they filed it under the same root-cause key (its minimized ops, its
culprit's fields, its rule).

    python scripts/bench_analyses.py --device cuda --budget 420 --seed 307 --out /tmp/bench-analyses
    python scripts/bench_analyses.py --device cpu --budget 120 --seed 3 \\
        --extra "--backend divfuzz.fuzzer.engine.planted:ulp_bump"

Each leg's store stays under --out (`divfuzz bench --breakdown OUT/leg-before/out`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from divfuzz.fuzzer.campaign.bench_legs import cold_cache_env
from divfuzz.fuzzer.campaign.breakdown import campaign_breakdown
from divfuzz.fuzzer.campaign.campaign_options import ANALYSIS_CUTS_ENV
from divfuzz.fuzzer.store import STORE_NAME, Store

LEGS = (("before", "off"), ("after", "on"))


def run_leg(name: str, cuts: str, root: Path, args) -> dict:
    """One campaign into `root/leg-<name>`, its cuts `cuts` ("on"/"off"); the figures of its run."""
    leg = root / f"leg-{name}"
    env = cold_cache_env(leg) | {ANALYSIS_CUTS_ENV: cuts}  # the caches beside the store's folder, never inside it
    folder = leg / "out"
    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", args.device, "--budget", f"{args.budget:.0f}s",
           "--seed", str(args.seed), "--out", str(folder), "--no-live", *shlex.split(args.extra)]
    t0 = time.monotonic()
    with open(leg / "fuzz.log", "w") as log:
        done = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"leg {name} exited {done.returncode}: see {leg / 'fuzz.log'}")
    b = campaign_breakdown(folder)
    timings = json.loads((folder / f"divfuzz-run{b.run_id}-timings.json").read_text())
    store = Store(folder / STORE_NAME, create=False)
    try:
        keys = {r.raw_key: str(r.key) for r in store.root_cause_rows()}
    finally:
        store.close()
    walls = list(b.analysis_walls)
    return {
        "name": name, "wall_s": wall, "span_s": b.span_s, "cases": b.cases, "graphs": b.graphs,
        "graphs_per_s": b.graphs / b.span_s if b.span_s else 0.0, "cases_per_s": b.rate_over_run,
        "analyses": len(walls), "median_s": statistics.median(walls) if walls else 0.0,
        "compiles_each": statistics.mean(b.analysis_compiles) if walls else 0.0,
        "analysis_s": sum(walls), "phases": b.analysis_phases,
        "pending": timings.get("pending_by_severity", {}), "over_budget_s": b.span_s - args.budget, "keys": keys,
    }


def table(legs: list[dict]) -> str:
    before, after = legs
    rows = [
        ("cases", "{cases}"), ("graphs compiled", "{graphs}"), ("graphs/s", "{graphs_per_s:.2f}"), ("cases/s", "{cases_per_s:.2f}"),
        ("analyses run", "{analyses}"), ("analysis median s", "{median_s:.1f}"), ("compiles per analysis", "{compiles_each:.1f}"),
        ("analysis seconds, all", "{analysis_s:.0f}"), ("bug analyses pending", "{bugs}"), ("pending (all)", "{pending_all}"),
        ("run span - budget, s", "{over_budget_s:+.1f}"),
    ]
    for leg in legs:
        leg["bugs"] = leg["pending"].get("bug", 0)
        leg["pending_all"] = sum(leg["pending"].values())
    lines = ["| | before (cuts off) | after (cuts on) |", "| --- | --- | --- |"]
    lines += [f"| {label} | {fmt.format(**before)} | {fmt.format(**after)} |" for label, fmt in rows]
    ratio = after["graphs_per_s"] / before["graphs_per_s"] if before["graphs_per_s"] else float("nan")
    lines.append(f"\ngraphs/s after/before: {ratio:.2f}x")
    for leg in legs:
        lines.append(f"{leg['name']} phases: " + ", ".join(f"{k} {v['s']:.0f} s / {v['compiles']} compiles"
                                                          for k, v in leg["phases"].items()))
    both = sorted(set(before["keys"]) & set(after["keys"]))
    differ = [k for k in both if before["keys"][k] != after["keys"][k]]
    lines.append(f"raw buckets analysed by both legs: {len(both)}; filed under another root-cause key: {len(differ)}")
    for k in differ[:10]:
        lines.append(f"  {k}\n    before: {before['keys'][k]}\n    after:  {after['keys'][k]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=int, default=420, help="seconds, each leg")
    parser.add_argument("--seed", type=int, default=307)
    parser.add_argument("--out", type=Path, default=Path("bench-analyses"))
    parser.add_argument("--extra", default="", help="more `divfuzz fuzz` options, one string")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    legs = [run_leg(name, cuts, args.out, args) for name, cuts in LEGS]
    print(table(legs))


if __name__ == "__main__":
    main()
