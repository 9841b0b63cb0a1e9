"""`divfuzz bench`: cases per minute, and where a case's wall time goes.

Runs a real campaign (no minimization, with a timed warm compiled run per case) and splits
the time into generation, build, eager, reference, compile, compiled run, oracles, store and
worker round trips. divfuzz's own share is everything but compiling and running the graphs.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fuzzer.campaign.loop import CampaignOptions, run_campaign
from records.config import CompileConfig

# Compiling and running the graphs under test: the work divfuzz exists to do.
GRAPH_WORK = ("eager", "reference", "compile", "compiled_run")
OWN_WORK = ("generate", "build", "oracles", "store", "worker_ipc")


@dataclass(frozen=True)
class BenchResult:
    device: str
    cases: int
    wall_s: float
    timings: dict

    @property
    def cases_per_minute(self) -> float:
        return self.cases / self.wall_s * 60 if self.wall_s else 0.0

    @property
    def own_share(self) -> float:
        own = sum(self.timings.get(k, 0.0) for k in OWN_WORK)
        total = own + sum(self.timings.get(k, 0.0) for k in GRAPH_WORK)
        return own / total if total else 0.0


def run_bench(device: str, cases: int, *, seed: int = 0, config: CompileConfig | None = None) -> BenchResult:
    with tempfile.TemporaryDirectory(prefix="divfuzz-bench-") as tmp:
        opts = CampaignOptions(
            device=device, out_dir=Path(tmp), config=config or CompileConfig(), seed=seed, max_cases=cases, profile=True
        )
        t0 = time.perf_counter()
        result = run_campaign(opts)
        wall = time.perf_counter() - t0
    return BenchResult(device, result.progress.cases, wall, dict(result.progress.timings))


def bench_table(r: BenchResult) -> str:
    order = ("generate", "build", "eager", "reference", "compile", "compiled_run", "oracles", "store", "worker_ipc")
    total = sum(r.timings.get(k, 0.0) for k in order)
    lines = [
        f"device {r.device}: {r.cases} cases in {r.wall_s:.1f} s = {r.cases_per_minute:.1f} cases/min "
        f"(wall includes worker start-up)",
        "| stage | total s | per case ms | share |",
        "| --- | --- | --- | --- |",
    ]
    for k in order:
        v = r.timings.get(k, 0.0)
        lines.append(f"| {k} | {v:.2f} | {v / max(r.cases, 1) * 1000:.1f} | {v / total * 100 if total else 0:.1f}% |")
    lines.append(f"divfuzz's own share (generate, build, oracles, store, worker IPC): {r.own_share * 100:.1f}%")
    return "\n".join(lines)
