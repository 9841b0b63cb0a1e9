"""A campaign's slots on a Dask cluster (`divfuzz fuzz --cluster ADDRESS`): a fleet of nodes.

Only case execution travels. The driver keeps the one SQLite store, every slot's Hypothesis
engine, bucketing and analysis decisions; a slot's `ClusterWorker` sends each `Worker.run` /
`Worker.call` to one Dask worker, which keeps one long-lived divfuzz `Worker` per slot (created on
its first case, kept in that process) and so still runs the case in divfuzz's own isolated
spawned process: a compiler crash or hang ends one case (Status.CRASH / HANG, a finding), never
a node.

Why Dask distributed: pure Python (a small wheel the GPU hosts can carry, unlike Ray's 76 MiB),
a `LocalCluster` of real processes runs in CI, and the same scheduler is deployed on Slurm/PBS/LSF
(dask-jobqueue) or Kubernetes without divfuzz knowing. divfuzz uses only its task submission
with worker restrictions, `Client.run` for out-of-band stop/abort (and, at connect, to start each
node's warm template while the driver starts), and the scheduler's list of live workers.

A slot waits on its request's future without polling: the future's done callback wakes it, so its
next draw starts as the answer lands (a 0.5 s poll cost 200 ms per case on 2 H100s, issue 41),
and only a wait past `POLL_S` looks at the scheduler's worker list, which one slot fetches at a
time for all. What the Dask path adds to each request (submit, scheduling, the
result's fetch) is counted as `fleet_round_trip` in the run's timings (`bench --breakdown`).

Analyses travel as cases do. With minimization on, `--workers auto` leaves each node the Dask
threads one host gives its analysis workers beside that many slots (`fuzzing_threads`), and the
campaign's analysis pool gets a `ClusterWorker` on each of them (`plan_analysis`): the analysis
logic stays on the driver, its compiles run on the nodes beside the slots, as one host's pool runs
beside its slots. A fleet with no thread left over has its slots analyse inline.

Input siblings travel as on one host: a request is a drawn spec and its siblings
(`divfuzz.generators.input_siblings`), and the node runs the whole group through one compile in
the slot's worker (`Worker.run_group`), answering once with every member's verdict. So a fleet
runs the cases one host runs for the same seed, slot count and `--inputs-per-compile`.

A lost node is not a finding. Each request is submitted restricted to its slot's node
(`allow_other_workers=False`, so Dask never silently reruns it elsewhere while we count). The
driver watches the scheduler's worker list; when the node leaves or dies (its address is gone,
or distributed raises KilledWorker / CommClosedError / the future is cancelled), the request goes
back to the queue whole: the slot moves to a live node and the same group is submitted again,
from its compile (the verdicts a lost node may have judged never reach the driver, so no member
is stored from a half-run group), at most `LOST_NODE_RETRIES` times per request, after which the
campaign stops loudly (`ClusterError`, the run is recorded failed). So a killed node's cases are
neither stored as crashes nor lost, and the slot's numbering (slot, idx) does not change, so
resume and dedup see them as on one host.

Invariants:
- the slot count and each slot's case stream depend only on the seed and the slot count, never on
  which node runs it (the engines are on the driver): same seed + slots -> same cases;
- slots are planned from the scheduler's worker list in address order (`plan_slots`, pure);
- a node must run Dask workers that may have children (`distributed.worker.daemon: False`),
  otherwise the fleet refuses to start, naming the setting;
- an exception of divfuzz's own code on a node is InternalError on the driver, never a verdict.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.fuzzer.campaign.sizing import SlotDevice, size_analysis_workers, usable_cores
from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.engine.worker import STARTUP_TIMEOUT_S, CallOutcome, CaseRequest, Worker, WorkerTarget
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ClusterError, ConfigError, InternalError
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict
from divfuzz.records.deadline import Deadline

EXTRA = "pip install 'divfuzz[cluster]'"
# A case whose node is lost is resubmitted on another node at most this many times; a case that
# loses this many nodes points at the fleet (or the case kills nodes), and a person must look.
LOST_NODE_RETRIES = 3
# How long the driver waits for any node to be alive before a slot gives up.
NO_NODE_WAIT_S = 120.0
# The scheduler's worker list is fetched at most this often (one round trip, shared by all slots:
# one slot fetches while the others read the last list).
LIVENESS_REFRESH_S = 1.0
# How often a slot waiting on its answer looks at that list (its answer wakes it at once), and how
# often a slot whose node left looks again for a live one.
POLL_S = 0.5
CONNECT_TIMEOUT_S = 30.0
DAEMON_SETTING = "DASK_DISTRIBUTED__WORKER__DAEMON=False (distributed.worker.daemon: False)"

_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|ucx)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):\d{1,5}$")


def import_distributed(what: str = "--cluster"):
    """The `distributed` module, or ConfigError naming the extra that installs it (`what` needs it)."""
    try:
        # lazy: optional extra [cluster]
        import distributed
    except ImportError as e:
        raise ConfigError(f"{what} needs Dask distributed, which is not installed here ({e}): {EXTRA}") from None
    return distributed


def check_address(address: str, what: str = "--cluster") -> str:
    """A scheduler address `proto://host:port` (tcp, tls, ws, wss, ucx); anything else is ConfigError."""
    if not isinstance(address, str) or not _ADDRESS.match(address):
        raise ConfigError(f"{what}: Expected a Dask scheduler address like tcp://host:8786 but got {address!r}")
    return address


def read_scheduler_file(path: Path) -> str:
    """The scheduler address in a Dask scheduler file (JSON with an "address"), checked."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"--cluster-file {path}: cannot read it ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"--cluster-file {path}: not a Dask scheduler file (not JSON: {e})") from None
    except RecursionError:
        raise ConfigError(f"--cluster-file {path}: not a Dask scheduler file (its JSON is nested deeper than Python reads)") from None
    if not isinstance(data, dict) or "address" not in data:
        raise ConfigError(f"--cluster-file {path}: not a Dask scheduler file (no \"address\" field)")
    return check_address(data["address"], f"--cluster-file {path}: field address")


