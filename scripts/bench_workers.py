"""The workers curve of a default campaign: `divfuzz fuzz` as a user runs it (its case mix,
minimization on, its compile cache beside a fresh store: a first night), against the worker count.

    python scripts/bench_workers.py [--device cuda] [--workers 4,8,12,16] [--budget 300] [--no-minimize] [-- more fuzz options]

Each point is a real `divfuzz fuzz --budget B` in a fresh folder with its own seed
(`divfuzz.fuzzer.campaign.bench.run_default_campaign`). It reports the rate over the run (cases over the
command's wall: sizing, start-up, minimization and the report included, as a user sees it), the
rate past start-up (from the first stored case to the last), the wall against the budget, and
the breakdown read from the point's store (`divfuzz bench --breakdown`): where a case's time goes
and where the workers wait. With the defaults the script takes about 4 x 5 minutes. It ends with
what `--workers auto` picks on this host and the knee: the fewest workers at 90% of the best rate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", default="4,8,12,16")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per point (a default campaign: at least 300)")
    parser.add_argument("--no-minimize", action="store_true", help="pass --no-minimize to each campaign")
    parser.add_argument("--keep", type=Path, default=None, help="keep each point's store under this folder")
    parser.add_argument("extra", nargs="*", help="more `divfuzz fuzz` options, after --")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]

    from divfuzz.fuzzer.campaign.bench import default_campaign_table, run_default_campaign
    from divfuzz.fuzzer.campaign.sizing import probe_host, size_workers

    host = probe_host(args.device)
    auto = size_workers(host, cuda=args.device.startswith("cuda"))
    print(f"host: {host.cores} usable cores, {(host.host_available_bytes or 0) / 2**30:.0f} GiB available, "
          f"GPUs free GiB {[round(b / 2**30, 1) for b in host.gpu_free_bytes]}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="divfuzz-bench-workers-") as tmp:
        root = args.keep or Path(tmp)
        for i, w in enumerate(counts):
            run = run_default_campaign(args.device, root / f"w{w}", budget_s=args.budget, workers=w, seed=100 + i,
                                       minimize=not args.no_minimize, extra=tuple(args.extra))
            rows.append((w, run))
            print(f"\n## workers {w}\n{default_campaign_table(run)}", flush=True)
    best = max(run.rate_over_wall for _, run in rows)
    print("\n| workers | cases | wall s | vs budget | cases/s over the run | of best | first case at | cases/s past start-up | "
          "workers waiting between cases | analyses filed | pending bug |\n" + "| --- " * 11 + "|")
    for w, run in rows:
        b = run.breakdown
        waiting = b.slot_time.get("between cases", 0.0) / (b.workers * b.span_s) if b.span_s else 0.0
        print(f"| {w} | {b.cases} | {run.wall_s:.0f} | {run.wall_s - args.budget:+.0f} | {run.rate_over_wall:.2f} | "
              f"{run.rate_over_wall / best * 100 if best else 0:.0f}% | {b.first_case_s or 0:.0f} s | {b.rate_past_startup:.2f} | "
              f"{waiting:.1%} | {b.analyses.get('filed', 0)} | {b.pending_by_severity.get('bug', 0)} |")
    knee = min((w for w, run in rows if run.rate_over_wall >= 0.9 * best), default=None)
    print(f"\nknee (fewest workers at >= 90% of the best rate over the run): {knee}")
    print(f"--workers auto picks here: {auto.reason}")


if __name__ == "__main__":
    main()
