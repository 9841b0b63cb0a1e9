"""Where one compile's time goes, by phase, read from torch's own timers.

Dynamo, AOTAutograd and Inductor time their steps with `torch._dynamo.utils.dynamo_timed`, which
appends each step's seconds to `torch._dynamo.utils.compilation_time_metrics[key]` (a list per
key, cleared by `torch._dynamo.reset()`, which divfuzz's compile site runs before every compile).
A case's compile span reads the steps that ran inside it (`PhaseTimer`) and splits them into
disjoint phases (`phases_of`, a pure function of the keys' seconds), each stored in the verdict's
timings as `<span>:<phase>` (a nested span: its seconds are inside the compile span):

- `dynamo`: bytecode tracing and guards (`_compile.compile_inner` less the backend's call,
  `OutputGraph.call_user_compiler`);
- `aot_autograd`: functionalisation, the joint graph and its partition, forward and lazy
  backward (`create_aot_dispatcher_function` and `backward._backward_impl`, less Inductor's
  `compile_fx_inner` inside them);
- `inductor`: Inductor's own Python: pre-grad passes, lowering, scheduling, code generation and
  loading the module (`compile_fx_inner`, and the backend's call outside AOTAutograd, less the
  backend compile below);
- `backend_compile`: the code compiler Inductor waits for: the C++ compiler on the CPU, Triton
  and ptxas on a GPU. With one compile thread they run in the compiling thread
  (`compile_file`, `async_compile.precompile`); with more, Inductor hands them to a pool (C++ to
  threads of this process, whose `compile_file` overlaps the compiling thread's work, Triton to
  subprocesses) and the compiling thread's share is its `async_compile.wait`, which only a
  pool records: then that wait is the phase, and the pool threads' `compile_file` is not added;
- `autotune`: Triton's configs timed on the device at the first run (`CachingAutotuner.*`).

What the span holds beyond these (the first forward and backward runs, Dynamo's frame entry,
divfuzz's compile session) is the breakdown's "other". The keys nest (Dynamo's call of the
backend holds AOTAutograd, which holds Inductor, which holds the backend compile), so the first
four phases add up to Dynamo's total and the lazy backward's, each clamped at 0. The key names
are torch 2.13's `dynamo_timed` callers (torch/_dynamo, _functorch, _inductor). A torch that
lacks an outer key gives a smaller phase and a larger "other"; one that lacks a backend-compile
key shows that compile under "inductor" (it is inside `compile_fx_inner`); never a phase counted
twice. Torch-free at import: it reads Dynamo's module only where a compile has loaded it.
"""

from __future__ import annotations

import sys

PHASES = ("dynamo", "aot_autograd", "inductor", "backend_compile", "autotune")
# The separator of a phase's span name, `<span>:<phase>` (`divfuzz.records.verdict.nested_span`).
PHASE_SEPARATOR = ":"

DYNAMO = "_compile.compile_inner"
USER_COMPILER = "OutputGraph.call_user_compiler"
AOT_FORWARD = "create_aot_dispatcher_function"
AOT_BACKWARD = "backward._backward_impl"
INDUCTOR = "compile_fx_inner"
IN_THREAD_COMPILE = ("compile_file", "async_compile.precompile")  # one compile thread: in the compiling thread
POOL_WAIT = "async_compile.wait"  # more: the compiling thread waits on the pool (C++ threads, Triton subprocesses)
AUTOTUNE = ("CachingAutotuner.benchmark_all_configs", "CachingAutotuner.coordinate_descent_tuning",
            "CachingAutotuner.combo_sequential_autotune", "CachingAutotuner.slow_precompile_config")


def phases_of(seconds: dict[str, float]) -> dict[str, float]:
    """The phases (`PHASES`, seconds each, 0 where none ran) of one compile whose `dynamo_timed`
    keys took `seconds` (summed over their calls)."""
    s = seconds.get
    if POOL_WAIT in seconds:  # a compile pool: the C++ threads' `compile_file` overlaps the compiling thread
        backend = s(POOL_WAIT, 0.0) + s("async_compile.precompile", 0.0)
    else:
        backend = sum(s(k, 0.0) for k in IN_THREAD_COMPILE)
    inductor_ran = INDUCTOR in seconds
    # The backend's call less AOTAutograd: compile_fx's own steps before it (Inductor's, when it ran).
    before_aot = max(0.0, s(USER_COMPILER, 0.0) - s(AOT_FORWARD, 0.0)) if inductor_ran else 0.0
    return {
        "dynamo": max(0.0, s(DYNAMO, 0.0) - s(USER_COMPILER, 0.0)),
        "aot_autograd": max(0.0, s(AOT_FORWARD, 0.0) + s(AOT_BACKWARD, 0.0) - s(INDUCTOR, 0.0)),
        "inductor": max(0.0, s(INDUCTOR, 0.0) + before_aot - backend),
        "backend_compile": backend,
        "autotune": sum(s(k, 0.0) for k in AUTOTUNE),
    }


def phase_span(span: str, phase: str) -> str:
    """The timings name of `phase` inside the compile span `span`: `compile:dynamo`."""
    return f"{span}{PHASE_SEPARATOR}{phase}"


def timer_lists() -> dict | None:
    """torch's `compilation_time_metrics` (key -> list of seconds), or None where Dynamo is not
    loaded (nothing compiled in this process) or keeps no such record."""
    utils = sys.modules.get("torch._dynamo.utils")
    metrics = getattr(utils, "compilation_time_metrics", None)
    return metrics if isinstance(metrics, dict) else None


class PhaseTimer:
    """The `dynamo_timed` seconds recorded between `__init__` and `seconds()`. Each key's list is
    remembered by identity with its length: a list that is still there gave its new entries; one
    that a Dynamo reset replaced (or a new key) gave all of its entries."""

    def __init__(self):
        metrics = timer_lists() or {}
        self.before = {key: (values, len(values)) for key, values in metrics.items() if isinstance(values, list)}

    def seconds(self) -> dict[str, float]:
        metrics = timer_lists() or {}
        out: dict[str, float] = {}
        for key, values in list(metrics.items()):
            if not isinstance(values, list):
                continue
            kept, length = self.before.get(key, (None, 0))
            new = values[length:] if values is kept else values
            total = sum(v for v in new if isinstance(v, (int, float)))
            if total > 0:
                out[str(key)] = float(total)
        return out

    def phases(self) -> dict[str, float]:
        """`phases_of` the seconds recorded since this timer started."""
        return phases_of(self.seconds())
