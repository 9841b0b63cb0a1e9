#!/usr/bin/env python3
"""Benchmark minimize+attribute: median and worst wall time and compiles per bucket.

    python scripts/bench_minimize.py [--device cpu] [--budget 120] [--cases seeds|drawn] [--n 6]
    python scripts/bench_minimize.py --cases planted [--backend nan_first] [--n 6] [--budget 60]

`seeds` uses the seed bug cases (tests/seed_specs.py); `drawn` draws graphs of up to 12 ops with
Hypothesis and keeps those that show a finding. Each analysis runs in one fresh worker.

`planted` measures the minimizer alone (no attribution) under a planted-bug backend
(`divfuzz.fuzzer.engine.planted`) on drawn graphs of 6 to 12 ops with several outputs (Hypothesis
seed 0, forward and backward), each minimized twice: with the first step that keeps only the
finding's output (`keep_finding_output`) and without it (today's passes alone), keeping the
finding's kind, severity, rule, output and mechanism as an analysis does. It prints ops before and
after and the compiles of each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def drawn_specs(strategy, examples: int, keep=lambda spec: True) -> list:
    """The specs Hypothesis draws from `strategy` with seed 0 (the same list on every run), those `keep` takes."""
    from hypothesis import HealthCheck, given, seed, settings

    specs = []

    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @seed(0)
    @given(strategy)
    def draw(spec):
        if keep(spec):
            specs.append(spec)

    draw()
    return specs


def main() -> int:
    from divfuzz.records.config import CompileConfig
    from divfuzz.fuzzer.triage.analysis import analyze_finding
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
    from divfuzz.oracles.findings import finding_of

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--cases", choices=["seeds", "drawn", "planted"], default="seeds")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--backend", default="nan_first", help="a planted backend's name (--cases planted)")
    args = ap.parse_args()
    if args.cases == "planted":
        return bench_planted(args)
    if args.cases == "seeds":
        from seed_specs import layer_norm_linear, sigmoid_gate, unary_bf16

        specs = [layer_norm_linear(4096), sigmoid_gate(4096), unary_bf16("gelu")][: args.n]
    else:
        from divfuzz.generators.strategies import graph_specs

        specs = drawn_specs(graph_specs(max_ops=12, allow_backward=False), args.n * 20)
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


def bench_planted(args) -> int:
    """Ops and compiles of minimizations with and without the first step, on planted-bug findings."""
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
    from divfuzz.fuzzer.finding.judgement import judge
    from divfuzz.fuzzer.triage.shrink import PASSES, case_predicate, minimize_spec
    from divfuzz.generators.strategies import graph_specs
    from divfuzz.records.config import CompileConfig

    config = CompileConfig(backend=f"divfuzz.fuzzer.engine.planted:{args.backend}")
    specs = drawn_specs(graph_specs(min_ops=6, max_ops=12, modes=(), dynamic=False), 400,
                        keep=lambda spec: len(spec.outputs) >= 2)
    worker = Worker(args.device)
    rows = []
    try:
        for spec in specs:
            if len(rows) >= args.n:
                break
            verdict = worker.run(CaseRequest(spec, args.device, config), 300)
            judged = judge(verdict)
            if judged.finding is None or judged.reason is None:
                continue
            reason = judged.reason
            pred = case_predicate(worker, device=args.device, config=config, kind=judged.finding.kind.value,
                                  timeout_s=300, severity=reason.severity.value, rule=reason.rule,
                                  output=reason.output, mechanism=judged.mechanism)
            row = [spec, reason]
            for output in (reason.output, None):
                result = minimize_spec(spec, pred, budget_s=args.budget, passes=PASSES, output=output)
                row.append(result)
            rows.append(row)
            spec, reason, on, off = row
            print(f"{len(spec.nodes):2d} ops {len(spec.outputs)} outputs{' bwd' if spec.backward else ''} "
                  f"{reason.rule} on {reason.output}: with the first step {on.ops_after} ops, {on.predicate_calls} "
                  f"compiles, {on.wall_s:.0f} s; without {off.ops_after} ops, {off.predicate_calls} compiles, "
                  f"{off.wall_s:.0f} s | {on.focus}", flush=True)
    finally:
        worker.stop()
    if not rows:
        print("no findings")
        return 1
    for label, i in (("with the first step", 2), ("without", 3)):
        ops = [r[i].ops_after for r in rows]
        calls = [r[i].predicate_calls for r in rows]
        walls = [r[i].wall_s for r in rows]
        print(f"{label}: ops {sum(len(r[0].nodes) for r in rows)} -> {sum(ops)} in all; compiles median "
              f"{statistics.median(calls):.0f}, total {sum(calls)}; wall median {statistics.median(walls):.1f} s, "
              f"total {sum(walls):.0f} s; budget exhausted {sum(r[i].budget_exhausted for r in rows)}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
