"""`divfuzz bench --legs one,all,dask`: one GPU, every GPU of the host, and the Dask path on
the same GPUs, measured in one call, side by side, with their ratios.

Each leg is `divfuzz fuzz` as a user runs it (`bench.run_default_campaign`), one after another on
this host, on the same seed and the same bound (`--budget` or `--cases`), each with its own cold
compile cache (fresh Inductor and Triton folders), and read back from its own store
(`divfuzz.fuzzer.campaign.breakdown`): graphs compiled per second and cases per second.

- `one`: the first GPU and its share of the host's cores (usable cores / G, the campaign's process
  pinned to them, as `taskset` would), so a one-GPU host of the same make: `--workers auto` sizes
  it from that share;
- `all`: every GPU and every core (`--device cuda`, slot i on GPU i mod G);
- `dask`: a Dask scheduler and one Dask worker per GPU on this host (`dask scheduler`, `dask
  worker`, as a fleet is started: docs/campaigns.md), each pinned to its GPU and its share of the
  cores, with the slots per GPU that `all` has as its threads (and, with minimization, one more
  per analysis worker one host runs beside them: `node_threads`), then `fuzz --cluster-file`: the
  fleet path on the same GPUs as `all`. The cluster is up before its leg starts, as a fleet is,
  and is stopped after it.

Where there is one device (the CPU, or one GPU), `all` would run `one` again: it is not run and
the table says so; `dask` is then one Dask worker with `one`'s slots, and compared with `one`.
The ratios are all/one (what the host's other GPUs add) and dask/all (what the fleet path costs).
`--workers N` is N slots per device (one: N, all: N x G, dask: N per worker); `--workers auto`
sizes each leg here, once, by the campaign's own rule (`sizing.size_workers`) for the GPUs and
cores the leg has, and passes the count, so that no leg's campaign measures the host inside its
budget.

Invariants: every leg's child gets its own cache folders (never the user's compile cache); a
leg that fails stops the bench (InternalError naming the leg, with its output's tail); the Dask
processes it started are stopped whatever happens (their process groups, SIGTERM then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from divfuzz.fuzzer.campaign.bench import DefaultCampaign, run_default_campaign
from divfuzz.fuzzer.campaign.cluster import import_distributed
from divfuzz.fuzzer.campaign.sizing import HostResources, cuda_indices, probe_host, size_analysis_workers, size_workers
from divfuzz.records.errors import ConfigError, InternalError
from divfuzz.records.deadline import Deadline

# How long the local cluster may take to come up (its scheduler file, every worker joined).
CLUSTER_START_S = 180.0
STOP_WAIT_S = 20.0


@dataclass(frozen=True)
class Leg:
    """One leg's place on this host: its GPUs (`CUDA_VISIBLE_DEVICES` entries; () on the CPU),
    the cores each of its processes is pinned to (one tuple per Dask worker for `dask`; () for a
    process left on every core), and why it is not run (None: it runs)."""

    name: str
    gpus: tuple[str, ...] = ()
    cores: tuple[tuple[int, ...], ...] = ()
    skipped: str | None = None


def plan_legs(names: tuple[str, ...], device: str, gpus: list[str], cores: list[int]) -> list[Leg]:
    """Where each named leg (one, all, dask) runs (pure): `gpus`, the visible GPUs' entries (empty
    on the CPU), `cores`, the usable cores. A GPU's share of the cores is len(cores) // G of them,
    in order."""
    devices = max(1, len(gpus)) if device != "cpu" else 1
    share = max(1, len(cores) // devices)
    slices = [tuple(cores[i * share:(i + 1) * share]) or tuple(cores) for i in range(devices)]
    legs = []
    for name in names:
        if name == "one":
            legs.append(Leg("one", tuple(gpus[:1]), (slices[0],) if devices > 1 else ()))
        elif name == "all":
            why = None if devices > 1 else (f"one device only ({device if device == 'cpu' else 'GPU ' + gpus[0]}): "
                                            "'all' would run 'one' again, so the ratios compare with 'one'")
            legs.append(Leg("all", tuple(gpus), (), why))
        else:
            legs.append(Leg("dask", tuple(gpus), tuple(slices) if devices > 1 else (tuple(cores),)))
    return legs


def visible_gpus(device: str) -> list[str]:
    """The GPUs a campaign on `device` uses, as `CUDA_VISIBLE_DEVICES` entries (the driver's own
    list where it has one, as `sizing.slot_devices` names them); [] on the CPU."""
    if device == "cpu":
        return []
    indices = cuda_indices("cuda")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")][:len(indices)] if visible else [str(i) for i in indices]
    if ":" in device:
        return [entries[int(device.split(":", 1)[1])]]
    return entries


def usable_core_ids() -> list[int]:
    """The cores this process may run on, in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no pinning
        return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class LegResult:
    leg: Leg
    run: DefaultCampaign | None  # None: skipped
    slots: int = 0
    out_dir: Path | None = None

    @property
    def graphs_per_s(self) -> float:
        b = self.run.breakdown if self.run else None
        return b.graphs / b.span_s if b and b.span_s > 0 else 0.0

    @property
    def cases_per_s(self) -> float:
        return self.run.breakdown.rate_over_run if self.run else 0.0


