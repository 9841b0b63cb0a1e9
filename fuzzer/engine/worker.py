"""Worker processes that stay alive across cases, and turn crashes and hangs into verdicts.

A `Worker` owns one spawned process that imports torch once and runs cases sent over a pipe.
Invariants:
- `Worker.run` never raises for anything the compiler under test does: a dead process becomes
  `Status.CRASH`, a case past its timeout becomes `Status.HANG`; the process is then replaced.
- It raises `InternalError` when divfuzz's own code failed in the worker (`execute_case` raised:
  building inputs, the fp64 reference, judging): that is never a verdict, so never a bucket.
- Start-up (importing torch) is not counted against a case's timeout.
- Only the parent stops a worker (a message, or SIGKILL): terminal and group signals are ignored
  there, so interrupting divfuzz never turns the case in flight into a crash finding.
- A worker that dies during a case or a call by anything divfuzz did not do (a signal from
  outside, the OOM killer, a segfault) has the request run once more in a fresh worker: only a
  death that repeats there is `Status.CRASH` (both deaths in its message); one that does not is
  an infrastructure event, said on stderr and kept in the re-run's verdict (`Verdict.worker_deaths`),
  never a finding. So the campaign, the minimizer and the stage ladder see the same rule.
- What the compiler prints in a worker (logs, warnings, a crash's last words) goes to the worker's
  own file (`divfuzz.fuzzer.engine.compile_output`), never to divfuzz's terminal; the parent takes it
  after each request (`Worker.last_output`, `Worker.output_since`).
- The campaign, the analysis pool and the triage talk to a worker through `CaseWorker` only, so a
  fleet's worker on a Dask node (`divfuzz.fuzzer.campaign.cluster.ClusterWorker`) serves them as this one does.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from enum import Enum
from multiprocessing import resource_tracker
from typing import Any, Callable, Protocol

from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.engine.compile_output import OutputCapture, flush_output, redirect_output, show_warnings_again
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import InternalError
from divfuzz.reports.terminal import terminal_safe
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.outcomes import Status, is_device_fault
from divfuzz.records.verdict import Verdict

_CTX = mp.get_context("spawn")
# What a `Worker` keeps of what its process printed, for `output_since` (the oldest requests dropped first).
OUTPUT_KEPT_CHARS = 8_000_000
STARTUP_TIMEOUT_S = 300.0
_REAPER_REGISTERED = False
# The one module that binds each `WorkerTarget` to its function. It imports every target, so it
# sits above every layer and nothing imports it; the worker process loads it by name.
TARGET_REGISTRY = "divfuzz.fuzzer.worker_targets"


class WorkerTarget(Enum):
    """What a worker may be asked to call (`Worker.call`), by its `module:function`; the functions
    themselves are bound in `TARGET_REGISTRY`, which checks at import that both lists agree."""

    GPU_FREE_BYTES = "divfuzz.fuzzer.campaign.sizing:gpu_free_bytes"  # sizing a CUDA campaign, seen from a worker
    DESCRIBE_MACHINE = "divfuzz.fuzzer.gate.machine:describe_machine"  # the gate's record of the machine its cases ran on
    BISECT = "divfuzz.fuzzer.triage.attribute:bisect_in_worker"  # attribution: torch's compiler bisector, in-process
    MINIMIZE_MODULE = "divfuzz.fuzzer.triage.user_module:minimize_module_in_worker"  # minimize --module
    PERF_MODULE = "divfuzz.fuzzer.triage.module_perf:perf_module_in_worker"  # minimize --module --oracle perf
    WORKER_FACTS = "divfuzz.fuzzer.engine.worker:worker_facts"  # the threads and compile settings a worker runs with
    KEY_CACHES_BY_ISA = "divfuzz.fuzzer.engine.worker:key_compile_caches_by_cpu_isa"  # cache keys naming the CPU ISA


def _reap_children_at_exit() -> None:
    """At divfuzz's exit: kill and reap every multiprocessing child still alive (divfuzz's workers;
    nothing else in divfuzz starts one), then the warm template's fork server, then multiprocessing's
    resource tracker (started by the first spawn) and reap it too.

    Without this the tracker outlives divfuzz by a moment, and where the container's PID 1 reaps
    no orphans (CI runners) it stays a zombie in the caller's process group for good. Bounded:
    a tracker still held open by a grandchild after 5 s is killed, never waited on forever."""
    for child in mp.active_children():
        child.kill()
    for child in mp.active_children():
        child.join(5)
    warm_template.stop()

    tracker = resource_tracker._resource_tracker
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return
    tracker._fd = tracker._pid = None
    warm_template.close_and_reap(fd, pid, 5.0)  # the tracker exits at EOF, once no process holds the pipe


def worker_facts() -> dict:
    """What a worker runs with (a `Worker.call` target): torch's threads, Inductor's compile threads,
    whether Triton writes debug line info, and how many objects the worker froze at its start."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch
    import torch._inductor.config as inductor_config

    return {"torch_threads": torch.get_num_threads(), "compile_threads": inductor_config.compile_threads,
            "triton_disable_line_info": os.environ.get("TRITON_DISABLE_LINE_INFO"), "frozen_objects": gc.get_freeze_count()}


