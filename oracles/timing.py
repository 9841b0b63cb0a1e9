"""Timing callables side by side, for the perf oracle (`divfuzz.oracles.perf` judges the samples).

`Timer.interleaved_samples(fns, rounds)` calls each function once per round, in turn (the order
reversed every other round), and returns each one's per-call seconds:
- on a GPU, device time: CUDA events around the call's kernels, which run back to back behind a
  GPU sleep (`_GpuTimer`), after zeroing a buffer twice the size of the L2 cache (as
  `triton.testing.do_bench` does), so that no call finds its inputs in L2;
- on the CPU, wall time: `time.perf_counter` around each call, on a pinned thread count
  (`pinned_threads`); there the wrapper's per-call cost is part of what is measured.
Alternating call by call, not block by block, puts drift (clock changes, thermals, a neighbour
process) on every function alike: the paired ratios stay honest when the machine is not idle.
Invariant: every function runs exactly `rounds` times inside the measurement, after the
caller's warm-up; nothing here compiles or judges.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence

import torch


def clock_state(device: str) -> str:
    """The GPU's current SM clock (needs pynvml, which torch uses), or '' when unknown or on CPU."""
    if not device.startswith("cuda"):
        return ""
    try:
        return f"SM {torch.cuda.clock_rate(torch.device(device))} MHz"
    except Exception:  # pynvml missing or NVML unavailable: the clock stays unrecorded
        return ""


@contextlib.contextmanager
def pinned_threads(device: str, threads: int | None):
    """On the CPU, hold torch's intra-op thread count at `threads` (default: the current count)
    for the block, so that eager and compiled get the same cores; a no-op on a GPU."""
    if not device.startswith("cpu"):
        yield None
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def timer_description(device: str, threads: int | None) -> str:
    if device.startswith("cuda"):
        return "cuda events, device time (launched ahead behind a GPU sleep), L2 flushed before each call"
    return f"perf_counter, {threads} thread{'s' if threads != 1 else ''}"


class _GpuTimer:
    """Device time per call: the call's kernels run back to back behind a GPU sleep.

    Before each timed call the stream gets the L2 flush and then `torch.cuda._sleep` long enough
    (twice the call's measured CPU time, calibrated once) for the CPU to enqueue every kernel of
    the call before the GPU reaches the start event. The events then bracket kernels with no
    launch gaps between them: the GPU's own time for the call, without the CPU-side cost of
    launching it (Python, guards, the compiled wrapper), which `mode="reduce-overhead"` (CUDA
    graphs) exists to remove and which would otherwise swamp every small graph.
    """

    def __init__(self, device: str):
        self.device = torch.device(device)
        l2 = int(getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0) or 64 * 2**20)
        self.flush_buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=self.device)
        self.cycles_per_s = self._calibrate()

    def _calibrate(self) -> float:
        cycles = 10_000_000
        torch.cuda._sleep(cycles)  # first call loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / max(start.elapsed_time(end) / 1e3, 1e-6)

    def _launch_s(self, fn: Callable[[], object]) -> float:
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        fn()
        launch = time.perf_counter() - t0
        torch.cuda.synchronize(self.device)
        return launch

    def samples(self, fns: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
        sleep_cycles = [int(self.cycles_per_s * (2 * self._launch_s(fn) + 50e-6)) for fn in fns]
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)] for _ in fns]
        torch.cuda.synchronize(self.device)
        for r in range(rounds):
            for i in _order(len(fns), r):
                self.flush_buffer.zero_()
                torch.cuda._sleep(sleep_cycles[i])
                start, end = events[i][r]
                start.record()
                fns[i]()
                end.record()
            torch.cuda.synchronize(self.device)  # one round at a time: the sleeps stay short
        return [[s.elapsed_time(e) / 1e3 for s, e in per_fn] for per_fn in events]


def _order(n: int, round_index: int) -> list[int]:
    """The call order of round `round_index`: forwards on even rounds, backwards on odd ones, so
    that being first (or last) in a round favours no function."""
    return list(range(n)) if round_index % 2 == 0 else list(range(n - 1, -1, -1))


def _cpu_samples(fns: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
    out: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for i in _order(len(fns), r):
            t0 = time.perf_counter()
            fns[i]()
            out[i].append(time.perf_counter() - t0)
    return out


class Timer:
    """One device's timer; on a GPU it keeps its L2-flush buffer across calls."""

    def __init__(self, device: str):
        self.device = device
        self._gpu = _GpuTimer(device) if device.startswith("cuda") else None

    def interleaved_samples(self, fns: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
        """Per function, the seconds of each of its `rounds` calls (called in turn each round)."""
        if rounds < 1:
            raise ValueError(f"Expected at least one round but got {rounds}")
        if self._gpu is not None:
            return self._gpu.samples(fns, rounds)
        return _cpu_samples(fns, rounds)
