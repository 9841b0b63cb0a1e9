"""`divfuzz fuzz --cluster`: slots on a real Dask cluster (divfuzz.fuzzer.campaign.cluster).

Cheap tests first (no cluster, no compile): the slot plan and GPU pinning as pure functions, the
checks of --cluster / --cluster-file, the missing extra (a subprocess that cannot import
`distributed`), the fleet line of the live view. Then a real `distributed.LocalCluster` of 2
worker processes: a campaign in which one Dask worker process is SIGKILLed mid-run stores every
case exactly once, none of them a finding made by the kill, and a second run resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.cluster import (
    NodeInfo,
    check_address,
    fleet_device,
    plan_slots,
    read_scheduler_file,
    request_from_message,
)
from divfuzz.fuzzer.engine.worker import CaseRequest
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
@pytest.fixture
def local_cluster():
    """2 Dask worker processes, 1 thread each, allowed to spawn divfuzz's workers (daemon off)."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    # Held for the fixture's life, not only at start: the nanny restarts a killed worker with the
    # config in force then, and a daemonic worker cannot start divfuzz's processes.
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = distributed.Client(cluster, set_as_default=False)
        try:
            yield cluster, client
        finally:
            client.close()
            cluster.close()


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
        wait_for(len(_stored(store)) + 3)  # the campaign goes on on what is left of the fleet
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
    assert f"{len(first)} stored cases skipped" in again.stdout, again.stdout
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