def _register_reaper() -> None:
    global _REAPER_REGISTERED
    if not _REAPER_REGISTERED:
        _REAPER_REGISTERED = True
        atexit.register(_reap_children_at_exit)


@dataclass(frozen=True)
class CaseRequest:
    spec: GraphSpec
    device: str
    config: CompileConfig
    profile: bool = False
    oracle: str = "numeric"  # divfuzz.records.outcomes.ORACLES: "perf" times the case (divfuzz.fuzzer.engine.execute_perf)
    perf_margin: float | None = None  # the perf oracle's noise margin (None: the device's default)
    against: CompileConfig | None = None  # `--against`: a second compiler judged against `config`
    # `spec`'s input siblings (`divfuzz.generators.input_siblings`), run through its compile after
    # it (`divfuzz.fuzzer.engine.execute.execute_group`); numeric oracle, one compiler, only
    siblings: tuple[GraphSpec, ...] = ()

    def __post_init__(self):
        if self.siblings and (self.oracle != "numeric" or self.against is not None):
            raise ValueError("CaseRequest: input siblings run under the numeric oracle of one compiler only")

    def to_message(self) -> dict:
        return {
            "spec": self.spec.to_json(indent=None),
            "device": self.device,
            "config": self.config.to_dict(),
            "profile": self.profile,
            "oracle": self.oracle,
            "perf_margin": self.perf_margin,
        } | ({"against": self.against.to_dict()} if self.against else {}) | (
            {"siblings": [s.to_json(indent=None) for s in self.siblings]} if self.siblings else {})


def _detach_from_terminal_signals() -> None:
    """The parent coordinates shutdown. A Ctrl-C, or a `timeout` that signals the whole process
    group, must not kill the worker mid-case (that would read as a crash of the compiler); and if
    the parent dies, the worker goes too (Linux: PR_SET_PDEATHSIG) rather than lingering."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:
            pass


def key_compile_caches_by_cpu_isa() -> str:
    """`divfuzz.generators.runtime.key_compile_caches_by_cpu_isa` (Inductor's cache keys made to
    name the CPU vector ISA; every repro.py carries it too), loaded when this runs: this module
    stays torch-free at import."""
    # lazy: torch-free module: it loads torch only when this runs
    from divfuzz.generators.runtime import key_compile_caches_by_cpu_isa as key_by_isa

    return key_by_isa()


def _tqdm_lock_without_a_semaphore() -> None:
    """torch.fx's Interpreter opens a tqdm bar (disabled) on every run, and tqdm's first bar makes
    its global lock a multiprocessing RLock: a named semaphore, registered with multiprocessing's
    resource tracker. A worker killed mid-case (Ctrl-C, a timeout, the end of a campaign) never
    unregisters it, and the tracker warned "leaked semaphore objects" on the user's terminal at
    exit. A worker draws no bars shared with other processes: a thread lock is enough."""
    try:
        # lazy: optional extra: tqdm comes with torch's dependencies, not divfuzz's; imported in the worker only
        from tqdm import tqdm
    except ImportError:  # no tqdm: nothing to replace
        return
    tqdm.set_lock(threading.RLock())


def _worker_main(conn, device: str, extra_env: dict, parent_env: dict | None = None, output_path: str | None = None) -> None:
    """The worker's loop: import torch once (a worker forked from the warm template has it
    already: `parent_env` is then the environment it adopts), then execute cases until told to stop.
    With `output_path`, everything the process prints goes there (`redirect_output`). A parent
    that has gone (its end of the pipe closed: interrupted, or killed) ends the worker quietly:
    there is no one to answer, and a traceback would land on the user's terminal."""
    if output_path is not None:
        redirect_output(output_path)
    try:
        _serve(conn, device, extra_env, parent_env)
    except (BrokenPipeError, ConnectionResetError):
        return


