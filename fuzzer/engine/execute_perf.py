"""Running one case for the perf oracle: eager and compiled timed side by side, per phase.

`execute_perf_case(spec, device, config, margin=...)` builds the graph and its inputs, runs it
eagerly once (a graph that fails eagerly is divfuzz's generator bug, as in `execute_case`),
compiles it through `divfuzz.fuzzer.engine.compile.compiled` (the one compile site) and warms both up;
then times the phases the spec has, interleaved call by call (`divfuzz.oracles.timing`):
- `fwd`: the forward (under no_grad for an inference spec, with grad for a training spec);
- `fwd+bwd` (training specs): the forward and `autograd.grad` of every trainable input.
Each phase gets pairs in batches of `MIN_PAIRS` until `divfuzz.oracles.perf.settled` or `MAX_PAIRS`
or its time budget. Compiler failures become error verdicts, as for the numeric oracle; the
numbers themselves are not judged here (that is `execute_case`'s oracle).

`self_check=True` times eager against a second eager build instead of compiled: the A/A
measurement that sets the noise margin (`scripts/perf_noise.py`).
Invariant: a perf verdict has `perf` phases and no `outputs`; status DIVERGED means some phase
is slower by `divfuzz.oracles.perf.is_slower`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from divfuzz.fuzzer.engine.compile import compiled as compiled_under
from divfuzz.fuzzer.engine.error_site import error_site
from divfuzz.fuzzer.engine.execute import check_fits, run_forward_backward
from divfuzz.oracles.timing import Timer, clock_state, pinned_threads, timer_description
from divfuzz.generators.build import build_callable, make_inputs
from divfuzz.generators.runtime import cotangents
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.perf import DEFAULT_MARGIN, MAX_PAIRS, MIN_PAIRS, compare_timings, is_slower, settled
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status, error_type_of, is_compile_error
from divfuzz.records.verdict import MAX_ERROR_MESSAGE_CHARS, PerfComparison, Verdict

WARMUP_CALLS = 3
PHASE_BUDGET_S = 6.0  # timing seconds per phase, beyond which no more pairs are added

# The wrapper's cost is measured per way of calling: inference forward, training forward (the
# compiled autograd function saves for backward), and the training step.
OVERHEAD_PHASES = ("fwd", "fwd-train", "fwd+bwd")

_timers: dict[str, Timer] = {}
_overheads: dict[tuple, dict[str, float]] = {}


def default_margin(device: str) -> float:
    return DEFAULT_MARGIN[device.split(":")[0]]


def _timer(device: str) -> Timer:
    if device not in _timers:
        _timers[device] = Timer(device)
    return _timers[device]


def phase_callables(spec: GraphSpec, fn: Callable, inputs: list[torch.Tensor]) -> dict[str, Callable[[], object]]:
    """The spec's timed phases as zero-argument callables on fixed inputs and output gradients."""
    if not spec.backward:
        def forward():
            with torch.no_grad():
                return fn(*inputs)
        return {"fwd": forward}
    cots = cotangents(fn(*inputs), spec.recipe.seed)  # with grad: outputs that need one get a cotangent
    if not any(c is not None for c in cots):
        raise ValueError(f"a training spec whose outputs need no gradient: nothing to time backward ({spec.outputs})")
    return {
        "fwd": lambda: fn(*inputs),
        "fwd+bwd": lambda: run_forward_backward(spec, fn, inputs, cots),
    }


def time_phase(timer: Timer, phase: str, eager: Callable, other: Callable, *, margin: float, dtype: str,
               overhead_s: float, timer_text: str, device: str, budget_s: float = PHASE_BUDGET_S) -> PerfComparison:
    """One phase timed in batches of MIN_PAIRS pairs until `settled`, MAX_PAIRS, or `budget_s`;
    the SM clock read before and after (the caller has warmed both sides up)."""
    eager_s: list[float] = []
    other_s: list[float] = []
    before = clock_state(device)
    started = time.perf_counter()
    while True:
        e, c = timer.interleaved_samples([eager, other], MIN_PAIRS)
        eager_s += e
        other_s += c
        cmp = compare_timings(phase, eager_s, other_s, margin=margin, dtype=dtype, overhead_s=overhead_s, timer=timer_text)
        if settled(cmp) or len(eager_s) >= MAX_PAIRS or time.perf_counter() - started > budget_s:
            break
    after = clock_state(device)
    clock = f"{before} -> {after}" if before and before != after else before
    return compare_timings(phase, eager_s, other_s, margin=margin, dtype=dtype, overhead_s=overhead_s,
                           timer=timer_text, clock=clock)


