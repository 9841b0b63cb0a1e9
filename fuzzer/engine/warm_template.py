"""Worker processes started from a warm template: a fork server that has torch and Dynamo
imported (`PRELOAD`), so that a worker starts without importing them again.

A spawned worker imports torch and divfuzz's engine (5-8 s on a GPU host, 12-13 s when a
campaign's 12 workers start at once: measured on the H100, scripts/profile_compile_phases.py).
A worker forked from the template has torch already. Invariants:
- the template imports modules and runs nothing else: no CUDA (a forked child could not
  initialise it), no thread pool (a forked child would inherit a dead one); a forked worker
  checks the first before it is ready (`forked_child_is_usable`);
- a worker that fails to start from the template is started again by spawning, and the
  template is not used again in this process (`give_up`): the template only ever saves time;
- a worker gets the template only while this process's environment is the one the template
  started with, apart from `LATE_READ_ENV` (read after the fork, so the child's own values
  count) and `VOLATILE_ENV`; otherwise (a changed environment, `extra_env` naming other keys) it is spawned, as
  before: what torch reads at import is then what the worker's own environment says;
- the child makes its environment exactly this process's (at `Worker.start`) plus `extra_env`;
- the template's server ignores SIGINT and SIGTERM, as the workers do: a worker dies with its
  server, and a signal to the whole process group (Ctrl-C, `timeout`, a CI runner) must not kill
  a worker mid-case (that would read as a crash of the compiler); the server ends when this
  process does (multiprocessing's own rule) or at exit (`stop`);
- `DIVFUZZ_WARM_WORKERS=0` turns the template off (every worker is spawned).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from multiprocessing import forkserver, resource_tracker

from divfuzz.records.deadline import Deadline

# What the template imports: torch and Dynamo (Dynamo brings Inductor's config). Not Inductor's
# compile path: importing `torch._inductor.compile_fx` asks CUDA for its device count where a GPU
# is present, which registers torch's fork handler, and every process forked after that cannot use
# CUDA ("Cannot re-initialize CUDA in forked subprocess"). Measured on the H100 host (torch 2.11),
# each module imported alone and then forked: `torch`, `torch._dynamo`, `torch._inductor`,
# `triton`, `torch._inductor.codecache` and divfuzz's engine left the child able to use CUDA,
# `torch._inductor.compile_fx` did not. Only torch and Dynamo have run a campaign preloaded, so
# only they are preloaded. A module this torch lacks is skipped. This module comes first: importing
# it makes the server ignore SIGINT and SIGTERM before the seconds of `import torch`, where a
# Ctrl-C to the process group printed the server's KeyboardInterrupt traceback (issue 35).
PRELOAD = ("divfuzz.fuzzer.engine.warm_template", "torch", "torch._dynamo")


def forked_child_is_usable() -> bool:
    """In a forked worker, before it says it is ready: whether torch may still initialise CUDA
    here (no module the template imported touched it). A worker that may not is no worker:
    it exits, and the parent spawns one instead."""
    torch = sys.modules.get("torch")  # imported by the template, if at all
    in_bad_fork = getattr(getattr(torch, "cuda", None), "_is_in_bad_fork", None)
    return in_bad_fork is None or not in_bad_fork()


# Environment a worker reads after it starts (TORCHINDUCTOR_COMPILE_THREADS is read at import, and
# the forked worker decides Inductor's compile threads again under its own): the template's own
# value does not matter, the child's (this process's, with `extra_env` on top) is what counts.
LATE_READ_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "DIVFUZZ_WORKER_THREADS", "TORCHINDUCTOR_CACHE_DIR",
                           "TRITON_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS", "TRITON_DISABLE_LINE_INFO",
                           "DIVFUZZ_WORKER_GC_FREEZE"})

def _in_fork_server() -> bool:
    """Whether this module is being imported by multiprocessing's fork server (as a preload)."""
    if mp.current_process().name != "MainProcess":  # a child of some fork server that imports divfuzz
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "main" and frame.f_code.co_filename == forkserver.__file__:
            return __name__ in (frame.f_locals.get("preload") or ())
        frame = frame.f_back
    return False


# Terminal and group signals the server ignores. It starts with them blocked (`ensure_server_running`),
# so one sent while its interpreter starts waits; ignoring a pending signal discards it.
_SERVER_IGNORES = {signal.SIGINT, signal.SIGTERM}

if _in_fork_server():  # the server's own process: see the module docstring
    for _sig in _SERVER_IGNORES:
        signal.signal(_sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SERVER_IGNORES)

_lock = threading.Lock()
_state: dict = {}


def enabled() -> bool:
    return os.environ.get("DIVFUZZ_WARM_WORKERS", "1") != "0"


# Environment that changes while a process runs and that nothing reads at import: pytest names the
# running test in it; the template's own switch is read here, in the parent; Inductor writes a
# pointer into it each time it loads a C++ kernel in-process (and again in the child before use).
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST", "DIVFUZZ_WARM_WORKERS", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"})


def _environment_key(env) -> dict:
    return {k: v for k, v in env.items() if k not in LATE_READ_ENV | VOLATILE_ENV}