# ---- what runs on a node (inside a Dask worker process) ------------------------------------------
_NODE_WORKERS: dict[str, Worker] = {}
_NODE_LOCK = threading.Lock()


def node_info(cuda: bool) -> dict:
    """What the driver plans with: host name, usable cores, visible GPU entries (CUDA_VISIBLE_DEVICES
    or the driver's indices), and whether this process may spawn divfuzz's worker."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus: list[str] = []
    if cuda:
        if visible is not None:
            gpus = [e.strip() for e in visible.split(",") if e.strip()]
        else:
            # lazy: torch-free module: it loads torch only when this runs
            import torch

            gpus = [str(i) for i in range(torch.cuda.device_count())]
    return {"host": socket.gethostname(), "cores": usable_cores(), "gpus": gpus,
            "daemon": bool(multiprocessing.current_process().daemon)}


def node_warm_up(device: str) -> None:
    """Start this node's warm template now, in the background (`warm_template.start_in_background`):
    its `import torch` overlaps the driver's own start-up (its store, its versions, the first
    draws), as one host's does, instead of starting when the node's first request arrives."""
    warm_template.start_in_background(device)


def _node_worker(key: str, device: str, extra_env: dict) -> Worker:
    with _NODE_LOCK:
        worker = _NODE_WORKERS.get(key)
        if worker is None or worker.aborted:
            worker = _NODE_WORKERS[key] = Worker(device, extra_env=extra_env)
        return worker


def node_run(key: str, device: str, extra_env: dict, message: dict, timeout_s: float) -> dict:
    """One request in the slot's divfuzz worker on this node: a drawn spec and its input siblings
    through one compile (`Worker.run_group`). Each member that ran, as data (never pickled
    objects): its verdict and its seconds; the worker's start-up, and what the compiler printed."""
    t0 = time.perf_counter()
    worker = _node_worker(key, device, extra_env)
    before = worker.startup_s
    try:
        got = worker.run_group(request_from_message(message), timeout_s)
    except InternalError as e:
        return {"internal": str(e), "details": e.details}
    return {"verdicts": [[verdict.to_dict(), seconds] for verdict, seconds in got], "startup_s": worker.startup_s - before,
            "output": worker.last_output, "node_s": time.perf_counter() - t0}


