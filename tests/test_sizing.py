"""`--workers auto` and GPU pinning: the sizing rule as a pure function (no GPU needed), the
probe of this host, and the CLI's option. Fast: nothing here compiles."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.sizing import (
    GIB,
    GPU_HOST_CORE_FRACTION,
    HostResources,
    gpu_free_bytes_from_smi,
    parse_nvidia_smi,
    probe_host,
    size_workers,
    slot_devices,
    usable_cores,
)
from divfuzz.records.errors import ConfigError


def test_cpu_only_picks_one_worker_per_core_when_memory_allows():
    assert size_workers(HostResources(cores=16, host_available_bytes=64 * GIB), cuda=False).workers == 16
    assert size_workers(HostResources(cores=2, host_available_bytes=None), cuda=False).workers == 2


def test_cpu_only_is_capped_by_host_memory_and_says_so():
    sizing = size_workers(HostResources(cores=64, host_available_bytes=6 * GIB), cuda=False)
    assert sizing.workers == 4 and "host memory" in sizing.reason


def test_a_starved_host_still_gets_one_worker():
    assert size_workers(HostResources(cores=1, host_available_bytes=100 * 2**20), cuda=False).workers == 1
    assert size_workers(HostResources(cores=4, gpu_free_bytes=(GIB // 2,)), cuda=True).workers == 1


def test_gpu_host_is_bounded_by_cores_because_compiling_is_cpu_work():
    # The H100 host of issue 11: 16 cores, one GPU with ~78 GiB free -> 12 (the knee measured there).
    sizing = size_workers(HostResources(cores=16, host_available_bytes=120 * GIB, gpu_free_bytes=(78 * GIB,)), cuda=True)
    assert sizing.workers == int(16 * GPU_HOST_CORE_FRACTION) == 12
    assert "cores" in sizing.reason


def test_a_nearly_full_gpu_caps_the_workers():
    sizing = size_workers(HostResources(cores=64, gpu_free_bytes=(5 * GIB,)), cuda=True)
    assert sizing.workers == 2 and "GiB free" in sizing.reason


def test_several_gpus_get_the_same_number_of_slots_each():
    # 32 cores -> 24 by cores; 2 GPUs, the emptier with 9 GiB -> 4 each -> 8 in all.
    assert size_workers(HostResources(cores=32, gpu_free_bytes=(80 * GIB, 9 * GIB)), cuda=True).workers == 8
    # 10 cores -> 7 by cores, rounded down to a multiple of 2 GPUs.
    assert int(10 * GPU_HOST_CORE_FRACTION) == 7
    assert size_workers(HostResources(cores=10, gpu_free_bytes=(80 * GIB, 80 * GIB)), cuda=True).workers == 6


def test_bad_host_figures_are_named():
    with pytest.raises(ConfigError, match="cores=0"):
        size_workers(HostResources(cores=0), cuda=False)
    with pytest.raises(ConfigError, match="gpu_free_bytes"):
        size_workers(HostResources(cores=8), cuda=True)


def test_probe_of_this_cpu_host_reads_its_cores_and_memory():
    host = probe_host("cpu")
    assert host.cores == usable_cores() >= 1 and host.gpu_free_bytes == ()
    assert host.host_available_bytes is None or host.host_available_bytes > 0
    assert 1 <= size_workers(host, cuda=False).workers <= host.cores


def test_cuda_slots_are_pinned_round_robin_and_each_worker_sees_one_gpu():
    slots = slot_devices("cuda", 5, gpu_count=2)
    assert [s.name for s in slots] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "0", "1", "0"]
    assert {s.worker_device for s in slots} == {"cuda"}


def test_a_narrowed_host_stays_narrowed():
    # CUDA_VISIBLE_DEVICES=3,5 in the driver: its cuda:1 is physical GPU 5.
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slot_devices("cuda", 3, gpu_count=2, visible="3,5")] == ["3", "5", "3"]
    one = slot_devices("cuda:1", 3, gpu_count=2, visible="3,5")
    assert {s.name for s in one} == {"cuda:1"} and {s.env["CUDA_VISIBLE_DEVICES"] for s in one} == {"5"}


def test_cpu_slots_are_not_pinned_and_a_missing_gpu_is_named():
    assert {(s.name, s.worker_device, tuple(s.env)) for s in slot_devices("cpu", 3, gpu_count=0)} == {("cpu", "cpu", ())}
    with pytest.raises(ConfigError, match="GPU 2"):
        slot_devices("cuda:2", 1, gpu_count=2, visible="0,1")


def test_fuzz_defaults_to_auto_and_prints_the_count_it_picked(tmp_path):
    from divfuzz.fuzzer.cli.main import main

    result = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--backend", "eager", "--no-minimize", "--no-live",
                                       "--max-cases", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    picked = size_workers(probe_host("cpu"), cuda=False)
    assert f"--workers auto: {picked.workers} worker" in " ".join(result.output.split())  # the figures in the reason may move
    assert "limited by" in result.output and 1 <= picked.workers <= usable_cores()


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5"])
def test_a_bad_workers_value_exits_2_naming_it(tmp_path, value):
    from divfuzz.fuzzer.cli.main import main

    result = CliRunner().invoke(main, ["fuzz", "--device", "cpu", "--workers", value, "--out", str(tmp_path)])
    assert result.exit_code == 2 and repr(value) in result.output and not any(tmp_path.iterdir())


@pytest.mark.gpu
def test_a_cuda_campaign_spreads_its_slots_over_every_visible_gpu_and_records_each(tmp_path):
    import sqlite3

    import torch

    from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
    from divfuzz.fuzzer.store import STORE_NAME
    from divfuzz.records.config import CompileConfig

    gpus = torch.cuda.device_count()
    run_campaign(CampaignOptions(device="cuda", out_dir=tmp_path, config=CompileConfig(backend="eager"),
                                 max_cases=2 * gpus, workers=2 * gpus, seed=4))
    with sqlite3.connect(tmp_path / STORE_NAME) as db:
        rows = db.execute("SELECT slot, ran_on, status FROM cases").fetchall()
    assert {on for _, on, _ in rows} == {f"cuda:{i}" for i in range(gpus)}
    assert all(on == f"cuda:{slot % gpus}" for slot, on, _ in rows)
    assert {s for *_, s in rows} <= {"ok", "nondeterministic"}  # a badly pinned worker would fail on its device


def test_auto_workers_resume_an_unfinished_run_with_its_own_count_not_a_new_run(tmp_path):
    # `--workers auto` (or a fleet's slot count) can change between a run and its resume: another
    # host, a node lost. The same seed and slot count give the same cases, so the resume takes the
    # interrupted run's count; an explicit --workers that differs starts a new run, as before.
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    from divfuzz.fuzzer.campaign.loop import CampaignOptions
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.fuzzer.campaign.sizing import probe_host, size_workers
    from divfuzz.generators.input_siblings import DEFAULT_INPUTS_PER_COMPILE
    from divfuzz.records.config import CompileConfig

    # The earlier run's count is one worker, unless that is what auto gives here (one worker starts
    # faster than three: this test is in CI's sample).
    auto = size_workers(probe_host("cpu"), cuda=False).workers
    count = 1 if auto != 1 else 2
    earlier = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="eager"), seed=5, max_cases=3,
                              workers=count, inputs_per_compile=DEFAULT_INPUTS_PER_COMPILE)  # the CLI's default
    store = Store(tmp_path / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=5, device="cpu", config=earlier.config.to_dict(), options=earlier.identity(),
                                    versions={})
        store.finish_run(run_id, "interrupted")
    finally:
        store.close()
    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--backend", "eager", "--max-cases", "3", "--seed", "5",
           "--no-minimize", "--no-live", "--out", str(tmp_path)]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    workers = f"{count} worker{'s' if count != 1 else ''}"
    assert f"{workers} (resuming run 1, which ran with {count})" in said and "run 1 (resumed)" in said, said
    with sqlite3.connect(tmp_path / STORE_NAME) as db:
        assert db.execute("SELECT id, status FROM runs").fetchall() == [(1, "finished")]
        assert {r[0] for r in db.execute("SELECT slot FROM cases")} == set(range(count))  # the run's slots, no other


def _worker_facts(envs: dict[str, dict]) -> dict[str, dict]:
    """`worker_facts` from a fresh CPU worker started with each named extra environment."""
    from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget

    facts = {}
    for name, env in envs.items():
        worker = Worker("cpu", extra_env=env)
        try:
            outcome = worker.call(WorkerTarget.WORKER_FACTS, {}, 120)
        finally:
            worker.stop()
        assert outcome.error is None, outcome.error
        facts[name] = outcome.value
    return facts


def test_a_campaign_worker_gets_its_share_of_the_compile_threads_and_a_user_setting_is_kept():
    # Inductor sizes its compile pool from the host's cores in every process: W workers would start
    # W pools of that size. A worker given its share of the cores gets as many compile threads.
    facts = _worker_facts({"share": {"DIVFUZZ_WORKER_THREADS": "1"},
                           "user": {"DIVFUZZ_WORKER_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "3"}})
    assert (facts["share"]["torch_threads"], facts["share"]["compile_threads"]) == (1, 1)
    assert facts["user"]["compile_threads"] == 3


def test_a_worker_compiles_without_triton_line_info_and_with_its_imports_frozen_and_a_user_setting_is_kept(monkeypatch):
    # Both cut a compile's CPU and neither its bits (worker._serve): Triton's line tables are
    # debug info only, and the objects the imports left are out of the collector's scans.
    monkeypatch.delenv("TRITON_DISABLE_LINE_INFO", raising=False)  # the runner's own settings are not the default
    monkeypatch.delenv("DIVFUZZ_WORKER_GC_FREEZE", raising=False)
    facts = _worker_facts({"default": {}, "user": {"TRITON_DISABLE_LINE_INFO": "0"}, "nofreeze": {"DIVFUZZ_WORKER_GC_FREEZE": "0"}})
    assert facts["default"]["triton_disable_line_info"] == "1"
    assert facts["user"]["triton_disable_line_info"] == "0"
    # torch's import alone leaves hundreds of thousands of objects; a worker that froze none says 0
    assert facts["default"]["frozen_objects"] > 100_000, facts["default"]
    assert facts["nofreeze"]["frozen_objects"] == 0  # what `bench --before-after`'s legs without the cuts run


SMI_TWO_H100 = "NVIDIA H100 80GB HBM3, 80000\nNVIDIA H100 80GB HBM3, 1024\n"


@pytest.mark.parametrize("text, indices, visible, expected", [
    (SMI_TWO_H100, [0, 1], 2, [80000 * 2**20, 1024 * 2**20]),
    (SMI_TWO_H100, [1], 2, [1024 * 2**20]),
    # CUDA sees another number of GPUs than nvidia-smi: its numbering is not nvidia-smi's
    (SMI_TWO_H100, [0], 1, None),
    # unlike models: CUDA orders them fastest first, nvidia-smi by PCI bus
    ("NVIDIA H100 80GB HBM3, 80000\nNVIDIA A10, 20000\n", [0, 1], 2, None),
    ("No devices were found\n", [0], 1, None),
    ("NVIDIA H100, [N/A]\n", [0], 1, None),
    (SMI_TWO_H100, [2], 2, None),
])
def test_nvidia_smi_stands_in_for_the_probe_only_where_its_numbering_is_cudas(text, indices, visible, expected):
    assert parse_nvidia_smi(text, indices, visible_count=visible) == expected


def test_nvidia_smi_is_not_asked_when_cuda_visible_devices_renumbers_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_free_bytes_from_smi([0], visible_count=1) is None


@pytest.mark.gpu
def test_nvidia_smi_reads_the_free_memory_the_probe_worker_reads():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget

    indices = list(range(torch.cuda.device_count()))
    from_smi = gpu_free_bytes_from_smi(indices, visible_count=len(indices))
    if from_smi is None:
        pytest.skip("nvidia-smi cannot stand in on this host")
    probe = Worker("cpu")
    try:
        from_worker = probe.call(WorkerTarget.GPU_FREE_BYTES, {"indices": indices}, 120.0).value
    finally:
        probe.stop()
    # The probe's own CUDA context (~0.5 GiB) is the difference.
    assert all(abs(a - b) < GIB for a, b in zip(from_smi, from_worker)), (from_smi, from_worker)
