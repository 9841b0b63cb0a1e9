"""The workers curve: cases/s of `divfuzz fuzz --no-minimize` against the worker count, to pick the knee.

    python scripts/bench_workers.py [--device cuda] [--workers 1,2,4,8,12,16] [--budget 45]

Each point is a real campaign in a fresh folder with a cold, private Inductor cache (as in
issue 11's table), a budget of `--budget` seconds and its own seed. The rate is cases stored
divided by the time from the run's start to its last stored case (worker start-up included, as
a user sees it). With the defaults the whole script takes about 6 minutes (6 x (45 s + start-up)).
It ends with what `--workers auto` picks on this host and the knee: the fewest workers that
reach 90% of the best rate.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one_point(device: str, workers: int, budget_s: int, seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"divfuzz-bench-w{workers}-") as tmp:
        out, cache = Path(tmp) / "out", Path(tmp) / "inductor-cache"
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "fuzzer", "fuzz", "--device", device, "--workers", str(workers),
               "--budget", f"{budget_s}s", "--seed", str(seed), "--no-minimize", "--no-live", "--out", str(out), *extra]
        t0 = time.time()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget_s + 240)
        wall = time.time() - t0
        if done.returncode != 0:
            raise SystemExit(f"workers {workers}: divfuzz exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        with sqlite3.connect(out / "divfuzz.sqlite") as db:
            started = db.execute("SELECT min(started_at) FROM runs").fetchone()[0]
            cases, first, last = db.execute("SELECT count(*), min(created_at), max(created_at) FROM cases").fetchone()
            by_device = dict(db.execute("SELECT coalesce(ran_on, '?'), count(*) FROM cases GROUP BY ran_on"))
    span = (last - started) if cases else float("nan")
    # Past start-up: cases after the first one, over the time from the first to the last. A nightly
    # run of hours sees this rate; the overall one charges every worker's start to a short point.
    steady = (cases - 1) / (last - first) if cases > 1 and last > first else 0.0
    return {"workers": workers, "cases": cases, "span_s": span, "wall_s": wall,
            "rate": cases / span if cases else 0.0, "steady": steady,
            "startup_s": (first - started) if cases else float("nan"), "by_device": by_device}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", default="1,2,4,8,12,16")
    parser.add_argument("--budget", type=int, default=45, help="seconds per point")
    parser.add_argument("extra", nargs="*", help="more `divfuzz fuzz` options, after --")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]

    from fuzzer.campaign.sizing import probe_host, size_workers

    host = probe_host(args.device)
    auto = size_workers(host, cuda=args.device.startswith("cuda"))
    print(f"host: {host.cores} usable cores, {(host.host_available_bytes or 0) / 2**30:.0f} GiB available, "
          f"GPUs free GiB {[round(b / 2**30, 1) for b in host.gpu_free_bytes]}", flush=True)
    rows = []
    for i, w in enumerate(counts):
        row = one_point(args.device, w, args.budget, seed=100 + i, extra=args.extra)
        rows.append(row)
        print(f"workers {w}: {row['cases']} cases, {row['rate']:.2f} cases/s, {row['steady']:.2f} past start-up "
              f"(first case at {row['startup_s']:.0f} s; {row['wall_s']:.0f} s wall) {row['by_device']}", flush=True)
    best = max(r["rate"] for r in rows)
    print("\n| workers | cases | seconds | cases/s | of best | first case at | cases/s past start-up |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['workers']} | {r['cases']} | {r['span_s']:.0f} | {r['rate']:.2f} | "
              f"{r['rate'] / best * 100 if best else 0:.0f}% | {r['startup_s']:.0f} s | {r['steady']:.2f} |")
    knee = min((r["workers"] for r in rows if r["rate"] >= 0.9 * best), default=None)
    print(f"\nknee (fewest workers at >= 90% of the best rate): {knee}")
    print(f"--workers auto picks here: {auto.reason}")


if __name__ == "__main__":
    main()