def node_call(key: str, device: str, extra_env: dict, target: WorkerTarget, kwargs: dict, timeout_s: float) -> dict:
    worker = _node_worker(key, device, extra_env)
    outcome = worker.call(target, kwargs, timeout_s)
    return {"value": outcome.value, "error": outcome.error}


def node_stop(key: str) -> None:
    """Out of band: the slot's process stops gracefully, in a thread of this node's process, so
    that `Client.run`, which runs this in the node's event loop, returns at once (a stop waits
    for the process to exit: done in the loop, a fleet's many stops at a campaign's end would
    queue behind each other, and every other call to the node behind them)."""
    with _NODE_LOCK:
        worker = _NODE_WORKERS.pop(key, None)
    if worker is not None:
        threading.Thread(target=worker.stop, name=f"divfuzz-stop-{key}", daemon=True).start()


def node_kill(key: str) -> None:
    """Out of band: the slot's process ends now, without the graceful stop's wait (`Worker.stop`
    waits up to 10 s for a busy process to read its stop, and `Client.run` runs this in the
    node's event loop, where that wait would hold up every other call to the node)."""
    with _NODE_LOCK:
        worker = _NODE_WORKERS.pop(key, None)
    if worker is not None:
        worker.abort()
        worker.kill()


def node_abort(key: str) -> None:
    """Out of band (`Client.run`): kill the slot's process, so the task running a case returns now."""
    with _NODE_LOCK:
        worker = _NODE_WORKERS.get(key)
    if worker is not None:
        worker.abort()


def request_from_message(message: dict) -> CaseRequest:
    """The inverse of `CaseRequest.to_message` (what crosses the network is JSON-able data)."""
    return CaseRequest(
        spec=GraphSpec.from_json(message["spec"]),
        device=message["device"],
        config=CompileConfig.from_dict(message["config"]),
        profile=bool(message.get("profile", False)),
        oracle=message.get("oracle", "numeric"),
        perf_margin=message.get("perf_margin"),
        against=CompileConfig.from_dict(message["against"]) if message.get("against") else None,
        siblings=tuple(GraphSpec.from_json(text) for text in message.get("siblings", ())),
    )


# ---- planning (pure) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeInfo:
    """One Dask worker as the scheduler and `node_info` describe it."""

    address: str
    host: str
    nthreads: int
    cores: int
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlotPlan:
    """Where a slot runs: its node's address, its device there, torch threads for its worker."""

    slot: int
    address: str
    where: SlotDevice
    threads: int


def fleet_device(device: str, nodes: list[NodeInfo]) -> str:
    """--device on a fleet: 'auto' is cuda when every node has a GPU, else cpu; 'cuda[:N]' needs
    GPU N (or any) on every node; checked against the nodes, not the driver (which may have none)."""
    if not nodes:
        raise ClusterError("the cluster has no workers")
    if device == "auto":
        return "cuda" if all(n.gpus for n in nodes) else "cpu"
    if device == "cpu":
        return device
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if not m:
        raise ConfigError(f"Expected --device auto, cpu or cuda[:N] but got {device!r}")
    need = int(m.group(1) or 0) + 1
    for n in nodes:
        if len(n.gpus) < need:
            raise ConfigError(f"--device {device}: cluster worker {n.address} on {n.host} sees {len(n.gpus)} GPU(s)")
    return device


