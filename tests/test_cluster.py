"""`divfuzz fuzz --cluster`: slots on a real Dask cluster (divfuzz.fuzzer.campaign.cluster).

Cheap tests first (no cluster, no compile): the slot plan and GPU pinning as pure functions, the
checks of --cluster / --cluster-file, the missing extra (a subprocess that cannot import
`distributed`), the fleet line of the live view, a slot's group against a stand-in client. Then
a real `distributed.LocalCluster` of 2 worker processes: a campaign in which one Dask worker
process is SIGKILLed mid-run stores every case exactly once, none of them a finding made by the
kill, and a second run resumes it; a fleet stores the same cases, input siblings included, as one
host for the same seed and slot count; and a node killed with half a group judged has that whole
group run again on another node.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.cluster import (
    NodeInfo,
    SlotPlan,
    check_address,
    fleet_device,
    fuzzing_threads,
    plan_analysis,
    plan_slots,
    read_scheduler_file,
    request_from_message,
)
from divfuzz.fuzzer.campaign.loop import CampaignOptions, check_inputs_per_compile
from divfuzz.fuzzer.campaign.sizing import SlotDevice
from divfuzz.fuzzer.engine.worker import CaseRequest
from divfuzz.generators.input_siblings import input_siblings
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError
from seed_specs import layer_norm_linear

ROOT = Path(__file__).resolve().parents[1]


def _nodes():
    return [NodeInfo("tcp://10.0.0.2:9000", "b", 2, 16, ("0", "1")),
            NodeInfo("tcp://10.0.0.1:9000", "a", 2, 16, ("2", "3"))]


def test_plan_fills_every_thread_in_address_order_and_pins_gpus_round_robin_per_node():
    plans = plan_slots(_nodes(), "cuda", None)
    assert [p.address for p in plans] == ["tcp://10.0.0.1:9000", "tcp://10.0.0.2:9000"] * 2
    # Node a's slots get its GPUs 2 then 3 (its CUDA_VISIBLE_DEVICES entries), node b's 0 then 1.
    assert [p.where.name for p in plans] == ["a/cuda:2", "b/cuda:0", "a/cuda:3", "b/cuda:1"]
    assert all(p.where.worker_device == "cuda" and p.where.env["CUDA_VISIBLE_DEVICES"] == p.where.name[-1] for p in plans)
    assert {p.threads for p in plans} == {8}  # 16 cores split between a node's 2 slots
    assert plan_slots(list(reversed(_nodes())), "cuda", None) == plans  # the scheduler's order does not matter


def test_plan_with_explicit_workers_and_on_the_cpu():
    plans = plan_slots(_nodes(), "cpu", 3)
    assert [p.slot for p in plans] == [0, 1, 2]
    assert [p.where.name for p in plans] == ["a/cpu", "b/cpu", "a/cpu"]
    assert [p.threads for p in plans] == [8, 16, 8]
    assert [p.where.name for p in plan_slots(_nodes(), "cuda:1", None)] == ["a/cuda:3", "b/cuda:1"] * 2


def test_with_minimization_auto_leaves_each_node_the_threads_one_host_gives_its_analysis_workers():
    from divfuzz.fuzzer.campaign.bench_legs import node_threads
    from divfuzz.fuzzer.campaign.sizing import size_analysis_workers

    # One host's rule: 12 slots and 5 analysis workers. A node of 17 threads plans the same split.
    assert size_analysis_workers(12).workers == 5 and fuzzing_threads(17, True) == 12
    assert fuzzing_threads(17, False) == 17 and fuzzing_threads(12, True) == 9  # 9 + 3 = 12
    assert fuzzing_threads(1, True) == 1 and fuzzing_threads(2, True) == 1  # always a slot
    for slots in range(1, 40):  # the bench's dask nodes get back the slots they were sized for
        assert fuzzing_threads(node_threads(slots, True), True) == slots
        assert node_threads(slots, False) == slots
    nodes = [NodeInfo("tcp://10.0.0.2:9000", "b", 17, 16, ("0", "1")),
             NodeInfo("tcp://10.0.0.1:9000", "a", 17, 16, ("2",))]
    slots = plan_slots(nodes, "cuda", None, minimize=True)
    assert len(slots) == 24 and Counter(p.address for p in slots) == {n.address: 12 for n in nodes}
    assert plan_slots(nodes, "cuda", None) != slots and len(plan_slots(nodes, "cuda", None)) == 34  # no reserve without it
    analysis = plan_analysis(nodes, "cuda", slots)
    assert [p.slot for p in analysis] == list(range(24, 34))  # numbered after the slots: their workers' keys differ
    assert [p.address for p in analysis] == ["tcp://10.0.0.1:9000"] * 5 + ["tcp://10.0.0.2:9000"] * 5
    # Pinned as the node's next slots would be: node b's 12 slots sat on GPUs 0,1 alternately.
    assert [p.where.name for p in analysis[5:]] == ["b/cuda:0", "b/cuda:1", "b/cuda:0", "b/cuda:1", "b/cuda:0"]
    assert {p.threads for p in analysis} == {p.threads for p in slots} == {1}
    # Every thread a slot: nothing is left, and the slots analyse inline.
    assert plan_analysis(nodes, "cuda", plan_slots(nodes, "cuda", 34)) == []
    # Fewer slots than a node could hold: its analysis workers still follow one host's rule.
    few = plan_slots(nodes, "cpu", 4)
    assert len(plan_analysis(nodes, "cpu", few)) == 2  # size_analysis_workers(2) per node: 1 each
    # The header counts the threads the analysis workers will take: none under --analysis-workers 0.
    from divfuzz.fuzzer.campaign import cluster

    fleet = cluster.Fleet(None, nodes, "cuda", slots, minimize=True)
    assert fleet.describe().endswith("; 10 Dask thread(s) left for analysis workers")  # auto: as many as one host of 24 slots
    assert fleet.describe(3).endswith("; 3 Dask thread(s) left for analysis workers")
    assert "analysis" not in fleet.describe(0) and "analysis" not in cluster.Fleet(None, nodes, "cuda", slots).describe()
    # Under auto the pool takes every thread the nodes were sized to leave (one per node with 2
    # slots each), though one host of 4 slots would run 1 analysis worker: the header says so.
    small = cluster.Fleet(None, nodes, "cpu", few, minimize=True)
    assert size_analysis_workers(len(few)).workers == 1 and len(small.analysis_plans(None)) == 2
    assert small.describe().endswith("; 2 Dask thread(s) left for analysis workers")


def test_device_is_checked_against_the_nodes_not_the_driver():
    assert fleet_device("auto", _nodes()) == "cuda"
    cpu_node = NodeInfo("tcp://10.0.0.3:9000", "c", 1, 4, ())
    assert fleet_device("auto", _nodes() + [cpu_node]) == "cpu"
    with pytest.raises(ConfigError, match="10.0.0.3.*sees 0 GPU"):
        fleet_device("cuda", _nodes() + [cpu_node])
    with pytest.raises(ConfigError, match="sees 2 GPU"):
        fleet_device("cuda:2", _nodes())


def test_addresses_and_scheduler_files_are_checked(tmp_path):
    assert check_address("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    for bad in ("127.0.0.1:8786", "tcp://h:8786/x", "tcp://h;rm -rf:1", "file:///etc/passwd", 8786):
        with pytest.raises(ConfigError, match="Expected a Dask scheduler address"):
            check_address(bad)
    good = tmp_path / "scheduler.json"
    good.write_text(json.dumps({"type": "Scheduler", "address": "tcp://10.1.2.3:8786"}))
    assert read_scheduler_file(good) == "tcp://10.1.2.3:8786"
    (tmp_path / "a.json").write_text('{"address": "ssh://x:1"}')
    (tmp_path / "b.json").write_text("not json")
    (tmp_path / "c.json").write_text('{"id": 1}')
    for name, what in (("a.json", "field address"), ("b.json", "not JSON"), ("c.json", "no \"address\""),
                       ("missing.json", "cannot read")):
        with pytest.raises(ConfigError, match=f"{name}.*{what}|{what}"):
            read_scheduler_file(tmp_path / name)


def test_a_request_crosses_the_network_as_data_and_comes_back_equal():
    request = CaseRequest(layer_norm_linear(), "cuda", CompileConfig(backend="aot_eager"), profile=True,
                          against=CompileConfig(backend="eager"))
    again = request_from_message(json.loads(json.dumps(request.to_message())))
    assert again == request
    # A drawn spec and its input siblings travel as one request (the node runs them through one compile).
    spec = layer_norm_linear()
    group = CaseRequest(spec, "cpu", CompileConfig(), siblings=input_siblings(spec, 4))
    again = request_from_message(json.loads(json.dumps(group.to_message())))
    assert again == group and len(again.siblings) == 3


def test_a_fleet_campaign_takes_input_siblings_like_one_host():
    # The fleet no longer forces one input per compile: a numeric campaign of one compiler keeps its siblings.
    check_inputs_per_compile(CampaignOptions(device="cuda", out_dir=Path("x"), inputs_per_compile=4))
    with pytest.raises(ConfigError, match="--against"):
        check_inputs_per_compile(CampaignOptions(device="cuda", out_dir=Path("x"), inputs_per_compile=4,
                                                 against=CompileConfig(backend="eager")))


def test_a_fleet_slot_answers_a_whole_group_and_counts_a_lost_nodes_group_as_its_cases():
    # ClusterWorker.run_group against a stand-in client: the node's reply (every member's verdict
    # and seconds) comes back as Worker.run_group's list, and a lost node's group is submitted
    # again whole, its cases counted as returned to the queue.
    from concurrent.futures import Future

    pytest.importorskip("distributed")
    from distributed.comm.core import CommClosedError

    from divfuzz.fuzzer.campaign import cluster
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import Verdict

    spec = layer_norm_linear(8, 4)
    request = CaseRequest(spec, "cpu", CompileConfig(), siblings=input_siblings(spec, 3))
    sent = []

    class Client:
        def submit(self, fn, *args, **kw):
            sent.append(kw["workers"])
            future = Future()
            if len(sent) == 1:  # the first node dies with the group in flight
                future.set_exception(CommClosedError("the node died"))
            else:
                message = args[3]
                assert len(message["siblings"]) == 2  # the whole group again, not the members after a cut
                future.set_result({"verdicts": [[Verdict(Status.OK, timings=(("compile", 1.0),)).to_dict(), 1.5],
                                                [Verdict(Status.OK).to_dict(), 0.25], [Verdict(Status.OK).to_dict(), 0.25]],
                                   "startup_s": 2.0, "output": "printed"})
            return future

    class Fleet:
        client = Client()
        stats = cluster.FleetStats()
        token = "t"

        def live(self):
            return {"tcp://a:1", "tcp://b:1"}

        def note_lost(self, address, why, cases=1):
            cluster.Fleet.note_lost(self, address, why, cases)

        def replacement(self, slot, stop):
            return "tcp://b:1", SlotDevice("b/cpu", "cpu")

    fleet = Fleet()
    fleet.lock = threading.Lock()
    worker = cluster.ClusterWorker(fleet, SlotPlan(0, "tcp://a:1", SlotDevice("a/cpu", "cpu"), 1))
    got = worker.run_group(request, 10.0)
    assert [(v.status, s) for v, s in got] == [(Status.OK, 1.5), (Status.OK, 0.25), (Status.OK, 0.25)]
    assert sent == [["tcp://a:1"], ["tcp://b:1"]] and worker.where.name == "b/cpu"
    assert (worker.startup_s, worker.last_output) == (2.0, "printed")
    assert fleet.stats.requeued == 3 and fleet.stats.lost_nodes == {"tcp://a:1"}
    assert "3 cases of one compile, run again whole" in fleet.stats.why[0]


def test_a_fleet_slot_is_woken_by_its_answer_not_by_a_poll(monkeypatch):
    # Issue 41: a slot's wait polled its future every 0.5 s (looking at the scheduler's worker list
    # each time), so each group's answer waited up to half a second on the driver, 200 ms per case
    # between cases on 2 H100s. The answer itself must wake the slot (the future's done callback):
    # no look at the node's liveness while the answer comes within POLL_S, and one
    # submission per group, whatever its members. A stand-in client whose answer lands only once
    # the slot waits for it; a poll (the old wait) answers too, so that it fails rather than hangs.
    from concurrent.futures import Future

    pytest.importorskip("distributed")
    from divfuzz.fuzzer.campaign import cluster
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import Verdict

    monkeypatch.setattr(cluster, "POLL_S", 120.0)  # the answer always comes first: no timing in the test
    spec = layer_norm_linear(8, 4)
    request = CaseRequest(spec, "cpu", CompileConfig(), siblings=input_siblings(spec, 4))
    reply = {"verdicts": [[Verdict(Status.OK).to_dict(), 0.25]] * 4, "startup_s": 0.0, "output": "", "node_s": 1.0}
    submitted, polled = [], []

    class Answer(Future):
        def add_done_callback(self, fn):
            super().add_done_callback(fn)
            if not self.done():
                threading.Thread(target=self.set_result, args=(reply,)).start()

    class Client:
        def submit(self, fn, *args, **kw):
            submitted.append(args[3])
            return Answer()

    class Fleet:
        client = Client()
        stats = cluster.FleetStats()
        token = "t"
        lock = threading.Lock()

        def live(self):
            polled.append(time.monotonic())
            future = worker._future
            if not future.done():
                future.set_result(reply)
            return {"tcp://a:1"}

        def note_answer(self, round_trip_s):
            cluster.Fleet.note_answer(self, round_trip_s)

    worker = cluster.ClusterWorker(Fleet(), SlotPlan(0, "tcp://a:1", SlotDevice("a/cpu", "cpu"), 1))
    got = worker.run_group(request, 10.0)
    assert [v.status for v, _ in got] == [Status.OK] * 4
    assert polled == []  # woken by the answer, never by a look at the scheduler
    assert len(submitted) == 1 and len(submitted[0]["siblings"]) == 3  # one request for the group's 4 cases
    assert Fleet.stats.requests == 1 and Fleet.stats.round_trip_s >= 0.0


def _fuzz(args, *, env_extra=None, pre="", timeout=300):
    """`python -m divfuzz.fuzzer fuzz ARGS` in a subprocess of this tree; `pre` runs first (e.g. an import blocker)."""
    code = f"{pre}\nimport sys\nfrom divfuzz.fuzzer.cli.main import main\nsys.argv = ['divfuzz', 'fuzz', *{list(map(str, args))!r}]\nmain()"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


BLOCK_DISTRIBUTED = """
import sys
class _NoDask:
    def find_spec(self, name, path=None, target=None):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError(f"No module named {name!r} (hidden by the test)")
