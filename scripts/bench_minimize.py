#!/usr/bin/env python3
"""Benchmark minimize+attribute: median and worst wall time and compiles per bucket.

    python scripts/bench_minimize.py [--device cpu] [--budget 120] [--cases seeds|drawn] [--n 6]

`seeds` uses the seed bug cases (tests/seed_specs.py); `drawn` draws graphs of up to 12 ops with
Hypothesis and keeps those that show a finding. Each analysis runs in one fresh worker.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> int:
    from divfuzz.records.config import CompileConfig
    from divfuzz.fuzzer.triage.analysis import analyze_finding
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
    from divfuzz.oracles.findings import finding_of

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--cases", choices=["seeds", "drawn"], default="seeds")
    ap.add_argument("--n", type=int, default=6)
    args = ap.parse_args()
    if args.cases == "seeds":
        from seed_specs import layer_norm_linear, sigmoid_gate, unary_bf16

        specs = [layer_norm_linear(4096), sigmoid_gate(4096), unary_bf16("gelu")][: args.n]
    else:
        from hypothesis import HealthCheck, given, seed, settings

        from divfuzz.generators.strategies import graph_specs

        specs = []

        @settings(max_examples=args.n * 20, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @seed(0)
        @given(graph_specs(max_ops=12, allow_backward=False))
        def draw(spec):
            specs.append(spec)

        draw()
    worker = Worker(args.device)
    rows = []
    try:
        for spec in specs:
            if len(rows) >= args.n:
                break
            finding = finding_of(worker.run(CaseRequest(spec, args.device, CompileConfig()), 300))
            if finding is None:
                continue
            t0 = time.perf_counter()
            a = analyze_finding(spec, worker=worker, device=args.device, config=CompileConfig(), kind=finding.kind.value,
                                budget_s=args.budget, timeout_s=300)
            wall = time.perf_counter() - t0
            compiles = a.minimized.predicate_calls if a.minimized else 0
            rows.append((wall, compiles, len(spec.nodes), len(a.spec.nodes), a.culprit.summary))
            print(f"{len(spec.nodes):2d} -> {len(a.spec.nodes)} ops  {wall:6.1f} s  {compiles:3d} minimizer compiles  {finding.kind.value}  {a.culprit.summary}", flush=True)
    finally:
        worker.stop()
    if not rows:
        print("no findings")
        return 1
    walls = [r[0] for r in rows]
    comps = [r[1] for r in rows]
    print(f"buckets {len(rows)}  wall median {statistics.median(walls):.1f} s worst {max(walls):.1f} s  "
          f"compiles median {statistics.median(comps):.0f} worst {max(comps)}  (device {args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
