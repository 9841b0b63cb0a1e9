"""One builder for a campaign's options (`divfuzz.fuzzer.campaign.campaign_options`): the default
number of inputs per compile is decided there, and each command's own choices are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import divfuzz.fuzzer.campaign.loop as loop
from divfuzz.fuzzer.campaign import bench
from divfuzz.fuzzer.campaign import campaign_options
from divfuzz.fuzzer.gate.gate_fuzz import gate_fuzz
from divfuzz.generators.input_siblings import DEFAULT_INPUTS_PER_COMPILE
from divfuzz.records.config import CompileConfig


def test_default_inputs_per_compile_follows_the_oracle_and_against(tmp_path):
    def built(**kw):
        return campaign_options.build(device="cpu", out_dir=tmp_path, inputs_per_compile=None, minimize=True, workers=2, **kw)

    assert built().inputs_per_compile == DEFAULT_INPUTS_PER_COMPILE
    assert built(oracle="perf").inputs_per_compile == 1
    assert built(against=CompileConfig(backend="aot_eager")).inputs_per_compile == 1
    named = campaign_options.build(device="cpu", out_dir=tmp_path, inputs_per_compile=2, minimize=False, workers=1, seed=5, max_ops=3)
    assert (named.inputs_per_compile, named.minimize, named.workers, named.seed, named.max_ops) == (2, False, 1, 5, 3)
    assert named.config == CompileConfig()


class _Built(Exception):
    pass


def _capture(monkeypatch, where):
    """Record the options `where.run_campaign` is given, and stop there."""
    seen = []

    def fake_run_campaign(opts, *args, **kwargs):
        seen.append(opts)
        raise _Built

    monkeypatch.setattr(where, "run_campaign", fake_run_campaign)
    return seen


def test_the_gate_campaign_keeps_its_own_choices(monkeypatch):
    seen = _capture(monkeypatch, loop)  # gate_fuzz imports the loop when it runs
    with pytest.raises(_Built):
        gate_fuzz(device="cpu", config=CompileConfig(), seed=3, budget_s=None, cases=7, timeout_s=30.0, repro_dir=None,
                  known=(), corpus_buckets=set())
    (opts,) = seen
    assert (opts.inputs_per_compile, opts.minimize, opts.workers) == (1, False, 1)
    assert (opts.seed, opts.max_cases, opts.timeout_s, opts.budget_from) == (3, 7, 30.0, None)


def test_the_bench_campaign_keeps_its_own_choices(monkeypatch):
    seen = _capture(monkeypatch, bench)
    with pytest.raises(_Built):
        bench.run_bench("cpu", 5, seed=2, workers=2)
    (opts,) = seen
    assert (opts.inputs_per_compile, opts.minimize, opts.workers, opts.profile, opts.max_cases) == (1, False, 2, True, 5)
    assert isinstance(opts.out_dir, Path)