def _serve(conn, device: str, extra_env: dict, parent_env: dict | None) -> None:
    _detach_from_terminal_signals()
    if parent_env is not None:
        warm_template.adopt_environment(parent_env, extra_env)
        warm_template.release_server_in_child()
        if not warm_template.forked_child_is_usable():
            sys.exit(3)  # the parent spawns a worker instead (`Worker.start`)
    else:
        os.environ.update(extra_env)
    split = int(os.environ.get("DIVFUZZ_WORKER_THREADS", "0"))
    if split > 0:
        # Inductor sizes its compile-subprocess pool from the host's cores, per process: W workers
        # would start W pools of that size (W x cores processes, each importing torch). A worker
        # gets its share of the cores, as for torch's threads. Read at import, so set before it;
        # a value the user set is kept.
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(split))
    # Triton's debug line tables map a kernel back to its source for a profiler; nothing in a
    # worker reads them, and what a kernel computes does not depend on them. Without them a
    # compile's CPU fell 3.6% (H100, torch 2.11, Triton 3.6: 1.63 s per case against 1.69 and
    # 1.68, every verdict equal; `scripts/profile_compile_phases.py --variants
    # compared,nolineinfo,gcfreeze,compared`). Triton reads it at each compile, so the forked
    # worker's own value counts; a user's is kept.
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
    imported = sys.modules.get("torch._inductor.config")
    if imported is not None:  # the warm template imported Inductor under its own environment: decide again under ours
        decide = getattr(imported, "decide_compile_threads", None)
        if decide is not None:
            imported.compile_threads = decide()
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    from divfuzz.fuzzer.engine.execute import execute_group
    from divfuzz.fuzzer.engine.execute_perf import execute_perf_case

    threads = int(os.environ.get("DIVFUZZ_WORKER_THREADS", "0"))
    if threads > 0:  # a campaign splits the cores between its workers; otherwise keep torch's default
        torch.set_num_threads(threads)
    if device.startswith("cuda"):
        torch.cuda.init()
    else:
        key_compile_caches_by_cpu_isa()
    _tqdm_lock_without_a_semaphore()
    # What the imports left alive lives as long as the worker: moved out of the collector's reach,
    # a full collection during a compile scans only what the compiles made (the same measurement:
    # 1.61 s of CPU per case against 1.69 and 1.68, every verdict equal). DIVFUZZ_WORKER_GC_FREEZE=0
    # leaves it out (`divfuzz bench --before-after` measures both).
    if os.environ.get("DIVFUZZ_WORKER_GC_FREEZE", "1") != "0":
        gc.collect()
        gc.freeze()
    conn.send({"ready": True, "pid": os.getpid()})
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        show_warnings_again()  # each request's warnings reach its own output, not only the first's
        if "call" in msg:  # a generic in-worker function call (see `Worker.call`)
            reply = _run_call(msg)
            flush_output()
            conn.send(reply)
            continue
        sent: list[Verdict] = []

        def send(verdict: Verdict, *, more: bool) -> None:
            flush_output()
            if not device.startswith("cuda"):  # the bits of CPU kernels follow the thread count: recorded with them
                verdict = replace(verdict, threads=torch.get_num_threads())
            conn.send({"verdict": verdict.to_dict(), "more": more})
            sent.append(verdict)

        try:
            spec = GraphSpec.from_json(msg["spec"])
            config = CompileConfig.from_dict(msg["config"])
            if msg.get("against"):
                # lazy: torch-free module: it loads torch only when this runs
                from divfuzz.fuzzer.engine.against import execute_against

                send(execute_against(spec, msg["device"], config, CompileConfig.from_dict(msg["against"])), more=False)
            elif msg.get("oracle") == "perf":
                send(execute_perf_case(spec, msg["device"], config, margin=msg.get("perf_margin")), more=False)
            else:
                # Each verdict goes to the parent as soon as it is judged ("more": the group has
                # specs left), so a crash in a later sibling loses none of the earlier ones; a group
                # that stops early (`execute_group`) says so with "end".
                group = [spec, *(GraphSpec.from_json(s) for s in msg.get("siblings", ()))]

                def stream(verdict: Verdict) -> None:
                    send(verdict, more=len(sent) + 1 < len(group))

                execute_group(group, msg["device"], config, profile=msg.get("profile", False), on_verdict=stream)
                if len(sent) < len(group):
                    conn.send({"end": True})
        except Exception as e:  # `execute_group` turns every compiler failure into a verdict: this is divfuzz's
            conn.send({"internal": {"error": " ".join(f"{type(e).__name__}: {e}".split())[:500], "traceback": traceback.format_exc()[-8000:]}})
            continue
        if device.startswith("cuda") and any(v.status == Status.RUNTIME_ERROR for v in sent):
            try:
                torch.cuda.synchronize()
            except Exception:  # a sticky CUDA fault: this process cannot run more cases
                return


