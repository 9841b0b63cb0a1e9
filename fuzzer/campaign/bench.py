"""`divfuzz bench`: what a default campaign does on this host, and where its time goes.

`run_default_campaign` runs `divfuzz fuzz` itself, as a user does (its default case mix, sizing,
minimization and budget), in its own process, then reads the rates and the breakdown from the
campaign's own store (`divfuzz.fuzzer.campaign.breakdown`): cases/s over the run (the command's wall) and
past start-up, each stage of a case, and where the workers wait. `scripts/bench_workers.py`
calls it once per worker count.

`run_bench` (for `--before-after`) runs a count-bounded campaign in this process, without
minimization, with a timed warm compiled run per case, and splits its time into generation,
build, eager, reference, compile, compiled run, oracles, store and worker round trips.

`--before-after` runs the same cases (same seed, workers and count) under each compile-cost
setting that divfuzz changed from torch's defaults, each leg with a private Inductor and Triton
cache (`compile_cost_legs`): torch's defaults, the compile threads split, divfuzz's defaults, and
divfuzz's again on the cache the third leg left. Only the environment the workers are spawned with
differs between legs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.fuzzer.campaign.breakdown import Breakdown, breakdown_table, campaign_breakdown
from divfuzz.fuzzer.campaign import campaign_options
from divfuzz.fuzzer.campaign.loop import run_campaign
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import InternalError

# Compiling and running the graphs under test: the work divfuzz exists to do.
GRAPH_WORK = ("eager", "reference", "compile", "compiled_run")  # "compile" holds "compile_backward"
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
        # The bench's choices: one input per compile and no minimization, so each case is one compile to time.
        opts = campaign_options.build(device=device, out_dir=Path(tmp), config=config or CompileConfig(), seed=seed,
                                      max_cases=cases, profile=True, workers=workers, inputs_per_compile=1, minimize=False)
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
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._inductor.config import decide_compile_threads

    with _environment({"TORCHINDUCTOR_COMPILE_THREADS": None}):
        return decide_compile_threads()


# What the workers start with to cut a compile's CPU without changing its bits
# (`divfuzz.fuzzer.engine.worker`), as a leg's environment: None keeps the worker's own choice.
COMPILE_CPU_CUTS_ON = {"TRITON_DISABLE_LINE_INFO": None, "DIVFUZZ_WORKER_GC_FREEZE": None}
COMPILE_CPU_CUTS_OFF = {"TRITON_DISABLE_LINE_INFO": "0", "DIVFUZZ_WORKER_GC_FREEZE": "0"}


def compile_cost_legs() -> list[BenchLeg]:
    """The compile-cost settings divfuzz changed, before and after (DESIGN.md, "Scale"):
    - torch's defaults: every worker starts a compile pool of the host's size, Triton writes its
      debug line info, and the collector scans everything the imports left;
    - each worker's pool gets its share of the cores, nothing else changed;
    - divfuzz's defaults: that, without Triton's line info and with the imports' objects frozen
      (`divfuzz.fuzzer.engine.worker`);
    - the same on the cache the previous leg left: what a resume, a replay or the gate pays."""
    split = {"TORCHINDUCTOR_COMPILE_THREADS": None}
    return [
        BenchLeg("torch's defaults (compile threads = cores, per worker)", "torch",
                 {"TORCHINDUCTOR_COMPILE_THREADS": str(torch_default_compile_threads()), **COMPILE_CPU_CUTS_OFF}),
        BenchLeg("compile threads split between workers", "split", {**split, **COMPILE_CPU_CUTS_OFF}),
        BenchLeg("divfuzz's defaults (that, no Triton line info, the imports frozen)", "divfuzz", {**split, **COMPILE_CPU_CUTS_ON}),
        BenchLeg("divfuzz's defaults, warm cache", "divfuzz", {**split, **COMPILE_CPU_CUTS_ON}),
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
    private Inductor and Triton caches (`TORCHINDUCTOR_CACHE_DIR` = `caches`/leg.cache and
    `TRITON_CACHE_DIR` its `triton` folder, so that a user's own `TRITON_CACHE_DIR` is not shared
    between legs; a temporary folder, removed after, when `caches` is None), and the user's
    environment is restored."""
    legs = legs if legs is not None else compile_cost_legs()
    results = []
    with contextlib.ExitStack() as stack:
        root = caches if caches is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="divfuzz-bench-caches-")))
        for leg in legs:
            env = {**leg.env, "TORCHINDUCTOR_CACHE_DIR": str(root / leg.cache), "TRITON_CACHE_DIR": str(root / leg.cache / "triton")}
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


@dataclass(frozen=True)
class DefaultCampaign:
    """A `divfuzz fuzz` run as a user starts it: its command, its wall (start-up, shutdown and
    report included) and the breakdown of its store."""

    command: tuple[str, ...]
    wall_s: float
    breakdown: Breakdown

    @property
    def rate_over_wall(self) -> float:
        return self.breakdown.cases / self.wall_s if self.wall_s > 0 else 0.0


def default_campaign_command(device: str, out_dir: Path, *, budget_s: float | None, max_cases: int | None = None,
                             workers: int | str = "auto", seed: int = 0, minimize: bool = True,
                             extra: tuple[str, ...] = ()) -> list[str]:
    """`divfuzz fuzz` with its defaults: only the device, the bound, the seed, the worker count
    (auto unless given), the store folder and `--no-minimize` when asked are set."""
    bound = ["--max-cases", str(max_cases)] if max_cases else ["--budget", f"{budget_s:g}s"]
    return [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", device, *bound, "--seed", str(seed), "--workers", str(workers),
            "--out", str(out_dir), "--no-live", *([] if minimize else ["--no-minimize"]), *extra]


def run_default_campaign(device: str, out_dir: Path, *, budget_s: float | None = 300.0, max_cases: int | None = None,
                         workers: int | str = "auto", seed: int = 0, minimize: bool = True, extra: tuple[str, ...] = (),
                         env: dict | None = None, cores: tuple[int, ...] | None = None) -> DefaultCampaign:
    """Run `divfuzz fuzz` (`default_campaign_command`) in a child process into `out_dir`, and read
    its breakdown from the store. `cores`: the CPU cores the child (and every process it starts)
    may run on, as `taskset` would pin it; None: this process's. A campaign that does not exit 0
    raises, with its output's tail."""
    command = default_campaign_command(device, out_dir, budget_s=budget_s, max_cases=max_cases, workers=workers, seed=seed,
                                       minimize=minimize, extra=extra)
    root = Path(__file__).resolve().parents[2]
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), child_env.get("PYTHONPATH", "")) if p)
    limit = (budget_s or 0) + 600 + (max_cases or 0) * 60
    t0 = time.monotonic()
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    done = subprocess.run(command, env=child_env, capture_output=True, text=True, timeout=limit, preexec_fn=pin)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise InternalError(f"{' '.join(command[2:])} exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    return DefaultCampaign(tuple(command), wall, campaign_breakdown(out_dir))


def default_campaign_table(run: DefaultCampaign) -> str:
    """The command, its wall and rate as a user sees them, then the store's breakdown."""
    b = run.breakdown
    head = (f"$ divfuzz {' '.join(run.command[3:])}\n"
            f"{b.cases} cases; wall {run.wall_s:.1f} s (the command's, start-up and report included)"
            + (f", {run.wall_s - b.budget_s:+.1f} s against the budget" if b.budget_s else "")
            + f": {run.rate_over_wall:.2f} cases/s over the run, {b.rate_past_startup:.2f} past start-up\n")
    return head + breakdown_table(b)