def fuzzing_threads(threads: int, minimize: bool) -> int:
    """How many of a node's `threads` Dask threads `--workers auto` makes fuzzing slots (pure).
    Without minimization, all of them. With it, the most slots S whose analysis workers
    (`sizing.size_analysis_workers(S)`, the rule one host uses beside its slots) fit the threads
    left, S + A(S) <= threads, and at least 1: a node's analysis workers run beside its slots as
    one host's pool does, each a request on a thread of its own (a node runs at most its
    threads' worth of requests at once)."""
    if not minimize or threads < 2:
        return max(1, threads)
    slots = 1
    while slots + 1 + size_analysis_workers(slots + 1).workers <= threads:
        slots += 1
    return slots


def plan_slots(nodes: list[NodeInfo], device: str, workers: int | None, *, minimize: bool = False) -> list[SlotPlan]:
    """Slots over the nodes: one per Dask worker thread (or `workers` of them), filled round-robin
    over the workers in address order; on CUDA, the k-th slot of a node is pinned to its GPU k mod G
    (`cuda:N`: GPU N). Each slot's worker gets the node's cores split between its slots. With
    `minimize` and no `workers`, a node gives `fuzzing_threads` of its threads to slots and keeps
    the rest for its analysis workers (`plan_analysis`)."""
    if not nodes:
        raise ClusterError("the cluster has no workers")
    ordered = sorted(nodes, key=lambda n: n.address)
    room = {n.address: (n.nthreads if workers is not None else fuzzing_threads(n.nthreads, minimize)) for n in ordered}
    capacity = [n for rounds in range(max(room.values())) for n in ordered if room[n.address] > rounds]
    count = workers if workers is not None else len(capacity)
    homes = [capacity[i % len(capacity)] for i in range(count)]
    per_node = Counter(n.address for n in homes)
    seen: Counter = Counter()
    plans = []
    for slot, node in enumerate(homes):
        k = seen[node.address]
        seen[node.address] += 1
        plans.append(SlotPlan(slot, node.address, slot_device_on(node, device, k), max(1, node.cores // per_node[node.address])))
    return plans


def plan_analysis(nodes: list[NodeInfo], device: str, slots: list[SlotPlan]) -> list[SlotPlan]:
    """The analysis workers' places (pure): on each node, on the Dask threads its slots leave
    free, at most `sizing.size_analysis_workers` of its slot count (none on a node without
    slots), in address order; numbered after the slots, each pinned to the node's next GPU as a
    further slot would be, with the torch threads the node's slots have. [] where no thread is
    free: the slots then analyse inline."""
    ordered = sorted(nodes, key=lambda n: n.address)
    on_node = Counter(p.address for p in slots)
    plans = []
    for node in ordered:
        here = on_node[node.address]
        if here == 0:
            continue
        count = min(node.nthreads - here, size_analysis_workers(here).workers)
        for j in range(max(0, count)):
            plans.append(SlotPlan(len(slots) + len(plans), node.address, slot_device_on(node, device, here + j),
                                  max(1, node.cores // here)))
    return plans


def slot_device_on(node: NodeInfo, device: str, k: int) -> SlotDevice:
    """The k-th slot's device on `node`; the name the store records says node and GPU."""
    if device == "cpu":
        return SlotDevice(f"{node.host}/cpu", "cpu")
    if not node.gpus:
        raise ConfigError(f"--device {device}: cluster worker {node.address} on {node.host} sees no GPU")
    index = int(device.split(":", 1)[1]) if ":" in device else k % len(node.gpus)
    return SlotDevice(f"{node.host}/cuda:{node.gpus[index]}", "cuda", {"CUDA_VISIBLE_DEVICES": node.gpus[index]})


# ---- the driver's side ----------------------------------------------------------------------------
@dataclass
class FleetStats:
    """What the live view and the summary show: nodes lost, cases returned to the queue."""

    lost_nodes: set = field(default_factory=set)
    requeued: int = 0
    why: list = field(default_factory=list)  # "address: reason", one per requeue
    requests: int = 0  # groups answered by a node
    # Their Dask round trips: each answer's wait on the driver less the node's own time in `node_run`
    # (submit, scheduling, the task's start, the result's fetch, the slot thread's wake-up).
    round_trip_s: float = 0.0


class Fleet:
    """A connected cluster and the campaign's slot plan; `worker(slot, ...)` is the Campaign's
    worker factory (a `ClusterWorker` per slot)."""

    def __init__(self, client, nodes: list[NodeInfo], device: str, plans: list[SlotPlan], *, minimize: bool = False):
        self.client = client
        self.nodes = {n.address: n for n in nodes}
        self.device = device
        self.minimize = minimize
        self.plans = plans
        self.slot_devices = [p.where for p in plans]
        self.token = uuid.uuid4().hex[:12]  # two campaigns on one cluster never share a slot's worker
        self.stats = FleetStats()
        self.lock = threading.Lock()
        self._live: set[str] = set(self.nodes)
        self._live_at = time.monotonic()
        self._refreshing = False
        self.workers: list[ClusterWorker] = []

    @classmethod
    def connect(cls, address: str, device: str, workers: int | None, *, minimize: bool = False) -> "Fleet":
        """Connect, read the nodes, resolve the device on them, plan the slots (with `minimize`,
        `--workers auto` leaves each node threads for its analysis workers: `plan_slots`)."""
        distributed = import_distributed()
        try:
            client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"--cluster {address}: cannot reach the Dask scheduler ({type(e).__name__}: {e})") from None
        try:
            infos = client.run(node_info, cuda=device != "cpu")  # auto: each node says what GPUs it has
            sched = scheduler_workers(client)
            daemonic = sorted(a for a, i in infos.items() if i["daemon"])
            if daemonic:
                raise ClusterError(f"--cluster {address}: Dask workers {', '.join(daemonic)} are daemonic and cannot start "
                                   f"divfuzz's isolated worker processes; start them with {DAEMON_SETTING}")
            nodes = [NodeInfo(a, i["host"], int(sched.get(a, {}).get("nthreads", 1)), int(i["cores"]), tuple(i["gpus"]))
                     for a, i in infos.items()]
            device = fleet_device(device, nodes)
            client.run(node_warm_up, "cuda" if device.startswith("cuda") else "cpu")  # returns at once: each node imports in a thread
            return cls(client, nodes, device, plan_slots(nodes, device, workers, minimize=minimize), minimize=minimize)
        except BaseException:
            client.close()
            raise

    def replan(self, workers: int) -> None:
        """Plan `workers` slots over the same nodes (a resumed run keeps its slot count)."""
        self.plans = plan_slots(list(self.nodes.values()), self.device, workers, minimize=self.minimize)
        self.slot_devices = [p.where for p in self.plans]

    def analysis_plans(self, wanted: int | None) -> list[SlotPlan]:
        """Places for the campaign's analysis workers on the threads the slots leave free
        (`plan_analysis`, which sizes each node's share by one host's rule): every one when
        `wanted` is None (`--analysis-workers auto`), else at most `wanted`; [] when none is free
        or none is wanted."""
        plans = plan_analysis(list(self.nodes.values()), self.device, self.plans)
        return plans if wanted is None else plans[:max(0, wanted)]

    def analysis_worker_factory(self, plans: list[SlotPlan]):
        """The analysis pool's `worker_factory` for `plans` (`AnalysisPool.start` calls it once per
        place, in order): each call gives the next plan's `ClusterWorker`, a worker process on that
        node beside its slots'. The driver's `extra_env` is replaced by the node's, as for a slot."""
        queue = list(plans)
        lock = threading.Lock()

        def make(device: str, *, extra_env: dict | None = None) -> "ClusterWorker":
            with lock:
                if not queue:
                    raise InternalError("the fleet's analysis pool asked for more workers than it planned")
                plan = queue.pop(0)
            w = ClusterWorker(self, plan)
            with self.lock:
                self.workers.append(w)
            return w

        return make

    def describe(self, analysis_workers: int | None = None) -> str:
        """One line for the campaign's header: slots, nodes, devices, and the Dask threads the
        campaign's analysis pool will take, asked as the campaign asks (`analysis_plans` of
        `analysis_workers`, None for auto; none without minimization). A resumed run with analyses
        pending and `--analysis-workers 0` still takes one thread for them, which this line,
        written before the store is read, does not count."""
        hosts = Counter(p.where.name for p in self.plans)
        spare = len(self.analysis_plans(analysis_workers)) if self.minimize else 0
        return (f"{len(self.plans)} slot{'s' if len(self.plans) != 1 else ''} on {len(self.nodes)} Dask worker(s): "
                + ", ".join(f"{name} x{n}" for name, n in sorted(hosts.items()))
                + (f"; {spare} Dask thread(s) left for analysis workers" if spare else ""))

    def progress_line(self) -> str:
        """Workers by node and GPU, now, and what lost nodes cost (the live view's fleet line)."""
        with self.lock:
            slots = [w for w in self.workers if w.slot < len(self.plans)]  # a fuzzing slot's, not an analysis worker's
            where = Counter(w.where_name for w in slots) if slots else Counter(p.where.name for p in self.plans)
            lost, requeued = len(self.stats.lost_nodes), self.stats.requeued
        line = "fleet: " + " · ".join(f"{name} x{n}" for name, n in sorted(where.items()))
        if lost or requeued:
            line += f"  ({lost} node(s) lost, {requeued} case(s) returned to the queue)"
        return line

    def lost_report(self) -> list[str]:
        """One line per case returned to the queue: which node, and how it was seen to go."""
        with self.lock:
            return [f"returned to the queue: {why}" for why in self.stats.why]

    def worker(self, slot: int, device: str, *, extra_env: dict | None = None) -> "ClusterWorker":
        """The Campaign's worker factory: `extra_env` is the driver's and is replaced by the node's
        own (threads from the node's cores, the node's GPU)."""
        w = ClusterWorker(self, self.plans[slot])
        with self.lock:
            self.workers.append(w)
        return w

    def close(self) -> None:
        self.client.close()

    # liveness, shared by the slots
    def live(self) -> set[str]:
        with self.lock:
            if time.monotonic() - self._live_at < LIVENESS_REFRESH_S or self._refreshing:
                return set(self._live)
            self._refreshing = True  # one fetch at a time: the other slots read the last list meanwhile
        try:
            live = set(scheduler_workers(self.client))
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"lost the Dask scheduler ({type(e).__name__}: {e})") from None
        finally:
            with self.lock:
                self._refreshing = False
        with self.lock:
            self._live, self._live_at = live, time.monotonic()
        return live

    def note_answer(self, round_trip_s: float) -> None:
        with self.lock:
            self.stats.requests += 1
            self.stats.round_trip_s += round_trip_s

    def note_lost(self, address: str, why: str, cases: int = 1) -> None:
        """`address` was lost with a request of `cases` cases (a drawn spec and its siblings) in flight."""
        with self.lock:
            self.stats.lost_nodes.add(address)
            self.stats.requeued += cases
            self.stats.why.append(f"{address}: {why}" + (f" ({cases} cases of one compile, run again whole)" if cases > 1 else ""))

    def replacement(self, slot: int, stop: threading.Event) -> tuple[str, SlotDevice]:
        """A live node for a slot whose node left: the one with the fewest slots now, its GPU chosen
        as `plan_slots` would. Waits up to NO_NODE_WAIT_S for one to join."""
        deadline = Deadline.after(NO_NODE_WAIT_S)
        while True:
            live = self.live() - self.stats.lost_nodes
            if live or stop.is_set():
                break
            if deadline.expired():
                raise ClusterError(f"slot {slot}: no Dask worker alive for {NO_NODE_WAIT_S:.0f} s")
            time.sleep(POLL_S)
        if not live:
            raise ClusterError(f"slot {slot}: no Dask worker alive")
        with self.lock:
            load = Counter(w.address for w in self.workers)
        address = min(sorted(live), key=lambda a: load[a])
        if address not in self.nodes:  # a node that joined (or was restarted) since the plan
            info = self.client.run(node_info, cuda=self.device.startswith("cuda"), workers=[address])[address]
            with self.lock:
                self.nodes[address] = NodeInfo(address, info["host"], 1, int(info["cores"]), tuple(info["gpus"]))
        return address, slot_device_on(self.nodes[address], self.device, load[address])


def scheduler_workers(client) -> dict:
    """The scheduler's workers now, by address, asked directly. Not `Client.scheduler_info()`: the
    client's own periodic refresh (every 2 s, without workers) can overwrite the answer between its
    fetch and its return, which would read as every node gone."""
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


class _Lost(Exception):
    """The node running a request left; the request goes back to the queue."""


class ClusterWorker:
    """A `CaseWorker` whose process lives on a Dask worker (`divfuzz.fuzzer.engine.worker.CaseWorker`):
    `where` is the slot's node now, and moves when the node is lost; the compiler's output stays on
    the node (`output_mark` is None). `run_group` never returns a verdict for a lost node: it
    resubmits the whole group (see the module)."""

    def __init__(self, fleet: Fleet, plan: SlotPlan):
        self.fleet = fleet
        self.slot = plan.slot
        self.address = plan.address
        self.where = plan.where
        self.threads = plan.threads
        self.device = plan.where.worker_device
        self.key = f"divfuzz-{fleet.token}-slot{plan.slot}"
        self.startup_s = 0.0
        self.last_output = ""  # what the compiler printed on the node during the last request
        self.aborted = False
        self._abort_event = threading.Event()
        self._answered = threading.Event()  # set by the request in flight's answer, or by an abort
        self._future = None

    @property
    def where_name(self) -> str:
        return self.where.name

    def ensure_started(self) -> None:
        """Nothing to start from here: the node starts the slot's process with its first request."""

    def output_mark(self) -> None:
        """None: the compiler's output stays on the node (`last_output` holds each request's)."""
        return None

    def output_since(self, mark: int) -> str:
        return ""

    def _env(self) -> dict:
        return {"DIVFUZZ_WORKER_THREADS": str(self.threads), **self.where.env}

    def run(self, request: CaseRequest, timeout_s: float) -> Verdict:
        """The verdict of `request`'s spec (its siblings' verdicts: `run_group`)."""
        return self.run_group(request, timeout_s)[0][0]

    def run_group(self, request: CaseRequest, timeout_s: float) -> list[tuple[Verdict, float]]:
        """`Worker.run_group` on the slot's node: a verdict for `request.spec` and for each of its
        siblings that ran, in order, each with its seconds (`timeout_s` each). The node answers
        once the group has run; a node lost before that returns the whole group to the queue, and
        it runs again from its compile on another node."""
        message = request.to_message()
        members = 1 + len(request.siblings)
        t0 = time.perf_counter()
        reply = self._remote(lambda: (node_run, self.key, self.device, self._env(), message, timeout_s),
                             timeout_s * (members + 1), cases=members)  # + 1: a death's re-run (`Worker`)
        if reply is None:
            return [(Verdict(Status.CRASH, error_type="Aborted", error_message="divfuzz was interrupted"), 0.0)]
        if "internal" in reply:
            raise InternalError(f"{reply['internal']} (on cluster worker {self.address})", details=reply["details"])
        if "node_s" in reply:
            self.fleet.note_answer(max(0.0, time.perf_counter() - t0 - float(reply["node_s"])))
        self.startup_s += reply["startup_s"]
        self.last_output = reply.get("output", "")
        return [(Verdict.from_dict(verdict), float(seconds)) for verdict, seconds in reply["verdicts"]]

    def call(self, target: WorkerTarget, kwargs: dict, timeout_s: float) -> CallOutcome:
        reply = self._remote(lambda: (node_call, self.key, self.device, self._env(), target, kwargs, timeout_s), timeout_s)
        if reply is None:
            return CallOutcome(error="Aborted: divfuzz was interrupted")
        return CallOutcome(value=reply["value"], error=reply["error"])

    def _remote(self, task, timeout_s: float, cases: int = 1):
        """Submit to the slot's node and wait (`timeout_s`: what the node may take, all of a
        group's members together); on a lost node, move the slot and submit the same request
        again (`cases`: how many cases it holds, for the fleet's count). None: aborted (the
        campaign was interrupted)."""
        for _ in range(LOST_NODE_RETRIES + 1):
            if self.aborted:
                return None
            fn, *args = task()  # the env is the slot's current node's
            future = self.fleet.client.submit(fn, *args, workers=[self.address], allow_other_workers=False,
                                              pure=False, key=f"{self.key}-{uuid.uuid4().hex[:8]}")
            self._future = future
            try:
                return self._wait(future, timeout_s)
            except _Lost as why:
                future.cancel()
                self.fleet.note_lost(self.address, str(why), cases)
                if self.aborted:
                    return None
                self.address, self.where = self.fleet.replacement(self.slot, self._abort_event)
            finally:
                self._future = None
        raise ClusterError(f"slot {self.slot}: a case lost {LOST_NODE_RETRIES + 1} Dask workers in a row; "
                           "stopping rather than retrying it forever (is a node killing cases?)")

    def _wait(self, future, timeout_s: float):
        distributed = import_distributed()

        # lazy: optional extra [cluster]
        from distributed.comm.core import CommClosedError

        # The node enforces the case's timeout (a HANG verdict); past that and a worker's start-up,
        # a node that says nothing is treated as lost.
        deadline = Deadline.after(timeout_s + STARTUP_TIMEOUT_S + 60.0)
        # Woken by the answer (the future's callback) or an abort, never by a poll: a slot's next
        # draw starts as its request's reply lands. Each POLL_S without one, it looks at the
        # scheduler's worker list (the node may be gone: its task would wait forever).
        answered = self._answered = threading.Event()
        future.add_done_callback(lambda _future: answered.set())
        while True:
            if self.aborted:
                future.cancel()
                return None
            if future.done():  # `result(timeout=...)` is never used: a timed-out wait must never read as a lost node
                try:
                    return future.result()
                except (distributed.KilledWorker, CommClosedError, CancelledError) as e:
                    raise _Lost(f"{type(e).__name__}: {e}") from None
                except Exception as e:  # divfuzz's own code failed on the node: never a verdict
                    raise InternalError(f"divfuzz's own code failed on cluster worker {self.address}: {type(e).__name__}: {e}") from e
            if answered.wait(POLL_S):
                continue
            if self.address not in self.fleet.live():
                raise _Lost("gone from the scheduler's workers")
            if deadline.expired():
                raise _Lost(f"no answer within {timeout_s + STARTUP_TIMEOUT_S + 60.0:.0f} s")

    def abort(self) -> None:
        """From another thread: stop now; the case in flight is dropped, never a verdict."""
        self.aborted = True
        self._abort_event.set()
        future = self._future
        if future is not None:
            future.cancel()
        # Kill on the node before waking the slot's wait. A slot that sees `aborted` at its own poll
        # first still never stops gracefully: its `stop` kills (`node_kill`).
        self._on_node(node_abort)
        self._answered.set()  # the wait in flight ends now

    def stop(self) -> None:
        """Stop the slot's process on its node: gracefully, or at once once aborted (its process
        was killed or is being killed: a graceful stop would wait on it in the node's event loop)."""
        self._on_node(node_kill if self.aborted else node_stop)

    def kill(self) -> None:
        self.abort()

    def _on_node(self, fn) -> None:
        """Out of band on the slot's node (`Client.run` does not wait for the busy task thread)."""
        try:
            self.fleet.client.run(fn, self.key, workers=[self.address], on_error="ignore")
        except Exception:  # the node or the scheduler is gone: nothing is left to stop there
            pass
