"""How many campaign slots a host runs, and which device each slot's worker is pinned to.

`size_workers` is a pure function of what the host has (cores, host memory, each GPU's free
memory), so the rule is tested without a GPU; `probe_host` measures those on the machine (the
GPUs' free memory from `nvidia-smi` where its numbering is CUDA's, else from a probe worker).
`slot_devices` pins slot i of a CUDA campaign to GPU i mod G. Invariants:
- `--workers N` is never changed: sizing only answers `--workers auto`;
- at least one worker, whatever the host reports;
- the same host gives the same count (it is part of a run's identity, so a resumed
  `--workers auto` campaign finds its run again as long as the host has not changed);
- a slot's device depends only on the slot number and the GPU count, never on timing, so the
  same seed and worker count give the same cases on one GPU or many.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from divfuzz.records.errors import ConfigError

GIB = 2**30

# A CPU worker holds torch, Inductor and a case's tensors: about 1 GiB resident, measured on
# this project's CPU campaigns; 1.5 GiB leaves room for the C++ compiler Inductor runs.
HOST_BYTES_PER_WORKER = int(1.5 * GIB)
# A CUDA worker's context, caching allocator and a case's tensors (the generator keeps a case's
# tensors far below this; `execute.check_fits` refuses larger ones).
GPU_BYTES_PER_WORKER = 2 * GIB
# On a GPU host a case is ~93% compile (issue 11), and compiling is CPU work: the Python of
# Dynamo/Inductor plus Triton's compiler. So the cores bound the workers, not the GPUs; the rest
# of the cores go to the driver (Hypothesis engines, the store) and to the compilers' subprocesses.
# Measured on the H100 host (16 cores, torch 2.11, cold caches, each worker given its share of the
# cores as compile threads; scripts/bench_workers.py, 45 s per point), cases/s past the workers'
# start-up (overall in brackets): 1 worker 0.36 (0.24), 2: 1.53 (1.02), 4: 3.02 (2.05),
# 8: 7.79 (5.27), 12: 8.94 (5.58), 16: 8.27 (5.39). A nightly run lives past start-up: the knee
# is 12, so 16 cores -> 12, and the last quarter of the cores goes to the driver and the compilers.
GPU_HOST_CORE_FRACTION = 0.75


@dataclass(frozen=True)
class HostResources:
    """What sizing reads from a host: usable cores, available host memory, free bytes per GPU
    (in the order of the driver's visible devices; empty on a CPU-only campaign)."""

    cores: int
    host_available_bytes: int | None = None  # None: unknown, not a limit
    gpu_free_bytes: tuple[int, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class WorkerSizing:
    workers: int
    reason: str  # one line: which limit decided, with the numbers


def size_workers(host: HostResources, *, cuda: bool) -> WorkerSizing:
    """The `--workers auto` rule.

    CPU campaign: one worker per usable core (a CPU case is compile-bound and single-threaded for
    most of its time: the campaign gives each worker cores // workers torch threads), capped by
    host memory at `HOST_BYTES_PER_WORKER` each.

    CUDA campaign over G GPUs: `GPU_HOST_CORE_FRACTION` of the cores (compiling is CPU work),
    capped by host memory as above and by the GPUs: each GPU takes at most its free memory //
    `GPU_BYTES_PER_WORKER`, and since slots are pinned round-robin, every GPU gets the same number
    (the smallest GPU's cap), so the count is rounded down to a multiple of G when it is at least G.

    Always at least 1.
    """
    if host.cores < 1:
        raise ConfigError(f"Expected at least 1 core but got cores={host.cores!r}")
    limits: list[tuple[int, str]] = []
    if cuda:
        if not host.gpu_free_bytes:
            raise ConfigError("a CUDA campaign needs at least one GPU to size its workers (gpu_free_bytes is empty)")
        limits.append((int(host.cores * GPU_HOST_CORE_FRACTION), f"{GPU_HOST_CORE_FRACTION:g} of {host.cores} cores"))
        gpus = len(host.gpu_free_bytes)
        per_gpu = min(b // GPU_BYTES_PER_WORKER for b in host.gpu_free_bytes)
        smallest = min(host.gpu_free_bytes) / GIB
        limits.append((per_gpu * gpus, f"{gpus} GPU(s), the emptiest with {smallest:.1f} GiB free, {GPU_BYTES_PER_WORKER // GIB} GiB per worker"))
    else:
        limits.append((host.cores, f"{host.cores} cores"))
    if host.host_available_bytes is not None:
        limits.append((host.host_available_bytes // HOST_BYTES_PER_WORKER,
                       f"{host.host_available_bytes / GIB:.1f} GiB host memory available, {HOST_BYTES_PER_WORKER / GIB:g} GiB per worker"))
    count, why = min(limits, key=lambda limit: limit[0])
    if cuda and count >= len(host.gpu_free_bytes):
        count -= count % len(host.gpu_free_bytes)  # the same number of slots on every GPU
    count = max(1, count)
    return WorkerSizing(count, f"{count} worker{'s' if count != 1 else ''}, limited by {why}")


def usable_cores() -> int:
    """Cores this process may run on (taskset and cgroup cpusets count; `os.cpu_count` does not)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_free_bytes(indices: list[int]) -> list[int]:
    """Free bytes of each listed GPU. Runs in a worker process (`Worker.call`): asking the CUDA
    driver creates a context on every GPU asked, which the campaign's driver must not keep."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    return [int(torch.cuda.mem_get_info(i)[0]) for i in indices]


# `nvidia-smi` answers in a fraction of a second what a probe worker answers in 5-9 s (it imports
# torch and creates a CUDA context); that time is before any slot starts, so it is start-up.
NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=name,memory.free", "--format=csv,noheader,nounits")
NVIDIA_SMI_TIMEOUT_S = 10.0


def parse_nvidia_smi(text: str, indices: list[int], *, visible_count: int) -> list[int] | None:
    """Free bytes of the listed GPUs from `NVIDIA_SMI_QUERY`'s output ("<name>, <MiB>" per GPU),
    or None when its numbering may not be CUDA's: a GPU count other than CUDA's, or GPUs of more
    than one model (CUDA orders unlike models fastest first, nvidia-smi by PCI bus). None for
    anything unreadable too: the caller then asks a probe worker."""
    rows = []
    for line in text.strip().splitlines():
        name, sep, free = line.rpartition(",")
        if not sep or not free.strip().isdigit():
            return None
        rows.append((name.strip(), int(free.strip()) * 2**20))
    if len(rows) != visible_count or len({name for name, _ in rows}) != 1 or not all(0 <= i < len(rows) for i in indices):
        return None
    return [rows[i][1] for i in indices]


def gpu_free_bytes_from_smi(indices: list[int], *, visible_count: int) -> list[int] | None:
    """`parse_nvidia_smi` of this host's `nvidia-smi`; None where it cannot stand in for CUDA's
    own numbering (`CUDA_VISIBLE_DEVICES` or another `CUDA_DEVICE_ORDER` set) or does not run."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None or os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") not in ("FASTEST_FIRST", "PCI_BUS_ID"):
        return None
    try:
        done = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(done.stdout, indices, visible_count=visible_count) if done.returncode == 0 else None


def cuda_indices(device: str) -> list[int]:
    """The driver's GPU indices a campaign on `device` uses: all visible ones for 'cuda', one for 'cuda:N'."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    if ":" in device:
        return [int(device.split(":", 1)[1])]
    return list(range(torch.cuda.device_count()))


def probe_host(device: str) -> HostResources:
    """Measure this host for a campaign on `device` ('cpu', 'cuda' or 'cuda:N')."""
    gpus: tuple[int, ...] = ()
    if device.startswith("cuda"):
        indices = cuda_indices(device)
        from_smi = gpu_free_bytes_from_smi(indices, visible_count=len(cuda_indices("cuda")))
        if from_smi is not None:
            return HostResources(cores=usable_cores(), host_available_bytes=host_available_bytes(), gpu_free_bytes=tuple(from_smi))
        # lazy: CLI start-up: the CLI imports this module (`resolve_workers`); the worker module brings specs and verdicts
        from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget

        probe = Worker("cpu")  # a CPU worker: it initialises no CUDA until asked
        try:
            outcome = probe.call(WorkerTarget.GPU_FREE_BYTES, {"indices": indices}, 120.0)
        finally:
            probe.stop()
        if outcome.error:
            raise ConfigError(f"--workers auto: could not read the GPUs' free memory ({outcome.error})")
        gpus = tuple(outcome.value)
    return HostResources(cores=usable_cores(), host_available_bytes=host_available_bytes(), gpu_free_bytes=gpus)


@dataclass(frozen=True)
class SlotDevice:
    """Where one slot's worker runs. `name` is the device in the driver's numbering (what the
    store records); the worker sees only that GPU (`env`), as its `worker_device`."""

    name: str
    worker_device: str
    env: dict = field(default_factory=dict)


def slot_devices(device: str, workers: int, *, gpu_count: int, visible: str | None = None) -> list[SlotDevice]:
    """Pin each slot: 'cpu' -> all on the CPU; 'cuda' -> slot i on GPU i mod `gpu_count`;
    'cuda:N' -> all on GPU N. A pinned worker gets CUDA_VISIBLE_DEVICES naming only its GPU
    (an entry of the driver's own `visible` list when it has one, so a narrowed host stays
    narrowed) and runs on 'cuda', so nothing in it (Inductor, Triton) can touch another GPU."""
    if device == "cpu":
        return [SlotDevice("cpu", "cpu") for _ in range(workers)]
    entries = [e.strip() for e in visible.split(",")] if visible else [str(i) for i in range(gpu_count)]
    if ":" in device:
        indices = [int(device.split(":", 1)[1])] * workers
    else:
        if gpu_count < 1:
            raise ConfigError(f"--device {device}: no CUDA GPU is visible")
        indices = [slot % gpu_count for slot in range(workers)]
    if max(indices) >= len(entries):
        raise ConfigError(f"--device {device}: GPU {max(indices)} is not in CUDA_VISIBLE_DEVICES={visible!r}")
    return [SlotDevice(f"cuda:{i}", "cuda", {"CUDA_VISIBLE_DEVICES": entries[i]}) for i in indices]


def campaign_slot_devices(device: str, workers: int) -> list[SlotDevice]:
    """Each slot's device (`slot_devices` on this host's GPUs): every visible GPU for 'cuda' (round-robin), one for 'cuda:N', else the CPU."""
    gpu_count = 0
    if device.startswith("cuda"):
        # lazy: heavy: torch, only on a CUDA device
        import torch

        gpu_count = torch.cuda.device_count()
    return slot_devices(device, workers, gpu_count=gpu_count, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))



# Bucket analysis (minimize + attribute) runs in its own workers beside the fuzzing slots. An
# analysis worker is as CPU-hungry as a slot (it compiles candidate after candidate), so on a host
# the slots already fill, A analysis workers beside W slots leave the slots about W / (W + A) of
# the CPU. Issue 11 asks fuzzing to keep at least 70% of its no-minimize rate: W / (W + A) >= 0.7,
# so A <= W * 3/7. Analyses come in bursts (new raw keys are common early in a campaign, rare
# later) and those still open at the budget's end are kept pending, so few workers suffice.
ANALYSIS_MIN_FUZZING_SHARE = 0.7


def size_analysis_workers(slots: int) -> WorkerSizing:
    """The `--analysis-workers auto` rule: the most analysis workers that leave the `slots` fuzzing
    workers `ANALYSIS_MIN_FUZZING_SHARE` of the worker processes, and at least 1. Pure: the same
    slot count gives the same answer (the pool does not change which cases run, only when their
    buckets are re-keyed)."""
    if slots < 1:
        raise ConfigError(f"Expected at least 1 fuzzing worker but got slots={slots!r}")
    share = ANALYSIS_MIN_FUZZING_SHARE
    count = max(1, int(slots * (1 - share) / share + 1e-9))
    return WorkerSizing(count, f"{count} analysis worker{'s' if count != 1 else ''} beside {slots} fuzzing "
                               f"(at most {1 - share:.0%} of the worker processes, at least 1)")


def resolve_workers(workers: int | str, device: str, oracle: str = "numeric") -> tuple[int, str]:
    """`--workers` as a count and the sentence that explains it: an explicit count as given;
    'auto' sized from this host (the rule: `size_workers`). The perf oracle times on a device nobody else uses: one worker per GPU, one on the CPU;
    asking for more exits 2 (their timings would measure each other)."""
    if oracle == "perf":
        # lazy: torch-free module: it loads torch only when this runs
        import torch

        alone = torch.cuda.device_count() if device == "cuda" else 1
        if workers != "auto" and workers > alone:
            raise ConfigError(f"--workers {workers} with --oracle perf: timings need the device alone; at most {alone} "
                              f"worker{'s' if alone != 1 else ''} on {device} (one per GPU, one on the CPU)")
        count = alone if workers == "auto" else workers
        return count, f"{count} worker{'s' if count != 1 else ''} (--oracle perf: one per device)"
    if workers != "auto":
        return workers, f"{workers} worker{'s' if workers != 1 else ''}"
    sizing = size_workers(probe_host(device), cuda=device.startswith("cuda"))
    return sizing.workers, f"--workers auto: {sizing.reason}"
