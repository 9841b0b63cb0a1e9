"""The fleet driver's own cost, without compiling anything: N slots whose node work is a sleep.

    python scripts/bench_fleet_driver.py [SLOTS=24] [BUDGET_S=40] [NODE_S=1.5]

Runs the same campaign (seed 1, 4 inputs per compile, backend eager) twice on this host: `direct`,
each slot's worker a stand-in that sleeps NODE_S per group (the pipe of one host, without its
process), and `fleet`, through a local Dask cluster started as `bench --legs dask` starts one (a
scheduler and 2 workers, SLOTS/2 threads each) whose `node_run` sleeps NODE_S and answers OK
verdicts. The node's time is then the same on both, and uses no CPU: what differs is the driver
(Hypothesis, judging, the store) and what the Dask path adds to each request. Prints graphs/s, the
driver's generate / store / fleet_round_trip per case (as `bench --breakdown` does), and, for the
fleet, each group's submit -> node and node -> slot milliseconds. Issue 41 measured with it:
a slot polled its future every 0.5 s (600 ms per group of round trip at 24 slots on 2 shared
cores); woken by the future's callback instead, 70 to 90 ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from divfuzz.fuzzer.campaign import bench_legs
from divfuzz.fuzzer.campaign.cluster import Fleet, read_scheduler_file
from divfuzz.fuzzer.campaign import campaign_options
from divfuzz.fuzzer.campaign.loop import run_campaign
from divfuzz.fuzzer.campaign.sizing import SlotDevice
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict

NODE = """
import time
import divfuzz.fuzzer.campaign.cluster as node
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Verdict

def node_run(key, device, extra_env, message, timeout_s):
    t0, t_in = time.perf_counter(), time.time()
    time.sleep({node_s})
    first = Verdict(Status.OK, timings=(("compile", 1.0),)).to_dict()
    rest = [[Verdict(Status.OK).to_dict(), 0.3]] * len(message.get("siblings", ()))
    return {{"verdicts": [[first, 0.5], *rest], "startup_s": 0.0, "output": "", "node_s": time.perf_counter() - t0,
            "t_in": t_in, "t_out": time.time()}}

node.node_run = node_run
"""


class SleepingWorker:
    """One host's worker, as the driver sees it, with its case a sleep."""

    startup_s, last_output, aborted = 0.0, "", False

    def __init__(self, node_s: float):
        self.node_s = node_s

    def run_group(self, request, timeout_s):
        time.sleep(self.node_s)
        return [(Verdict(Status.OK, timings=(("compile", 1.0),)), 0.5)] + [(Verdict(Status.OK), 0.3)] * len(request.siblings)

    def run(self, request, timeout_s):
        return self.run_group(request, timeout_s)[0][0]

    def stop(self):
        pass

    def abort(self):
        self.aborted = True

    kill = abort


class DirectSlots:
    def __init__(self, slots: int, node_s: float):
        self.slot_devices, self.node_s = [SlotDevice("here/cpu", "cpu")] * slots, node_s

    def worker(self, slot, device, *, extra_env=None):
        return SleepingWorker(self.node_s)


def timed_requests(spans: list) -> None:
    """Each answered group's submit -> node start and node end -> slot, from the node's clock (same host)."""
    # lazy: a measuring script: the patch is its own, applied only here
    from divfuzz.fuzzer.campaign import cluster

    original = cluster.ClusterWorker._remote

    def remote(self, task, timeout_s, cases=1):
        sent = time.time()
        reply = original(self, task, timeout_s, cases)
        if isinstance(reply, dict) and "t_in" in reply:
            spans.append((reply["t_in"] - sent, time.time() - reply["t_out"]))
        return reply

    cluster.ClusterWorker._remote = remote


def campaign(mode: str, out: Path, slots: int, budget_s: float, fleet) -> str:
    opts = campaign_options.build(device="cpu", out_dir=out, config=CompileConfig(backend="eager"), budget_s=budget_s,
                                  workers=slots, minimize=False, seed=1, inputs_per_compile=4, max_ops=6)
    t0 = time.monotonic()
    p = run_campaign(opts, fleet=fleet).progress
    span = time.monotonic() - t0
    driver = json.loads((out / "divfuzz-run1-timings.json").read_text())["driver_timings"]
    per_case = ", ".join(f"{k} {driver[k] / max(1, p.cases) * 1000:.1f}" for k in ("generate", "store", "fleet_round_trip") if k in driver)
    return f"{mode}: {p.graphs} graphs, {p.cases} cases in {span:.1f} s = {p.graphs / span:.2f} graphs/s; driver ms per case: {per_case}"


def main() -> None:
    slots = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    budget_s = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    node_s = float(sys.argv[3]) if len(sys.argv) > 3 else 1.5
    # lazy: the optional extra [cluster], needed only here
    import distributed

    with tempfile.TemporaryDirectory(prefix="divfuzz-fleet-driver-") as tmp:
        root = Path(tmp)
        print(campaign("direct", root / "direct", slots, budget_s, DirectSlots(slots, node_s)), flush=True)
        cores = tuple(bench_legs.usable_core_ids())
        leg = bench_legs.Leg("dask", ("0", "1"), (cores, cores))  # 2 nodes; CUDA_VISIBLE_DEVICES is not read on the CPU
        (root / "fleet").mkdir()
        with bench_legs.local_fleet(leg, root / "fleet", dict(os.environ), max(1, slots // 2)) as scheduler_file:
            client = distributed.Client(scheduler_file=str(scheduler_file), set_as_default=False)
            client.run(exec, NODE.format(node_s=node_s), {})
            client.close()
            spans: list = []
            timed_requests(spans)
            fleet = Fleet.connect(read_scheduler_file(scheduler_file), "cpu", slots)
            with contextlib.closing(fleet):
                print(campaign("fleet", root / "fleet" / "out", slots, budget_s, fleet))
            if spans:
                print(f"fleet, per group: submit -> node {sum(s for s, _ in spans) / len(spans) * 1000:.1f} ms, "
                      f"node -> slot {sum(s for _, s in spans) / len(spans) * 1000:.1f} ms ({len(spans)} groups)")


if __name__ == "__main__":
    main()