sys.meta_path.insert(0, _NoDask())
"""


def test_without_the_extra_cluster_exits_2_and_names_it(tmp_path):
    out = tmp_path / "out"
    r = _fuzz(["--cluster", "tcp://127.0.0.1:8786", "--max-cases", "1", "--out", out], pre=BLOCK_DISTRIBUTED, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "divfuzz[cluster]" in r.stderr + r.stdout
    assert not (out / "divfuzz.sqlite").exists()


@pytest.mark.parametrize("dask", ["installed", "missing"])
def test_bad_cluster_options_exit_2_and_leave_the_store_byte_identical(tmp_path, monkeypatch, dask):
    # The options are named whether or not the extra is installed (CI installs it not).
    if dask == "installed":
        pytest.importorskip("distributed")
    else:
        monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    out = tmp_path / "out"
    out.mkdir()
    store = out / "divfuzz.sqlite"
    store.write_bytes(b"not touched")
    sched = tmp_path / "scheduler.json"
    sched.write_text('{"address": "tcp://h:1; import os"}')
    cases = [(["--cluster", "localhost:8786"], "localhost:8786"),
             (["--cluster-file", sched], "field address"),
             (["--cluster", "tcp://127.0.0.1:8786", "--cluster-file", sched], "give one of them"),
             (["--cluster", "tcp://127.0.0.1:8786", "--replay-known"], "--replay-known")]
    from click.testing import CliRunner

    from divfuzz.fuzzer.cli.main import main

    for args, what in cases:
        r = CliRunner().invoke(main, ["fuzz", *map(str, args), "--max-cases", "1", "--out", str(out)])
        assert r.exit_code == 2 and what in " ".join(r.output.split()), (args, r.output)
    assert store.read_bytes() == b"not touched"


def test_live_view_shows_the_fleet_by_node_and_gpu():
    from rich.console import Console

    from divfuzz.fuzzer.campaign.loop import CampaignOptions, Progress
    from divfuzz.fuzzer.cli.fuzz_command import live_progress

    opts = CampaignOptions(device="cuda", out_dir=Path("x"), max_cases=10)
    console = Console(width=200, record=True)
    console.print(live_progress(opts, Progress(), fleet_line="fleet: a/cuda:0 x1 · b/cuda:1 x1  (1 node(s) lost, 2 case(s) returned to the queue)"))
    text = console.export_text()
    assert "a/cuda:0 x1 · b/cuda:1 x1" in text and "2 case(s) returned to the queue" in text


# ---- a real Dask cluster ------------------------------------------------------------------------
def _local_cluster(threads: int):
    """2 Dask worker processes, `threads` threads each, allowed to spawn divfuzz's workers (daemon off)."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    # Held for the fixture's life, not only at start: the nanny restarts a killed worker with the
    # config in force then, and a daemonic worker cannot start divfuzz's processes.
    environ = dict(os.environ)  # the nannies write theirs (OMP_NUM_THREADS, __DASK_PARENT_PID...) into this process's
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=threads, processes=True, dashboard_address=None)
        client = distributed.Client(cluster, set_as_default=False)
        try:
            yield cluster, client
        finally:
            client.close()
            cluster.close()
            os.environ.clear()
            os.environ.update(environ)