def wrapper_overhead(device: str, config: CompileConfig, threads: int | None) -> dict[str, float]:
    """Per phase, the median extra seconds per call that calling a compiled one-op graph costs
    over calling it eagerly (guards, the compiled wrapper, autograd's function), measured once
    per worker process and config. A slowdown within it is the wrapper's, not the kernels'."""
    key = (device, config, threads)
    if key in _overheads:
        return _overheads[key]
    x = torch.ones(8, device=device, requires_grad=True)

    def tiny(t):
        return (t * 2,)

    timer = _timer(device)
    result: dict[str, float] = {}
    with compiled_under(tiny, config, timed=True) as fast:
        for phase in OVERHEAD_PHASES:
            def run(f, phase=phase):
                if phase == "fwd":
                    with torch.no_grad():
                        return f(x)
                (y,) = f(x)
                return torch.autograd.grad(y.sum(), x) if phase == "fwd+bwd" else y
            for _ in range(WARMUP_CALLS):
                run(tiny), run(fast)
            e, c = timer.interleaved_samples([lambda: run(tiny), lambda: run(fast)], 3 * MIN_PAIRS)
            ordered_e, ordered_c = sorted(e), sorted(c)
            result[phase] = max(0.0, ordered_c[len(c) // 2] - ordered_e[len(e) // 2])
    _overheads[key] = result
    return result


def execute_perf_case(spec: GraphSpec, device: str, config: CompileConfig, *, margin: float | None = None,
                      self_check: bool = False) -> Verdict:
    """Time one case eager vs compiled (or vs eager again with `self_check`) and judge the phases."""
    margin = default_margin(device) if margin is None else margin
    device_type = torch.device(device).type
    check_fits(spec, device)
    spans: dict[str, float] = {}
    t0 = time.perf_counter()
    inputs = make_inputs(spec, device)
    eager_fn = build_callable(spec, device_type)
    try:
        eager_phases = phase_callables(spec, eager_fn, inputs)
        for run in eager_phases.values():
            run()
    except Exception as e:  # a graph that fails eagerly is a divfuzz generator bug
        return Verdict(Status.EAGER_ERROR, error_type=error_type_of(e), error_message=str(e)[:MAX_ERROR_MESSAGE_CHARS])
    spans["build"] = time.perf_counter() - t0
    dtype = next((t.dtype for t in spec.inputs if t.init == "data"), "-")
    with pinned_threads(device, None) as threads, contextlib.ExitStack() as session:
        t0 = time.perf_counter()
        try:
            # On a GPU the timer measures device time, which leaves the wrapper's CPU cost out by
            # construction: nothing to measure (and no extra compile per worker).
            no_overhead = self_check or device_type == "cuda"
            overhead = dict.fromkeys(OVERHEAD_PHASES, 0.0) if no_overhead else dict(wrapper_overhead(device, config, threads))
            if spec.backward:  # a training graph's forward runs with grad: the training forward's cost
                overhead["fwd"] = overhead["fwd-train"]
            if self_check:
                other_fn = build_callable(spec, device_type)
            else:
                other_fn = session.enter_context(compiled_under(build_callable(spec, device_type), config, timed=True))
            other_phases = phase_callables(spec, other_fn, inputs)
            for _ in range(WARMUP_CALLS):
                for name in eager_phases:
                    eager_phases[name]()
                    other_phases[name]()
            if device_type == "cuda":
                torch.cuda.synchronize()
        except Exception as e:
            status = Status.COMPILE_ERROR if is_compile_error(e) else Status.RUNTIME_ERROR
            return Verdict(status, error_type=error_type_of(e), error_message=str(e)[:MAX_ERROR_MESSAGE_CHARS],
                           timings=tuple((spans | {"compile": time.perf_counter() - t0}).items()), error_site=error_site(e))
        spans["compile"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        timer = _timer(device)
        text = timer_description(device, threads)
        phases = tuple(
            time_phase(timer, name, eager_phases[name], other_phases[name], margin=margin, dtype=dtype,
                        overhead_s=overhead[name], timer_text=text, device=device)
            for name in eager_phases
        )
        spans["timing"] = time.perf_counter() - t0
    status = Status.DIVERGED if any(is_slower(p) for p in phases) else Status.OK
    return Verdict(status, perf=phases, timings=tuple(spans.items()))
