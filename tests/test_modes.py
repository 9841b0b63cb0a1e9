"""Modes as a campaign dimension (CUDA only): a share of a CUDA campaign's graphs compile under
`max-autotune-no-cudagraphs` or `reduce-overhead`; under CUDA graphs the judged run is a replay
after the inputs changed (`CUDA_GRAPH_WARM_UPS`), so a stale static buffer is caught."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from divfuzz.fuzzer.campaign.campaign_options import CAMPAIGN_MODES, CampaignOptions
from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.spec import MODES, GraphSpec, Node, TensorSpec
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import load_spec, validate_spec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import SpecError
from divfuzz.records.severity import Severity
from divfuzz.reports.issue_script import _compile_call
from divfuzz.reports.repro import render_repro

STALE = CompileConfig(backend="divfuzz.fuzzer.engine.planted:stale_second_call")


def _exp(mode: str) -> GraphSpec:
    return validate_spec(GraphSpec(inputs=(TensorSpec("x0", (8, 6), "float32"),),
                                   nodes=(Node("v1", "exp", ("x0",), (), "float32", (8, 6)),), outputs=("v1",), mode=mode))


def test_a_mode_is_part_of_the_spec_and_of_what_it_compiles_under():
    spec = _exp("reduce-overhead")
    assert load_spec(spec.to_json()) == spec and spec.to_dict()["schema_version"] == 2
    assert "mode" not in _exp("").to_dict()
    with pytest.raises(SpecError, match="mode"):
        load_spec(json.dumps(spec.to_dict() | {"mode": "fastest"}))
    assert CompileConfig().for_graph("", "reduce-overhead").mode == "reduce-overhead"
    assert "MODE = 'reduce-overhead'" in render_repro(spec, device="cuda", config=CompileConfig(), title="t")
    assert _compile_call(CompileConfig().for_graph("", "max-autotune-no-cudagraphs"))[1] == \
        "torch.compile(model, mode='max-autotune-no-cudagraphs')"


def test_the_judged_run_under_cuda_graphs_is_a_replay_on_changed_inputs():
    # Once alone, a stale buffer is right (its first call); after the warm-ups, it is caught.
    assert execute_case(_exp(""), "cpu", STALE).status.value == "ok"
    verdict = execute_case(_exp("reduce-overhead"), "cpu", STALE)
    assert severity_of(verdict).severity is Severity.BUG


def _modes(strategy, n: int = 120) -> Counter:
    seen: Counter = Counter()

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate],
              derandomize=True)
    @given(strategy)
    def draw(spec):
        seen[spec.mode] += 1

    draw()
    return seen


def test_a_cuda_campaign_under_inductor_draws_each_mode_and_a_cpu_one_none(tmp_path: Path):
    cuda = _modes(CampaignOptions(device="cuda", out_dir=tmp_path).strategy(0))
    assert set(cuda) == {"", *CAMPAIGN_MODES} and set(CAMPAIGN_MODES) <= set(MODES)
    assert all(cuda[m] >= 0.05 * sum(cuda.values()) for m in CAMPAIGN_MODES), cuda
    assert set(_modes(CampaignOptions(device="cpu", out_dir=tmp_path).strategy(0), 40)) == {""}
    assert set(_modes(CampaignOptions(device="cuda", out_dir=tmp_path, config=CompileConfig(backend="aot_eager")).strategy(0), 40)) == {""}


@pytest.mark.gpu
@pytest.mark.parametrize("mode", CAMPAIGN_MODES)
def test_each_mode_on_real_inductor_on_cuda(mode):
    verdict = execute_case(_exp(mode), "cuda", CompileConfig())
    reason = severity_of(verdict)
    assert verdict.status.value in ("ok", "diverged") and (reason is None or reason.severity is not Severity.BUG), verdict


@pytest.mark.gpu
def test_a_stale_buffer_under_cuda_graphs_is_caught_on_cuda():
    assert torch.cuda.is_available()
    assert severity_of(execute_case(_exp("reduce-overhead"), "cuda", STALE)).severity is Severity.BUG
