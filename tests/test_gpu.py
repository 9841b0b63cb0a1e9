"""The same pipeline on a CUDA GPU with the real Inductor (Triton kernels). Skipped without CUDA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig
from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.records.outcomes import FindingKind, Status
from divfuzz.oracles.findings import finding_of
from seed_specs import e8m0, layer_norm_linear, sigmoid_gate, unary_bf16

pytestmark = pytest.mark.gpu


def test_layer_norm_linear_diverges_on_cuda_and_aot_eager_matches():
    spec = layer_norm_linear(rows=2048)
    assert finding_of(execute_case(spec, "cuda", CompileConfig())).kind is FindingKind.BF16_ULP
    assert execute_case(spec, "cuda", CompileConfig("aot_eager")).status is Status.OK


def test_sigmoid_gate_on_cuda_and_emulate_precision_casts():
    spec = sigmoid_gate()
    assert finding_of(execute_case(spec, "cuda", CompileConfig())).kind is FindingKind.BF16_ULP
    emulated = execute_case(spec, "cuda", CompileConfig().with_inductor(emulate_precision_casts=True))
    assert emulated.status is Status.OK


def test_gelu_tanh_bf16_matches_on_cuda():
    assert execute_case(unary_bf16("gelu_tanh"), "cuda", CompileConfig()).status is Status.OK


def test_e8m0_flips_are_classified_on_cuda():
    verdict = execute_case(e8m0(rows=512, dim=1024), "cuda", CompileConfig())
    (out,) = verdict.outputs
    assert out.int_cmp.unknown_flips == 0
    assert out.int_cmp.boundary_flips + out.int_cmp.gross_flips == out.int_cmp.flips


def test_planted_bugs_are_caught_on_cuda(tmp_path):
    for backend, kinds in (("divfuzz.fuzzer.engine.planted:ulp_bump", {"bf16-ulp"}), ("divfuzz.fuzzer.engine.planted:compile_error", {"compile-error"})):
        opts = CampaignOptions(device="cuda", out_dir=tmp_path / backend.split(":")[1], max_cases=4, seed=3,
                               dtypes=("bfloat16",), config=CompileConfig(backend=backend))
        result = run_campaign(opts)
        store = Store(opts.out_dir / STORE_NAME)
        buckets = store.buckets(run_id=result.run_id)
        store.close()
        found = {b.key.kind for b in buckets}
        assert kinds <= found, (backend, [(str(b.key), b.severity_reason) for b in buckets])


def test_cuda_campaign_writes_repros_that_exit_1(tmp_path):
    # Drawn from the sigmoid-gate family in bf16, which Inductor fuses without eager's intermediate
    # rounding on CUDA (a quarter of the elements differ): 8 cases of the whole op set drew none
    # that differ once issue 24 grew it (H100, 2026-11-24).
    opts = CampaignOptions(device="cuda", out_dir=tmp_path, max_cases=8, seed=11, dtypes=("bfloat16",), ops=("gate",))
    result = run_campaign(opts)
    store = Store(tmp_path / STORE_NAME)
    buckets = store.buckets(run_id=result.run_id)
    store.close()
    assert buckets
    for b in buckets[:3]:
        if b.key.kind in ("hang", "crash"):
            continue
        proc = subprocess.run([sys.executable, str(Path(b.folder) / "repro.py")], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1, proc.stdout[-1500:] + proc.stderr[-1500:]


def test_a_reduction_compiled_for_comparison_times_no_config_and_a_timed_one_does():
    """`records.config.REPRODUCIBLE`: a compared compile builds one config per reduction kernel, so the
    autotuner times none and the bits cannot follow a timing; a timed compile (the perf oracle)
    keeps torch's default and times the candidates. Row sums and a row softmax, forward and
    backward, in fp32."""
    import torch
    from torch._dynamo.utils import compilation_time_metrics

    from divfuzz.fuzzer.engine.compile import compiled

    def graph(x):
        return x.softmax(-1) * x.sum(-1, keepdim=True)

    def run(timed: bool):
        torch.manual_seed(0)
        x = torch.randn(512, 3000, device="cuda", requires_grad=True)
        with compiled(graph, CompileConfig().with_inductor(fx_graph_cache=False, autotune_local_cache=False), timed=timed) as fn:
            compilation_time_metrics.clear()  # (Dynamo's reset, on entering, may clear it too)
            out = fn(x)
            out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
            benchmarks = len(compilation_time_metrics.get("CachingAutotuner.benchmark_all_configs", []))
        return [out.detach(), x.grad], benchmarks

    _, timed_benchmarks = run(timed=True)
    first, compared_benchmarks = run(timed=False)
    again, _ = run(timed=False)
    assert timed_benchmarks > 0 and compared_benchmarks == 0, (timed_benchmarks, compared_benchmarks)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_pointwise_kernels_compiled_for_comparison_are_not_timed_and_give_the_same_bits():
    """`records.config.NUMERICS_NEUTRAL`: a compared compile builds one config per pointwise kernel and
    times none (the autotuner's benchmark timer does not move), with the bits of torch's default
    compile, forward and backward, on a 1-D and a 2-D (transposing) pointwise graph."""
    import torch
    from torch._dynamo.utils import compilation_time_metrics

    from divfuzz.fuzzer.engine.compile import compiled

    def graph(x, y):
        return (torch.nn.functional.gelu(x) * y.sigmoid() + x.t().contiguous().t()).tanh()

    def run(timed: bool):
        torch.manual_seed(0)
        x = torch.randn(384, 640, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = torch.randn(384, 640, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with compiled(graph, CompileConfig().with_inductor(fx_graph_cache=False, autotune_local_cache=False), timed=timed) as fn:
            compilation_time_metrics.clear()  # (Dynamo's reset, on entering, may clear it too)
            out = fn(x, y)
            out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
            benchmarks = len(compilation_time_metrics.get("CachingAutotuner.benchmark_all_configs", []))
        return [out.detach(), x.grad, y.grad], benchmarks

    tuned, tuned_benchmarks = run(timed=True)
    compared, compared_benchmarks = run(timed=False)
    assert tuned_benchmarks > 0 and compared_benchmarks == 0, (tuned_benchmarks, compared_benchmarks)
    for name, a, b in zip(("out", "grad x", "grad y"), tuned, compared):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), f"{name}: {(a != b).sum().item()} elements differ"


def test_cuda_workers_forked_from_the_warm_template_run_cases_as_spawned_ones_do(monkeypatch):
    # The template imports torch and Dynamo but must not initialise CUDA: a forked child could not.
    from divfuzz.fuzzer.engine import warm_template
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker

    # A template of its own: one that earlier tests of this process started under another
    # environment is (rightly) refused for this one ("the environment changed since ...").
    warm_template.stop()
    monkeypatch.setattr(warm_template, "_state", {})
    request = CaseRequest(layer_norm_linear(256), "cuda", CompileConfig())
    verdicts = {}
    extra_env = {"DIVFUZZ_WORKER_THREADS": "2"}
    for kind, warm in (("ForkServerProcess", "1"), ("SpawnProcess", "0")):
        monkeypatch.setenv("DIVFUZZ_WARM_WORKERS", warm)
        worker = Worker("cuda", extra_env=extra_env)
        try:
            worker.start()
            assert type(worker.process).__name__ == kind, warm_template.refusal("cuda", extra_env)
            verdicts[kind] = worker.run(request, 300)
        finally:
            worker.stop()
    warm_template.stop()  # this test's template goes with it
    forked, spawned = verdicts["ForkServerProcess"], verdicts["SpawnProcess"]
    assert forked.status in (Status.OK, Status.DIVERGED) and forked.outputs, forked.to_dict()
    assert forked.to_dict() | {"timings": {}} == spawned.to_dict() | {"timings": {}}


@pytest.mark.parametrize("spec", [e8m0(rows=256, dim=512), layer_norm_linear(rows=512), sigmoid_gate(rows=512)],
                         ids=["e8m0", "layer-norm-linear", "sigmoid-gate"])
def test_input_siblings_through_one_cuda_compile_get_the_verdicts_of_their_own_compiles(spec):
    # Triton kernels are specialised on shapes, dtypes and alignment, never values: a sibling run
    # through the drawn spec's compile gets the verdict a compile of its own gives.
    from divfuzz.fuzzer.engine.execute import execute_group
    from divfuzz.generators.input_siblings import input_siblings

    group = [spec, *input_siblings(spec, 4)]
    verdicts = []
    execute_group(group, "cuda", CompileConfig(), on_verdict=verdicts.append)
    alone = [execute_case(s, "cuda", CompileConfig()) for s in group]
    grouped = [{k: v for k, v in x.to_dict().items() if k != "timings"} for x in verdicts]
    fresh = [{k: v for k, v in x.to_dict().items() if k != "timings"} for x in alone]
    differ = [(s.recipe.kind, k, g.get(k), f.get(k)) for s, g, f in zip(group, grouped, fresh) for k in g.keys() | f.keys()
              if g.get(k) != f.get(k)]
    assert not differ, str(differ)[:3000]
    assert all("compile" not in dict(v.timings) for v in verdicts[1:])