DECLARED_TARGETS = frozenset(t.value for t in WorkerTarget)


def death_reason(exit_code: int | None) -> str:
    """How a worker process ended: "signal SIGKILL" (a negative exit code), else "exit code N"."""
    sig = -exit_code if exit_code is not None and exit_code < 0 else None
    if sig:
        try:
            return f"signal {signal.Signals(sig).name}"
        except ValueError:
            return f"signal {sig}"
    return f"exit code {exit_code}"


def _say(text: str) -> None:
    """A line on divfuzz's stderr (loud: an infrastructure event must not pass unseen)."""
    try:
        sys.stderr.write(terminal_safe(text) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def target_reference(target: Callable[..., Any]) -> str:
    """A function's `module:function`, as `WorkerTarget` names it."""
    return f"{target.__module__}:{target.__qualname__}"


def _run_call(msg: dict) -> dict:
    """Run a `WorkerTarget`'s function (bound in `TARGET_REGISTRY`) with `kwargs` in this worker,
    or, for a test's `call_unregistered_for_tests`, any importable `module:function`; the result
    must be JSON-able data. A target not declared is refused as an error."""
    reference = msg["call"]
    try:
        if msg.get("unregistered_for_tests"):
            module_name, _, attr = reference.partition(":")
            target = getattr(importlib.import_module(module_name), attr)
        elif reference in DECLARED_TARGETS:
            target = importlib.import_module(TARGET_REGISTRY).TARGETS[WorkerTarget(reference)]
        else:
            return {"error": f"Expected a WorkerTarget but got call={reference!r}"}
        return {"result": target(**msg["kwargs"])}
    except KeyboardInterrupt:  # raised by the user's own code (this process ignores SIGINT): an error, not a dead worker
        return {"error": "KeyboardInterrupt: raised by the code called in the worker (not a signal)"}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-4000:]}


@dataclass(frozen=True)
class CallOutcome:
    """What `Worker.call` got back: a JSON-able `value`, or an `error` (exception, crash or timeout)."""

    value: object = None
    error: str | None = None