def run_legs(names: tuple[str, ...], device: str, root: Path, *, budget_s: float | None, max_cases: int | None,
             workers: int | str, seed: int, minimize: bool, extra: tuple[str, ...] = (),
             log=None) -> list[LegResult]:
    """Run the named legs one after another into `root`/leg-<name>/ (each with its store in
    `out/` and its cold caches beside it) and return their results, in the order named. The
    `dask` leg needs Dask distributed: ConfigError, before any leg runs, without it."""
    if "dask" in names:
        import_distributed("--legs dask")
    taken = [root / f"leg-{name}" for name in names if (root / f"leg-{name}").exists()]
    if taken:  # its store would be resumed and its caches are warm: a leg starts from nothing
        raise ConfigError(f"--out {root}: {taken[0].name} is there from an earlier bench; give a new folder")
    gpus = visible_gpus(device)
    legs = plan_legs(names, device, gpus, usable_core_ids())
    counts = leg_slots(legs, device, workers, max(1, len(gpus)))
    results = []
    for leg in legs:
        if leg.skipped is not None:
            results.append(LegResult(leg, None))
            continue
        folder = root / f"leg-{leg.name}"
        folder.mkdir(parents=True, exist_ok=True)
        env = cold_cache_env(folder)
        if log is not None:
            log(f"leg {leg.name}: {describe(leg, device)}")
        common = dict(budget_s=budget_s, max_cases=max_cases, seed=seed, minimize=minimize, extra=extra)
        try:
            if leg.name == "dask":  # the fleet's slots and analysis workers: one per Dask worker thread
                with local_fleet(leg, folder, env, node_threads(counts["dask"], minimize)) as scheduler_file:
                    run = run_default_campaign("cuda" if device != "cpu" else "cpu", folder / "out", workers="auto", env=env,
                                               **{**common, "extra": (*extra, "--cluster-file", str(scheduler_file))})
            else:
                if leg.name == "one" and device != "cpu":
                    env["CUDA_VISIBLE_DEVICES"] = leg.gpus[0]
                run = run_default_campaign("cuda" if device != "cpu" else "cpu", folder / "out", workers=counts[leg.name],
                                           env=env, cores=leg.cores[0] if leg.cores else None, **common)
        except InternalError as e:
            raise InternalError(f"bench leg {leg.name}: {e}") from e
        results.append(LegResult(leg, run, run.breakdown.workers, folder / "out"))
    return results