@pytest.fixture
def local_cluster():
    yield from _local_cluster(1)


@pytest.fixture
def local_cluster_two_threads():
    yield from _local_cluster(2)


def _stored(store: Path):
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    except sqlite3.OperationalError:  # the store file is not created yet
        return []
    try:
        return db.execute("SELECT slot, idx, status, verdict_json FROM cases WHERE run_id = 1").fetchall()
    except sqlite3.OperationalError:  # its tables are not created yet
        return []
    finally:
        db.close()


@pytest.mark.slow  # a LocalCluster, 2 worker processes each spawning divfuzz's, and two driver runs
def test_a_killed_node_returns_its_case_to_the_queue_and_the_run_resumes(local_cluster, tmp_path):
    cluster, client = local_cluster
    out = tmp_path / "out"
    store = out / "divfuzz.sqlite"
    total = 24
    args = ["--cluster", cluster.scheduler_address, "--device", "cpu", "--backend", "eager", "--max-cases", str(total),
            "--max-ops", "4", "--no-minimize", "--no-live", "--seed", "3", "--out", out]
    code = f"import sys\nfrom divfuzz.fuzzer.cli.main import main\nsys.argv = ['divfuzz', 'fuzz', *{list(map(str, args))!r}]\nmain()"
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    try:
        def wait_for(n: int) -> None:
            deadline = time.time() + 300
            while len(_stored(store)) < n and driver.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            assert driver.poll() is None, f"the campaign ended before {n} cases were stored"

        wait_for(2)
        pids = client.run(os.getpid)
        os.kill(pids[sorted(pids)[0]], signal.SIGKILL)  # a node dies mid-campaign
        # The campaign goes on on what is left of the fleet: both slots store cases again, the
        # lost node's slot once its request was returned to the queue and ran elsewhere. (A count
        # of cases is no such sign: with input siblings the live slot stores 4 at a time.)
        at_kill = Counter(slot for slot, *_ in _stored(store))
        deadline = time.time() + 300
        while not all(Counter(slot for slot, *_ in _stored(store))[s] > at_kill[s] for s in (0, 1)):
            assert driver.poll() is None and time.time() < deadline, "a slot stored nothing after the node died"
            time.sleep(0.1)
        driver.send_signal(signal.SIGINT)  # then stop it, to resume below
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 2 and "interrupted" in output, output
    assert "returned to the queue" in output and "node(s) lost" in output, output
    first = _stored(store)
    assert 5 <= len(first) < total

    again = _fuzz(args, timeout=300)  # the same command resumes the run: the stored cases are skipped
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{len(first)} skipped (stored)" in again.stdout, again.stdout
    rows = _stored(store)
    assert sorted((s, i) for s, i, _, _ in rows) == [(s, i) for s in (0, 1) for i in range(total // 2)]  # every case, once
    for _, _, status, verdict in rows:  # nothing the kill or the interrupt did became a verdict
        assert status not in ("crash", "hang"), verdict
        assert "WorkerDied" not in verdict and "Aborted" not in verdict


def test_a_case_records_the_node_its_slot_moved_to(tmp_path):
    # A fleet slot whose node is lost moves (ClusterWorker.where changes); its later cases must
    # record the node they ran on, not the plan's. A real campaign and a real local worker stand
    # in for the fleet: slot 0's worker says it moved after its first case.
    from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
    from divfuzz.fuzzer.campaign.sizing import SlotDevice
    from divfuzz.fuzzer.engine.worker import Worker

    class MovingWorker(Worker):
        def __init__(self, device, extra_env=None):
            super().__init__(device, extra_env=extra_env)
            self.where, self.cases = SlotDevice("node-a/cpu", "cpu"), 0

        def run(self, request, timeout_s):
            if self.cases == 1:
                self.where = SlotDevice("node-b/cpu", "cpu")
            self.cases += 1
            return super().run(request, timeout_s)

    class StandInFleet:
        slot_devices = [SlotDevice("node-a/cpu", "cpu")]

        def worker(self, slot, device, *, extra_env=None):
            return MovingWorker(device, extra_env=extra_env)

    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="eager"), max_cases=3, workers=1,
                           minimize=False, seed=1)
    run_campaign(opts, fleet=StandInFleet())
    with sqlite3.connect(tmp_path / "divfuzz.sqlite") as db:
        assert [r[0] for r in db.execute("SELECT ran_on FROM cases ORDER BY idx")] == ["node-a/cpu", "node-b/cpu", "node-b/cpu"]


