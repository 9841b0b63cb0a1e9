"""`divfuzz bench`: cases per minute, and where a case's wall time goes.

Runs a real campaign (no minimization, with a timed warm compiled run per case) and splits
the time into generation, build, eager, reference, compile, compiled run, oracles, store and
worker round trips. divfuzz's own share is everything but compiling and running the graphs.

`--before-after` runs the same cases (same seed, workers and count) under each compile-cost
setting that divfuzz changed from torch's defaults, each leg with a private Inductor cache
(`compile_cost_legs`): torch's defaults, divfuzz's, and divfuzz's again on the cache the second leg
left. Only the environment the workers are spawned with differs between legs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
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
    setting: str = "divfuzz's defaults"
    workers: int = 1

    @property
    def cases_per_minute(self) -> float:
        return self.cases / self.wall_s * 60 if self.wall_s else 0.0

    @property
    def own_share(self) -> float:
        own = sum(self.timings.get(k, 0.0) for k in OWN_WORK)
        total = own + sum(self.timings.get(k, 0.0) for k in GRAPH_WORK)
        return own / total if total else 0.0


def run_bench(device: str, cases: int, *, seed: int = 0, config: CompileConfig | None = None, workers: int = 1,
              setting: str = "divfuzz's defaults") -> BenchResult:
    with tempfile.TemporaryDirectory(prefix="divfuzz-bench-") as tmp:
        opts = CampaignOptions(
            device=device, out_dir=Path(tmp), config=config or CompileConfig(), seed=seed, max_cases=cases, profile=True,
            workers=workers,
        )
        t0 = time.perf_counter()
        result = run_campaign(opts)
        wall = time.perf_counter() - t0
    return BenchResult(device, result.progress.cases, wall, dict(result.progress.timings), setting, workers)


@dataclass(frozen=True)
class BenchLeg:
    """One setting of a before/after bench: the environment its workers are spawned with.
    `cache` names the leg's private Inductor cache folder; legs that name the same one share it,
    in order (a later leg finds what an earlier one wrote)."""

    setting: str
    cache: str
    env: dict = field(default_factory=dict)  # None as a value: the variable is removed


def torch_default_compile_threads() -> int:
    """What Inductor picks for `compile_threads` in a process where nothing sets it: torch's own
    `decide_compile_threads` (the usable cores, at most 32, on Linux), asked with
    `TORCHINDUCTOR_COMPILE_THREADS` unset."""
    from torch._inductor.config import decide_compile_threads

    with _environment({"TORCHINDUCTOR_COMPILE_THREADS": None}):
        return decide_compile_threads()


def compile_cost_legs() -> list[BenchLeg]:
    """The compile-cost settings divfuzz changed, before and after (DESIGN.md, "Scale"):
    - torch's defaults: every worker starts a compile pool of the host's size;
    - divfuzz's defaults: each worker's pool gets its share of the cores (`fuzzer.engine.worker`);
    - the same on the cache the previous leg left: what a resume, a replay or the gate pays."""
    return [
        BenchLeg("torch's defaults (compile threads = cores, per worker)", "torch",
                 {"TORCHINDUCTOR_COMPILE_THREADS": str(torch_default_compile_threads())}),
        BenchLeg("divfuzz's defaults (compile threads split between workers)", "divfuzz",
                 {"TORCHINDUCTOR_COMPILE_THREADS": None}),
        BenchLeg("divfuzz's defaults, warm cache", "divfuzz", {"TORCHINDUCTOR_COMPILE_THREADS": None}),
    ]


def _apply(env: dict) -> None:
    """Set each variable of `env` in this process's environment; None removes it."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def _environment(env: dict):
    """`env` applied to this process's environment (which spawned workers inherit), then undone."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        _apply(env)
        yield
    finally:
        _apply(saved)


def run_before_after(device: str, cases: int, *, seed: int = 0, workers: int = 1,
                     legs: list[BenchLeg] | None = None, caches: Path | None = None) -> list[BenchResult]:
    """The same campaign under each leg, in order; each leg's workers see its environment and its
    private Inductor cache (`TORCHINDUCTOR_CACHE_DIR` = `caches`/leg.cache; a temporary folder,
    removed after, when `caches` is None), and the user's environment is restored."""
    legs = legs if legs is not None else compile_cost_legs()
    results = []
    with contextlib.ExitStack() as stack:
        root = caches if caches is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="divfuzz-bench-caches-")))
        for leg in legs:
            env = {**leg.env, "TORCHINDUCTOR_CACHE_DIR": str(root / leg.cache)}
            with _environment(env):
                results.append(run_bench(device, cases, seed=seed, workers=workers, setting=leg.setting))
    return results


def before_after_table(results: list[BenchResult]) -> str:
    """One row per leg: cases/min and compile seconds per case, against the first leg."""
    first = results[0]
    lines = [f"device {first.device}, {first.workers} worker(s), {first.cases} cases per leg, the same cases in each:",
             "| setting | cases/min | compile s per case | against the first |", "| --- | --- | --- | --- |"]
    for r in results:
        per_case = r.timings.get("compile", 0.0) / max(r.cases, 1)
        ratio = r.cases_per_minute / first.cases_per_minute if first.cases_per_minute else 0.0
        lines.append(f"| {r.setting} | {r.cases_per_minute:.1f} | {per_case:.2f} | {ratio:.2f}x |")
    return "\n".join(lines)


def bench_table(r: BenchResult) -> str:
    order = ("generate", "build", "eager", "reference", "compile", "compiled_run", "oracles", "store", "worker_ipc")
    total = sum(r.timings.get(k, 0.0) for k in order)
    lines = [
        f"device {r.device}: {r.cases} cases in {r.wall_s:.1f} s = {r.cases_per_minute:.1f} cases/min "
        f"with {r.workers} worker(s) (wall includes worker start-up)",
        "| stage | total s | per case ms | share |",
        "| --- | --- | --- | --- |",
    ]
    for k in order:
        v = r.timings.get(k, 0.0)
        lines.append(f"| {k} | {v:.2f} | {v / max(r.cases, 1) * 1000:.1f} | {v / total * 100 if total else 0:.1f}% |")
    lines.append(f"divfuzz's own share (generate, build, oracles, store, worker IPC): {r.own_share * 100:.1f}%")
    return "\n".join(lines)