def leg_slots(legs: list[Leg], device: str, workers: int | str, devices: int) -> dict[str, int]:
    """Each leg's slots, sized here once (so no leg's campaign probes the GPUs within its budget):
    `--workers N` is N per device; auto is `size_workers` of this host's measure (`probe_host`)
    for `all`, of the first GPU and its leg's cores for `one`, and for `dask` (per Dask worker,
    as its threads) `all`'s count shared between the devices."""
    if isinstance(workers, int):
        return {"one": workers, "all": workers * devices, "dask": workers}
    host = probe_host(device)
    cuda = device != "cpu"

    def sized(cores: int, gpus: tuple[int, ...]) -> int:
        return size_workers(HostResources(cores, host.host_available_bytes, gpus), cuda=cuda).workers

    one = next((leg for leg in legs if leg.name == "one"), None)
    every = sized(host.cores, host.gpu_free_bytes)
    return {"one": sized(len(one.cores[0]) if one is not None and one.cores else host.cores, host.gpu_free_bytes[:1]),
            "all": every, "dask": max(1, every // devices)}


def node_threads(slots: int, minimize: bool) -> int:
    """A `dask` leg node's Dask threads for `slots` slots: one per slot, and with minimization
    one more per analysis worker one host runs beside that many slots
    (`sizing.size_analysis_workers`), so that `--workers auto` on the fleet plans the same slots
    (`cluster.fuzzing_threads`) and the node's analyses run beside them, as one host's pool does."""
    return slots + (size_analysis_workers(slots).workers if minimize else 0)


def cold_cache_env(folder: Path) -> dict:
    """This process's environment with Inductor's and Triton's caches in fresh folders under
    `folder` (a leg's own, cold: nothing compiled before it is found there)."""
    env = dict(os.environ)
    for var, name in (("TORCHINDUCTOR_CACHE_DIR", "inductor-cache"), ("TRITON_CACHE_DIR", "triton-cache")):
        path = folder / name
        path.mkdir(mode=0o700, parents=True, exist_ok=False)  # a leg's folder is new: never a warm cache
        env[var] = str(path)
    return env


def describe(leg: Leg, device: str) -> str:
    """Where a leg runs, in words."""
    where = "the CPU" if device == "cpu" else f"GPU{'s' if len(leg.gpus) > 1 else ''} {','.join(leg.gpus)}"
    if leg.name == "dask":
        each = f"{len(leg.cores[0])} cores each" if leg.cores else "every core"
        return f"a local Dask cluster, one worker per device on {where}, {each}"
    cores = f"{len(leg.cores[0])} cores (pinned)" if leg.cores else "every core"
    return f"{where}, {cores}"


@contextlib.contextmanager
def local_fleet(leg: Leg, folder: Path, env: dict, threads: int):
    """A Dask scheduler and one Dask worker per device of `leg` on this host (`threads` threads
    each, pinned to the leg's cores for it, `CUDA_VISIBLE_DEVICES` its GPU), started as a fleet's
    are (their CLI, `distributed.worker.daemon` off); yields the scheduler file once every worker
    has joined, and stops them all after."""
    distributed = import_distributed("--legs dask")
    scheduler_file = folder / "scheduler.json"
    node_env = {**env, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        log = open(folder / "scheduler.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(scheduler_file)], env=node_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = Deadline.after(CLUSTER_START_S)
        while not scheduler_file.exists():
            if deadline.expired() or procs[0].poll() is not None:
                raise InternalError(f"the local Dask scheduler did not start: {tail(folder / 'scheduler.log')}")
            time.sleep(0.2)
        nodes = max(1, len(leg.gpus))
        for i in range(nodes):
            log = open(folder / f"worker{i}.log", "w")
            logs.append(log)
            own_env = {**node_env, **({"CUDA_VISIBLE_DEVICES": leg.gpus[i]} if leg.gpus else {})}
            cores = leg.cores[i] if i < len(leg.cores) else None
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file), "--nworkers", "1",
                 "--nthreads", str(threads), "--memory-limit", "0", "--no-dashboard", "--host", "127.0.0.1",
                 "--name", f"divfuzz-bench-{i}"], env=own_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=(lambda cores=cores: os.sched_setaffinity(0, cores)) if cores else None))
        client = distributed.Client(scheduler_file=str(scheduler_file), timeout=60, set_as_default=False)
        try:
            client.wait_for_workers(nodes, timeout=CLUSTER_START_S)
        except TimeoutError:
            raise InternalError(f"the local Dask cluster: {nodes} worker(s) did not join within {CLUSTER_START_S:.0f} s: "
                                f"{tail(folder / 'worker0.log')}") from None
        finally:
            client.close()
        yield scheduler_file
    finally:
        stop_processes(procs)
        for log in logs:
            log.close()


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """Stop the processes this module started, workers first: each one's process group (a Dask
    worker's nanny and its worker, and theirs) SIGTERM, then SIGKILL what is left after a wait."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in reversed(procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, sig)
        deadline = Deadline.after(STOP_WAIT_S)
        for p in reversed(procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline.left()))
        if all(p.poll() is not None for p in procs):
            return


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"({path} unreadable)"


def legs_table(results: list[LegResult], device: str, *, seed: int, budget_s: float | None, max_cases: int | None) -> str:
    """One row per leg (graphs/s and cases/s over the run, cases/s past start-up, the compile's
    seconds per graph: what the leg's cores made of it; how far past its budget the run ended and
    how many bug analyses it left pending: what a rate must not be bought with), then the ratios
    all/one and dask/all (dask/one where 'all' did not run)."""
    bound = f"budget {budget_s:g} s" if budget_s else f"{max_cases} cases"
    lines = [f"legs on {device}, seed {seed}, {bound} each, one after another, each with its own cold compile cache:",
             "| leg | where | slots | graphs | cases | span s | graphs/s | cases/s | cases/s past start-up | compile ms per graph "
             "| past the budget s | bug analyses pending |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_name = {}
    for r in results:
        if r.run is None:
            lines.append(f"| {r.leg.name} | not run: {r.leg.skipped} | | | | | | | | | | |")
            continue
        b = r.run.breakdown
        by_name[r.leg.name] = r
        compile_ms = (b.stages.get("compile_forward", 0.0) + b.stages.get("compile_backward", 0.0)) / b.graphs * 1000 if b.graphs else 0.0
        # What a rate must not be bought with: the budget kept, and every bug bucket analysed by the end.
        past = f"{b.span_s - b.budget_s:+.1f}" if b.budget_s else "-"
        lines.append(f"| {r.leg.name} | {describe(r.leg, device)} | {r.slots} | {b.graphs} | {b.cases} | {b.span_s:.1f} | "
                     f"{r.graphs_per_s:.2f} | {r.cases_per_s:.2f} | {b.rate_past_startup:.2f} | {compile_ms:.0f} | "
                     f"{past} | {b.pending_by_severity.get('bug', 0)} |")
    ratios = []
    for top, bottom in (("all", "one"), ("dask", "all" if "all" in by_name else "one")):
        a, b = by_name.get(top), by_name.get(bottom)
        if a is None or b is None or a is b:
            continue
        ratios.append(f"{top}/{bottom}: graphs/s {ratio(a.graphs_per_s, b.graphs_per_s)}, cases/s {ratio(a.cases_per_s, b.cases_per_s)}")
    lines += ["", "ratios: " + ("; ".join(ratios) if ratios else "none (fewer than two legs ran)")]
    for r in results:
        if r.run is not None:
            lines.append(f"leg {r.leg.name}: $ divfuzz {' '.join(r.run.command[3:])}")
    return "\n".join(lines)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"