def context_for(device: str, extra_env: dict):
    """(the multiprocessing context a worker for `device` with `extra_env` starts from, None) where
    the invariants allow the warm template, else (None, why it is spawned). One decision, under the
    lock: a `give_up` on another thread cannot fall between the answer and the context."""
    if not enabled():
        return None, "DIVFUZZ_WARM_WORKERS=0"
    if not set(extra_env) <= LATE_READ_ENV:
        return None, f"the worker's environment sets {sorted(set(extra_env) - LATE_READ_ENV)}, which torch may read at import"
    with _lock:
        if _state.get("broken"):
            return None, "a worker failed to start from the template"
        if "context" not in _state:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
            _state["context"] = ctx
            _state["environment"] = _environment_key(os.environ)
        now, then = _environment_key(os.environ), _state["environment"]
        if now != then:
            changed = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
            return None, f"the environment changed since the template started: {changed}"
        return _state["context"], None


def refusal(device: str, extra_env: dict) -> str | None:
    """Why a worker for `device` with `extra_env` would be spawned rather than forked, or None."""
    return context_for(device, extra_env)[1]


def note_start(reason: str | None) -> None:
    """Count one worker start: forked from the template (`reason` None) or spawned, and why."""
    with _lock:
        key = "from the warm template" if reason is None else f"spawned: {reason}"
        _state.setdefault("starts", {})
        _state["starts"][key] = _state["starts"].get(key, 0) + 1


def starts() -> dict[str, int]:
    """This process's worker starts so far, by how each started (`note_start`)."""
    with _lock:
        return dict(_state.get("starts", {}))


def give_up() -> None:
    """No worker of this process starts from the template any more."""
    with _lock:
        _state["broken"] = True


def start_in_background(device: str) -> None:
    """Start the template now, in a thread, so that its imports overlap with what the caller does
    before its first worker (a campaign on `device`: the store, the analyzer). Idempotent."""
    ctx, _ = context_for(device, {})
    if ctx is None:
        return
    with _lock:
        if not _state.get("stop_at_exit"):  # a command that ends before its first worker leaves no server behind
            _state["stop_at_exit"] = True
            atexit.register(stop)
    threading.Thread(target=ensure_server_running, name="divfuzz-warm-template", daemon=True).start()


def ensure_server_running() -> None:
    """Start the fork server unless it runs, with SIGINT and SIGTERM blocked in the calling thread
    while it is spawned (as CPython starts its resource tracker): the server inherits the mask, so
    a Ctrl-C to the process group while its interpreter starts or imports torch waits until it
    ignores them, instead of killing it with a traceback on the user's terminal. This process's
    other threads still take the signal; this thread's mask is restored at once. The resource
    tracker starts first: starting it unblocks both signals in the calling thread (CPython's
    `resource_tracker.ensure_running` unblocks rather than restores), which would let the server
    start unprotected."""
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SERVER_IGNORES)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _server():
    """multiprocessing's fork-server singleton (CPython's, private but present from 3.8 to 3.13), or None."""
    return getattr(forkserver, "_forkserver", None)


def server_alive() -> bool:
    """Whether this process's fork server runs (a zombie does not): its workers die with it."""
    pid = getattr(_server(), "_forkserver_pid", None)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc here: kill(0) found it
        return True


def stop(wait_s: float = 1.0) -> None:
    """Stop this process's fork server, if it started one (at exit: an orphaned server would
    linger where PID 1 reaps no orphans). Bounded: the server is asked to stop (its "alive" pipe
    closed), then killed after `wait_s`; it ignores SIGTERM, so SIGKILL. An idle server exits at
    once; one still importing torch reads the pipe only after it, seconds later (measured: an
    interrupted `minimize` waited 4-5 s for it), and holds nothing worth waiting for."""
    server = _server()
    pid, fd = getattr(server, "_forkserver_pid", None), getattr(server, "_forkserver_alive_fd", None)
    if "context" not in _state or pid is None:
        return
    close_and_reap(fd, pid, wait_s)
    server._forkserver_pid = server._forkserver_alive_fd = None


def close_and_reap(fd: int | None, pid: int, wait_s: float) -> None:
    """Close `fd`, the pipe whose end tells a helper process (a fork server, multiprocessing's
    resource tracker) to exit, and reap it: killed after `wait_s` if still running (bounded)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    deadline = Deadline.after(wait_s)
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if deadline.expired():
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)
    except (ChildProcessError, ProcessLookupError):
        pass


def release_server_in_child() -> None:
    """In a forked worker: drop its copy of the server's "alive" pipe, which the fork server hands
    every child so that it outlives its clients. Without this a SIGKILLed divfuzz left the server
    and its workers running (a worker in a hung case, forever); with it the server ends with
    divfuzz and the workers with the server (PR_SET_PDEATHSIG)."""
    server = _server()
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def adopt_environment(parent_env: dict, extra_env: dict) -> None:
    """In a forked child: this process's environment becomes the parent's plus `extra_env`."""
    os.environ.clear()
    os.environ.update(parent_env)
    os.environ.update(extra_env)