# ---- input siblings on a real Dask cluster -----------------------------------------------------
# The same campaign on one host and on a LocalCluster of 2 worker processes (2 slots either way):
# with `--inputs-per-compile` left to divfuzz (4), the fleet stores the cases one host stores, each
# drawn spec followed by its 3 siblings, which ran through its compile. Backend eager: no Inductor
# compile, so the cost is the processes' start-up.
SIBLING_ARGS = ["--device", "cpu", "--backend", "eager", "--max-cases", "16", "--max-ops", "3", "--no-minimize", "--no-live",
                "--seed", "5"]


def _cases(store: Path):
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT slot, idx, spec_digest, status, verdict_json, ran_on FROM cases WHERE run_id = 1 "
                          "ORDER BY slot, idx").fetchall()
        options = json.loads(db.execute("SELECT options_json FROM runs WHERE id = 1").fetchone()[0])
    finally:
        db.close()
    return rows, options


@pytest.fixture(scope="module")
def one_host_cases(tmp_path_factory):
    """The campaign of SIBLING_ARGS on this host with 2 slots, run once for the tests below."""
    out = tmp_path_factory.mktemp("one-host") / "out"
    r = _fuzz([*SIBLING_ARGS, "--workers", "2", "--out", out], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return _cases(out / "divfuzz.sqlite")


def _same_cases_as_one_host(fleet_rows, one_host):
    rows, options = one_host
    assert options["inputs_per_compile"] == 4  # the default, on one host
    compiled = {(s, i) for s, i, _, _, v, _ in rows if '"compile"' in v}
    assert compiled and len(compiled) < len(rows) == 16  # drawn specs compiled; their siblings ran through that compile
    assert [(s, i, d) for s, i, d, *_ in fleet_rows] == [(s, i, d) for s, i, d, *_ in rows]
    assert {(s, i) for s, i, _, _, v, _ in fleet_rows if '"compile"' in v} == compiled
    assert [st for *_, st, _, _ in fleet_rows] == [st for *_, st, _, _ in rows]


# Not slow: the guard of siblings on a fleet (about 45 s on the shared 2-core CPU, compiling nothing).
def test_a_fleet_runs_the_input_siblings_one_host_runs(local_cluster, tmp_path, one_host_cases):
    cluster, _ = local_cluster
    out = tmp_path / "out"
    r = _fuzz(["--cluster", cluster.scheduler_address, *SIBLING_ARGS, "--out", out], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows, options = _cases(out / "divfuzz.sqlite")
    assert options["inputs_per_compile"] == 4  # not forced to 1 on a fleet
    _same_cases_as_one_host(rows, one_host_cases)
    assert "graphs compiled (4.0 inputs each)" in " ".join(r.stdout.split())


# Run in one Dask worker process (`Client.run(exec, ...)`): its second group's node dies (the Dask
# worker process is SIGKILLed) once the group's first member has been judged and its siblings are
# still to run, so a half-run group is in flight when the node goes.
KILL_MID_GROUP = """
import os, signal
import divfuzz.fuzzer.campaign.cluster as node
original = node._node_worker
seen = {"groups": 0}

class DiesMidGroup:
    def __init__(self, conn):
        self.conn = conn

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def recv(self):
        reply = self.conn.recv()
        if reply.get("more"):  # a member judged, siblings left
            os.kill(os.getpid(), signal.SIGKILL)
        return reply

def node_worker(key, device, extra_env):
    worker = original(key, device, extra_env)
    seen["groups"] += 1
    if seen["groups"] == 2:
        worker.ensure_started()
        worker.conn = DiesMidGroup(worker.conn)
    return worker

node._node_worker = node_worker
"""


@pytest.mark.slow  # a LocalCluster, a node killed and restarted, and a campaign (about a minute on the shared 2-core CPU)
def test_a_node_lost_mid_group_runs_the_whole_group_again_elsewhere(local_cluster, tmp_path, one_host_cases):
    cluster, client = local_cluster
    first = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    client.run(exec, KILL_MID_GROUP, {}, workers=[first])
    out = tmp_path / "out"
    r = _fuzz(["--cluster", cluster.scheduler_address, *SIBLING_ARGS, "--out", out], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "1 node(s) lost, 4 case(s) returned to the queue" in text, text
    assert "4 cases of one compile, run again whole" in text, text
    rows, _ = _cases(out / "divfuzz.sqlite")
    _same_cases_as_one_host(rows, one_host_cases)  # every case once, the lost group's included, as on one host
    for *_, status, verdict, _ in rows:  # the kill is no verdict
        assert status not in ("crash", "hang") and "WorkerDied" not in verdict, verdict
    # The lost group's cases record the node that ran them, not the one that died.
    assert first.split("://")[1] not in " ".join(ran_on for *_, ran_on in rows)


def test_a_fleets_worker_and_a_local_worker_both_serve_the_case_worker_interface():
    # The campaign, the pool and the triage use only `CaseWorker`: a member one of them lacks
    # (a fleet's worker had no `ensure_started`, which a deadline-bounded attribution calls) would
    # be an AttributeError in the middle of a fleet's analysis.
    from types import SimpleNamespace

    from divfuzz.fuzzer.campaign.cluster import ClusterWorker
    from divfuzz.fuzzer.engine.worker import CaseWorker, Worker

    members = [name for name in dir(CaseWorker) if not name.startswith("_")] + list(CaseWorker.__annotations__)
    fleet_worker = ClusterWorker(SimpleNamespace(token="t"), SlotPlan(0, "tcp://a:1", SlotDevice("a/cpu", "cpu"), 1))
    local = Worker("cpu")
    for worker in (fleet_worker, local):
        assert not [m for m in members if not hasattr(worker, m)], type(worker).__name__
    assert fleet_worker.where == SlotDevice("a/cpu", "cpu") and local.where is None
    assert fleet_worker.output_mark() is None and local.output_mark() == 0
    fleet_worker.ensure_started()  # nothing to start from the driver


# ---- analyses on a fleet ------------------------------------------------------------------------
# Not slow: about 40 s on the shared 2-core CPU (a planted backend: no Inductor compile).
def test_a_fleet_analyses_in_a_pool_on_the_nodes_threads_the_slots_leave_free(local_cluster_two_threads, tmp_path):
    # Every case is a bug (planted `nan_first`), so every new raw key is analysed. Each node has 2
    # threads: `--workers auto` makes 1 a slot and leaves 1 to an analysis worker on that node, so
    # the analyses run in the pool beside the slots, not inline in them (before, a fleet always
    # analysed inline: on 2 H100s its slots spent 46% of their time minimizing, 0.36x the
    # graphs/s of one host's 24 slots).
    cluster, _ = local_cluster_two_threads
    out = tmp_path / "out"
    r = _fuzz(["--cluster", cluster.scheduler_address, "--device", "cpu", "--backend", "divfuzz.fuzzer.engine.planted:nan_first",
               "--max-cases", "8", "--max-ops", "2", "--inputs-per-compile", "1", "--no-live", "--seed", "2", "--out", out],
              timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "2 slots on 2 Dask worker(s)" in text and "2 Dask thread(s) left for analysis workers" in text, text
    shown = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "bench", "--breakdown", str(out)], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    analyses = [line for line in shown.stdout.splitlines() if line.startswith("analyses:")]
    assert analyses and not analyses[0].startswith("analyses: 0 run"), shown.stdout  # the pool ran them
    with sqlite3.connect(f"file:{out / 'divfuzz.sqlite'}?mode=ro", uri=True) as db:
        filed = db.execute("SELECT count(*) FROM root_causes").fetchone()[0]
        pending = db.execute("SELECT count(*) FROM pending_analyses").fetchone()[0]
    assert filed >= 1 and pending == 0  # every raw key analysed and filed by the end
    # Under auto the pool started a worker on every thread the header named (not one host's 1 for 2 slots).
    timings = json.loads((out / "divfuzz-run1-timings.json").read_text())
    assert timings["analysis_workers_own"] == 2, timings["analysis_workers_own"]


# ---- a fleet's end ------------------------------------------------------------------------------
# Not slow: about 15 s on the shared 2-core CPU (one node worker process, a planted hang).
def test_stopping_a_busy_slot_never_holds_up_its_node(local_cluster):
    # At a campaign's end every slot and analysis worker is stopped through `Client.run`, which
    # runs the call in the node's event loop. A graceful stop waits up to 10 s for the process to
    # exit; in the loop, one busy process held every other call to the node (on 2 H100s the fleet's
    # slots ended 10.6 s past the budget's work end). The stop must return at once, and a stop
    # after an abort must kill, not wait.
    from divfuzz.fuzzer.campaign import cluster
    from divfuzz.fuzzer.engine.worker import CaseRequest

    _, client = local_cluster
    fleet = cluster.Fleet.connect(client.scheduler.address, "cpu", 1)
    try:
        worker = fleet.worker(0, "cpu")
        spec = layer_norm_linear(8, 4)
        request = CaseRequest(spec, "cpu", CompileConfig(backend="divfuzz.fuzzer.engine.planted:hang"))
        got = []
        slot = threading.Thread(target=lambda: got.append(worker.run_group(request, 600.0)), daemon=True)
        slot.start()
        def busy(key):  # on the node (a nested function travels by value, not as this test module)
            import divfuzz.fuzzer.campaign.cluster as node

            w = node._NODE_WORKERS.get(key)
            return w is not None and w.process is not None and w.process.is_alive() and w.conn is not None

        deadline = time.monotonic() + 120
        while not any(client.run(busy, worker.key, workers=[worker.address]).values()):
            assert time.monotonic() < deadline, "the node's worker never started the request"
            time.sleep(0.2)
        time.sleep(1.0)  # the request reached the process, which now compiles or hangs
        started = time.monotonic()
        client.run(cluster.node_stop, worker.key, workers=[worker.address])
        assert time.monotonic() - started < 3.0  # the graceful stop waits in a thread of the node, not in its loop
        worker.abort()  # the slot's wait ends; its process is killed on the node
        slot.join(30)
        assert not slot.is_alive()
        sent = []
        worker._on_node = lambda fn: sent.append(fn.__name__)
        worker.stop()
        assert sent == ["node_kill"]  # an aborted slot's stop kills: its process may still run
    finally:
        fleet.close()
