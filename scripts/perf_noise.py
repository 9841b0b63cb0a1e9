#!/usr/bin/env python3
"""The perf oracle's noise floor: the same graph timed against itself (eager vs a second eager
build, `execute_perf_case(self_check=True)`), over graphs drawn from the perf generator.

Prints the distribution of the A/A median ratios per phase and, for each candidate margin, how
many A/A cases the oracle's rule (`divfuzz.oracles.perf.is_slower`) would call slower: the margin for
`divfuzz.oracles.perf.DEFAULT_MARGIN` is the smallest with none, at or above the 99th percentile.

Usage: python scripts/perf_noise.py --device cuda --cases 40 [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from divfuzz.fuzzer.engine.execute_perf import execute_perf_case  # noqa: E402
from divfuzz.generators.strategies import perf_graph_specs  # noqa: E402
from divfuzz.oracles.perf import is_slower  # noqa: E402
from divfuzz.records.config import CompileConfig  # noqa: E402

MARGINS = (0.02, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30)


def draw_specs(device_type: str, n: int, at: int) -> list:
    specs = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck), phases=(Phase.generate,))
    @seed(at)
    @given(perf_graph_specs(device_type=device_type))
    def collect(spec):
        specs.append(spec)

    collect()
    return specs[:n]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.monotonic()
    verdicts = []
    for spec in draw_specs(a.device.split(":")[0], a.cases, a.seed):
        verdicts.append(execute_perf_case(spec, a.device, CompileConfig(), margin=0.0, self_check=True))
    phases = sorted({p.phase for v in verdicts for p in v.perf})
    print(f"{len(verdicts)} A/A cases on {a.device} in {time.monotonic() - t0:.0f} s")
    for phase in phases:
        cmps = [p for v in verdicts for p in v.perf if p.phase == phase]
        ratios = [c.ratio for c in cmps]
        print(f"{phase}: n={len(cmps)} median ratio p1 {pct(ratios, 0.01):.3f} p50 {pct(ratios, 0.5):.3f} "
              f"p90 {pct(ratios, 0.9):.3f} p99 {pct(ratios, 0.99):.3f} max {max(ratios):.3f}; "
              f"eager median {pct([c.eager_median_s for c in cmps], 0.5) * 1e3:.3f} ms; pairs p50 {pct([c.repeats for c in cmps], 0.5)}")
    from dataclasses import replace

    every = [p for v in verdicts for p in v.perf]
    for m in MARGINS:
        false = sum(is_slower(replace(p, margin=m)) for p in every)
        print(f"margin {m:.2f}: {false}/{len(every)} A/A phases called slower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