class CaseWorker(Protocol):
    """What runs cases, for a slot or an analysis: a `Worker` here, or a fleet's worker on a node.

    `where` is the place it runs now (a `divfuzz.fuzzer.campaign.sizing.SlotDevice`), for a worker
    that moves (a fleet's slot, when its node is lost); None for one that stays where it was made.
    `output_mark` is None where the compiler's output stays with the worker (on a node), else a
    mark for `output_since`. `ensure_started` starts a worker that is not running, so that a run
    given only what is left of a deadline does not pay the start-up from it."""

    device: str
    aborted: bool
    startup_s: float
    last_output: str

    @property
    def where(self) -> Any: ...

    def ensure_started(self) -> None: ...

    def run(self, request: "CaseRequest", timeout_s: float) -> Verdict: ...

    def run_group(self, request: "CaseRequest", timeout_s: float) -> list[tuple[Verdict, float]]: ...

    def call(self, target: WorkerTarget, kwargs: dict, timeout_s: float) -> "CallOutcome": ...

    def output_mark(self) -> int | None: ...

    def output_since(self, mark: int) -> str: ...

    def abort(self) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...


class Worker:
    """One long-lived worker process for one device (a `CaseWorker`), pinned where it was made."""

    where = None  # it never moves: its slot's place is the one it was started for

    def __init__(self, device: str, *, extra_env: dict | None = None):
        self.device = device
        self.extra_env = dict(extra_env or {})
        self.process = None
        self.conn = None
        self.startup_s = 0.0
        self.aborted = False  # set by `abort`: no more starts, every request fails fast
        self.forked = False  # the process came from the warm template (it dies with the template's server)
        self._output: OutputCapture | None = None  # where the process prints (made at the first start)
        self._outputs: list[str] = []  # what each request printed, in order (the oldest dropped past OUTPUT_KEPT_CHARS)
        self._outputs_dropped = 0  # how many of the oldest were dropped
        self.last_output = ""  # what the last request printed

    def start(self) -> None:
        """Start the process: from the warm template where it may (`warm_template.context_for`),
        else spawned. A worker that fails to start from the template is spawned instead."""
        t0 = time.perf_counter()
        _register_reaper()
        ctx, why_spawned = (None, "aborted") if self.aborted else warm_template.context_for(self.device, self.extra_env)
        if ctx is not None:
            try:
                warm_template.ensure_server_running()  # here, not inside `Process.start`: signals blocked while it spawns
                self._start_in(ctx, args=(self.device, self.extra_env, dict(os.environ), self._output_path()))
            except Exception as e:  # a dead or broken template: EOFError, OSError, a child that exited
                self.kill()
                if self.aborted:
                    raise RuntimeError(f"divfuzz worker for {self.device} was aborted while starting") from e
                warm_template.give_up()
                sys.stderr.write(terminal_safe(f"divfuzz: a worker did not start from the warm template ({type(e).__name__}: {e}); "
                                               "spawning workers instead") + "\n")
                why_spawned = "a worker failed to start from the template"
        if why_spawned is not None:
            self._start_in(_CTX, args=(self.device, self.extra_env, None, self._output_path()))
        warm_template.note_start(why_spawned)
        self.startup_s += time.perf_counter() - t0

    def _start_in(self, ctx, *, args: tuple) -> None:
        self.forked = ctx is not _CTX
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, *args), daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        try:
            ready = parent.poll(STARTUP_TIMEOUT_S)
        except KeyboardInterrupt:  # interrupted while it starts: it goes now, not at exit
            self.kill()
            raise
        if not ready:
            self.stop()
            raise RuntimeError(f"divfuzz worker for {self.device} did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            parent.recv()
        except EOFError:
            code = self.process.exitcode
            self.stop()
            raise RuntimeError(f"divfuzz worker for {self.device} died while starting (exit code {code})") from None

    def _alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def ensure_started(self) -> None:
        """Start the process unless it runs, or the worker was aborted (`run_group` then answers
        without one): a caller that gives a request only what is left of a deadline calls this
        first, so the start-up (seconds forked, tens of seconds spawned) is not taken from it."""
        if self.aborted or self._alive():
            return
        try:
            self.start()
        except RuntimeError:
            if not self.aborted:
                raise

    def abort(self) -> None:
        """From another thread (an interrupted campaign): kill the process and start no other.
        The owning thread sees the death at its next read; what it gets then is not a finding."""
        self.aborted = True
        process = self.process
        if process is not None and process.is_alive():
            process.kill()

    def run(self, request: CaseRequest, timeout_s: float) -> Verdict:
        """The verdict of `request`'s spec (its siblings' verdicts: `run_group`)."""
        return self.run_group(request, timeout_s)[0][0]

    def run_group(self, request: CaseRequest, timeout_s: float) -> list[tuple[Verdict, float]]:
        """`_run_group` with a device fault confirmed (`_with_device_fault_confirmed`), then what
        the compiler printed meanwhile taken into `last_output`."""
        try:
            return self._with_device_fault_confirmed(request, self._run_group(request, timeout_s), timeout_s)
        finally:
            self._collect_output()

    def _with_device_fault_confirmed(self, request: CaseRequest, got: list[tuple[Verdict, float]],
                                     timeout_s: float) -> list[tuple[Verdict, float]]:
        """`got`, where its first runtime error that names an accelerator fault
        (`records.outcomes.is_device_fault`) and every verdict after it are run again in a fresh
        worker: the fault is the compiler's finding only where that member gives it again there. An
        asynchronous CUDA fault surfaces at a later call, and a faulted context fails every case
        after it, so the process is replaced either way. A fault that does not repeat is an
        infrastructure event: said on stderr and kept in the re-run's verdict (`worker_deaths`)."""
        at = next((i for i, (v, _) in enumerate(got)
                   if v.status is Status.RUNTIME_ERROR and is_device_fault(v.error_type, v.error_message)), None)
        if at is None or self.aborted:
            return got
        fault = " ".join(f"{got[at][0].error_type}: {got[at][0].error_message}".split())[:200]
        members = [request.spec, *request.siblings]
        self.kill()
        _say(f"divfuzz: a case failed with an accelerator fault ({fault}); running it once more in a fresh worker "
             "to see whether the fault repeats")
        again = self._run_group(replace(request, spec=members[at], siblings=tuple(members[at + 1:])), timeout_s)
        first, seconds = again[0]
        if first.status is Status.RUNTIME_ERROR and is_device_fault(first.error_type, first.error_message):
            return got[:at] + again
        if first.status is Status.CRASH and (first.error_type or "").startswith("Aborted"):
            return got[:at] + again
        _say(f"divfuzz: the case ran in a fresh worker without the accelerator fault ({fault}): an infrastructure "
             "event or an earlier case's fault, not this case's finding; the re-run's verdict is kept")
        note = f"accelerator fault not repeated in a fresh worker: {fault}"
        return got[:at] + [(replace(first, worker_deaths=(*first.worker_deaths, note)), seconds), *again[1:]]

    def _run_group(self, request: CaseRequest, timeout_s: float, *, died: str | None = None) -> list[tuple[Verdict, float]]:
        """A verdict for `request.spec` and for each of its siblings that ran, in order, each with
        the seconds from the one before it (from sending the request, for the first). Each
        verdict has `timeout_s`. A group ends early where the worker stops it (`execute_group`),
        or with the verdict of the spec in flight when the process died (`Status.CRASH`) or timed
        out (`Status.HANG`): the process is then replaced, and the specs after it do not run. A
        worker that died with the warm template's server (not the compiler) is no verdict: the
        members it had not answered run again on a spawned worker, the first of them compiling.
        Any other death runs the members not answered again, once, in a fresh worker (`died`: how
        the worker died under the first of them): the crash verdict is kept only when it dies again
        under the same member (`_after_death`)."""
        if self.aborted:
            return [(Verdict(Status.CRASH, error_type="Aborted", error_message="divfuzz was interrupted"), 0.0)]
        if not self._alive():
            try:
                self.start()
            except RuntimeError:
                if self.aborted:  # killed while starting by an interrupt or the budget's end: no case ran
                    return [(Verdict(Status.CRASH, error_type="Aborted", error_message="divfuzz was interrupted"), 0.0)]
                raise
        got: list[tuple[Verdict, float]] = []
        t0 = time.perf_counter()
        try:
            self.conn.send(request.to_message())
            while True:
                if not self.conn.poll(timeout_s):
                    self.kill()
                    got.append((Verdict(Status.HANG, error_type="Timeout", error_message=f"no result after {timeout_s:.0f} s",
                                        timings=(("case", time.perf_counter() - t0),)), time.perf_counter() - t0))
                    return got
                reply = self.conn.recv()
                if "internal" in reply:
                    raise InternalError(
                        f"divfuzz's own code failed in the worker (not the compiler under test): {reply['internal']['error']}",
                        details=reply["internal"]["traceback"],
                    )
                if "end" in reply:
                    return got
                now = time.perf_counter()
                got.append((Verdict.from_dict(reply["verdict"]), now - t0))
                t0 = now
                if not reply.get("more"):
                    return got
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            self.kill()
            if self._lost_with_the_template():  # not the compiler: the members not answered run again, spawned
                rest = [request.spec, *request.siblings][len(got):]
                return got + self._run_group(replace(request, spec=rest[0], siblings=tuple(rest[1:])), timeout_s)
            reason = death_reason(code)
            rest = [request.spec, *request.siblings][len(got):]
            if died is not None and not got:  # it died again under the member it died under before
                got.append((Verdict(
                    Status.CRASH,
                    error_type=f"WorkerDied({reason})",
                    error_message=f"the worker process died during the case ({died}), and again ({reason}) when "
                                  "the case ran once more in a fresh worker",
                    timings=(("case", time.perf_counter() - t0),),
                ), time.perf_counter() - t0))
                _say(f"divfuzz: the worker died again ({reason}) when the case ran once more in a fresh worker: "
                     "a crash of the compiler under test")
                return got
            if self.aborted:  # divfuzz killed it (an interrupt, the budget's end): no verdict is kept
                got.append((Verdict(Status.CRASH, error_type="Aborted", error_message="divfuzz was interrupted"), 0.0))
                return got
            _say(f"divfuzz: a worker died during a case ({reason}), not stopped by divfuzz; running the case once more "
                 "in a fresh worker to see whether the death repeats")
            return got + self._after_death(replace(request, spec=rest[0], siblings=tuple(rest[1:])), timeout_s, reason)

    def _after_death(self, request: CaseRequest, timeout_s: float, reason: str) -> list[tuple[Verdict, float]]:
        """`request` (the members a dead worker had not answered) run again in a fresh worker. A
        first member that dies again is a crash; one that answers carries the death it survived
        (`Verdict.worker_deaths`): an infrastructure event, said on stderr, never a finding."""
        again = self._run_group(request, timeout_s, died=reason)
        (first, seconds), *after = again
        if first.status is Status.CRASH and (first.error_type or "").startswith(("WorkerDied", "Aborted")):
            return again
        _say(f"divfuzz: the case ran in a fresh worker without the death ({reason}): an infrastructure event "
             "(a kill from outside, the OOM killer), not a finding; the re-run's verdict is kept")
        return [(replace(first, worker_deaths=(*first.worker_deaths, reason)), seconds), *after]

    def call(self, target: WorkerTarget, kwargs: dict, timeout_s: float) -> CallOutcome:
        """`_call` of a declared target, then what the compiler printed meanwhile taken into `last_output`."""
        if not isinstance(target, WorkerTarget):
            raise InternalError(f"Expected a WorkerTarget but got target={target!r}")
        try:
            return self._call({"call": target.value, "kwargs": kwargs}, timeout_s)
        finally:
            self._collect_output()

    def call_unregistered_for_tests(self, reference: str, kwargs: dict, timeout_s: float) -> CallOutcome:
        """`call` of any importable `module:function`, declared or not: for tests only (`os:getpid`)."""
        try:
            return self._call({"call": reference, "kwargs": kwargs, "unregistered_for_tests": True}, timeout_s)
        finally:
            self._collect_output()

    def _call(self, message: dict, timeout_s: float, *, died: str | None = None) -> CallOutcome:
        """Send a call `message` (`_run_call` reads it) with JSON-able kwargs to the worker.

        For work that must run in-process next to torch (e.g. `torch._inductor.compiler_bisector`).
        Never raises for what the compiler does: an exception, a crash or a timeout is `error`. A
        death is `error` only when it repeats in a fresh worker (`died`: the first one's reason).
        """
        if self.aborted:
            return CallOutcome(error="Aborted: divfuzz was interrupted")
        if not self._alive():
            try:
                self.start()
            except RuntimeError:
                if self.aborted:
                    return CallOutcome(error="Aborted: divfuzz was interrupted")
                raise
        try:
            self.conn.send(message)
            if self.conn.poll(timeout_s):
                reply = self.conn.recv()
                return CallOutcome(value=reply.get("result"), error=reply.get("error"))
            self.kill()
            return CallOutcome(error=f"Timeout: no result after {timeout_s:.0f} s")
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            self.kill()
            if self._lost_with_the_template():
                return self._call(message, timeout_s, died=died)
            reason = death_reason(code)
            if died is not None:
                return CallOutcome(error=f"WorkerDied: {died}, and again ({reason}) when the call ran once more in a fresh worker")
            if self.aborted:
                return CallOutcome(error="Aborted: divfuzz was interrupted")
            _say(f"divfuzz: a worker died during a call ({reason}), not stopped by divfuzz; running the call once more "
                 "in a fresh worker to see whether the death repeats")
            outcome = self._call(message, timeout_s, died=reason)
            if not (outcome.error or "").startswith(("WorkerDied", "Aborted")):
                _say(f"divfuzz: the call ran in a fresh worker without the death ({reason}): an infrastructure event, "
                     "not a finding")
            return outcome

    def _output_path(self) -> str:
        """The file the worker process prints to (made once per `Worker`, removed by `stop`)."""
        if self._output is None:
            self._output = OutputCapture()
            atexit.register(self._output.close)
        return self._output.path

    def _collect_output(self) -> None:
        """Take what the process printed since the last request into `last_output` and the record
        `output_since` reads (at most `OUTPUT_KEPT_CHARS` of it, the oldest dropped first)."""
        self.last_output = self._output.take() if self._output is not None else ""
        self._outputs.append(self.last_output)
        while len(self._outputs) > 1 and sum(map(len, self._outputs)) > OUTPUT_KEPT_CHARS:
            self._outputs.pop(0)
            self._outputs_dropped += 1

    def output_mark(self) -> int:
        """A mark for `output_since`: the requests answered so far."""
        return self._outputs_dropped + len(self._outputs)

    def output_since(self, mark: int) -> str:
        """What the worker printed during the requests answered after `mark` (an analysis, a command)."""
        first = mark - self._outputs_dropped
        lost = "[... earlier output dropped ...]\n" if first < 0 else ""
        return lost + "".join(self._outputs[max(first, 0):])

    def _lost_with_the_template(self) -> bool:
        """Whether the worker that just died was forked from a template whose server is gone (it
        died with its server: no crash of the compiler). The template is then given up, and the
        caller runs its request again on a spawned worker."""
        if not self.forked or self.aborted or warm_template.server_alive():
            return False
        warm_template.give_up()
        sys.stderr.write("divfuzz: the warm template's server died, and its workers with it; running the case again "
                         "on a spawned worker\n")
        return True

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        if self.conn is not None:
            self.conn.close()
        self.process = None
        self.conn = None

    def stop(self) -> None:
        if self.conn is not None and self._alive():
            try:
                self.conn.send(None)
                self.process.join(10)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
        if self._output is not None:  # what was printed since the last request (the exit) is not wanted
            self._output.close()
            self._output = None
