"""One compile, several inputs: a drawn spec's input siblings (`divfuzz.generators.input_siblings`)
run through its compile (`execute_group`, `Worker.run_group`) and are stored as cases of their own.

The real Inductor proves a sibling's verdict is the one a compile of its own gives; a planted
bug that only infinite values meet proves a sibling finds what the drawn inputs hide.
"""

from __future__ import annotations

import sqlite3

import pytest
import torch
from hypothesis import strategies as st

from divfuzz.fuzzer.campaign import loop
from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.engine.execute import execute_case, execute_group
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.generators.input_siblings import MAX_INPUTS_PER_COMPILE, input_siblings, same_graph
from divfuzz.generators.shape_siblings import SHAPE_SIBLINGS, shape_siblings
from divfuzz.generators.spec import RECIPE_KINDS, GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError
from seed_specs import e8m0, unary_bf16


def _without_timings(verdict) -> dict:
    d = verdict.to_dict()
    d.pop("timings", None)
    return d


def _relu_fp32(recipe: str = "normal") -> GraphSpec:
    return GraphSpec(inputs=(TensorSpec("x0", (8, 16), "float32"),),
                     nodes=(Node("v1", "relu", ("x0",), (), "float32", (8, 16)),), outputs=("v1",),
                     recipe=InputRecipe(recipe, 5))


def test_siblings_are_the_same_graph_under_other_recipes_and_a_function_of_the_spec():
    spec = e8m0(16, 16)
    siblings = input_siblings(spec, 4)
    assert len(siblings) == 3
    kinds = [s.recipe.kind for s in siblings]
    assert len(set(kinds)) == 3 and spec.recipe.kind not in kinds
    assert all(s.recipe.seed == spec.recipe.seed and same_graph(spec, s) for s in siblings)
    assert input_siblings(spec, 4) == siblings  # no state: the same spec, the same siblings
    assert input_siblings(spec, 1) == ()
    every = input_siblings(spec, MAX_INPUTS_PER_COMPILE)
    assert {s.recipe.kind for s in every} | {spec.recipe.kind} == set(RECIPE_KINDS)
    assert not same_graph(spec, e8m0(16, 32))
    with pytest.raises(ValueError):
        input_siblings(spec, MAX_INPUTS_PER_COMPILE + 1)


@pytest.mark.parametrize("spec", [e8m0(64, 64), unary_bf16("gelu", 32, 48)], ids=["e8m0", "gelu-bf16"])
def test_a_sibling_run_through_the_drawn_specs_compile_gets_the_verdict_of_its_own_compile(spec):
    # Real Inductor on the CPU: the group compiles once; each sibling's verdict (timings aside)
    # equals a fresh execute_case of that sibling, which compiles it alone.
    # One torch thread, as a campaign's CPU workers on a 2-core host: the GELU -> E8M0 chain's eager
    # runs differ between themselves on more threads (then nondeterministic: the group ends there).
    group = [spec, *input_siblings(spec, 3)]
    verdicts = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert execute_group(group, "cpu", CompileConfig(), on_verdict=verdicts.append) == 3
        alone = [execute_case(s, "cpu", CompileConfig()) for s in group]
    finally:
        torch.set_num_threads(threads)
    assert [_without_timings(v) for v in verdicts] == [_without_timings(v) for v in alone]
    spans = [dict(v.timings) for v in verdicts]
    assert "compile" in spans[0] and all("compile" not in s and "compiled_run" in s for s in spans[1:])


def test_a_group_of_other_graphs_is_refused():
    with pytest.raises(ValueError, match="same graph"):
        execute_group([e8m0(16, 16), e8m0(16, 32)], "cpu", CompileConfig(), on_verdict=lambda v: None)


def test_a_campaign_stores_each_sibling_as_a_case_at_its_own_place(tmp_path):
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:eager_in_disguise"),
                           max_cases=7, seed=7, inputs_per_compile=3)
    result = run_campaign(opts)
    db = sqlite3.connect(tmp_path / STORE_NAME)
    rows = db.execute("SELECT idx, spec_json, verdict_json FROM cases WHERE run_id=? ORDER BY idx", (result.run_id,)).fetchall()
    db.close()
    assert result.progress.cases == len(rows) == 7
    stride = opts.members_per_draw  # 3 inputs, and room for a dynamic spec's shape siblings
    assert stride == 3 + SHAPE_SIBLINGS
    specs = {idx: GraphSpec.from_json(text) for idx, text, _ in rows}
    draws = sorted({idx // stride for idx in specs})
    assert result.progress.graphs == len(draws) >= 2  # 3 (or 5) + ... + the quota's last
    compiled = [idx for idx, _, v in rows if '"compile"' in v]
    assert compiled == [d * stride for d in draws]
    for idx, spec in specs.items():  # member j of draw d at d * stride + j, the drawn spec first
        if idx % stride:
            drawn = specs[idx - idx % stride]
            assert spec == [*input_siblings(drawn, 3), *shape_siblings(drawn)][idx % stride - 1]


def test_a_sibling_finds_a_bug_the_drawn_inputs_hide(tmp_path, monkeypatch):
    # The planted backend turns infinities into NaN. The drawn recipe (normal) has none, so alone
    # it finds nothing; run on every recipe, the infinite inputs (inf_divisors) meet the bug.
    monkeypatch.setattr(loop.CampaignOptions, "strategy", lambda self, slot=0: st.just(_relu_fp32()))
    monkeypatch.setattr(loop, "REPEATS_BEFORE_EXHAUSTED", 2)
    backend = CompileConfig(backend="divfuzz.fuzzer.engine.planted:inf_to_nan")

    def buckets_with(n: int, out):
        result = run_campaign(CampaignOptions(device="cpu", out_dir=out, config=backend, max_cases=20, inputs_per_compile=n))
        store = Store(out / STORE_NAME)
        try:
            return result, store.buckets(run_id=result.run_id)
        finally:
            store.close()

    alone, none = buckets_with(1, tmp_path / "alone")
    assert alone.progress.cases == 1 and none == []
    every, found = buckets_with(MAX_INPUTS_PER_COMPILE, tmp_path / "every")
    assert every.progress.cases == MAX_INPUTS_PER_COMPILE and every.progress.graphs == 1
    assert found and all(b.key.dtype == "float32" for b in found), [str(b.key) for b in found]


@pytest.mark.parametrize("kw, flag", [({"oracle": "perf"}, "--oracle perf"), ({"against": CompileConfig(backend="aot_eager")}, "--against")])
def test_siblings_are_refused_where_one_compile_does_not_serve(tmp_path, kw, flag):
    with pytest.raises(ConfigError, match=flag):
        run_campaign(CampaignOptions(device="cpu", out_dir=tmp_path, max_cases=2, inputs_per_compile=2, **kw))


def test_a_resumed_run_runs_only_the_members_it_had_not_stored(tmp_path):
    # An interrupted run that stored a drawn spec but not its last sibling: the resume skips what
    # is stored and runs the sibling alone (it compiles it, as the group would have served it).
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:eager_in_disguise"),
                           max_cases=6, seed=7, inputs_per_compile=3)
    first = run_campaign(opts)
    db = sqlite3.connect(tmp_path / STORE_NAME)
    with db:
        kept = db.execute("SELECT idx, spec_digest FROM cases ORDER BY idx").fetchall()
        db.execute("DELETE FROM cases WHERE run_id=? AND idx=5", (first.run_id,))
        db.execute("UPDATE runs SET status='interrupted' WHERE id=?", (first.run_id,))
    db.close()
    again = run_campaign(opts)
    assert (again.run_id, again.resumed) == (first.run_id, True)
    assert (again.progress.skipped, again.progress.cases, again.progress.graphs) == (5, 1, 1)
    db = sqlite3.connect(tmp_path / STORE_NAME)
    assert db.execute("SELECT idx, spec_digest FROM cases ORDER BY idx").fetchall() == kept
    db.close()


def test_a_group_that_ends_early_leaves_its_quota_to_later_draws_and_a_resume_does_not_run_the_rest(tmp_path):
    # Every compile fails: each group ends after its drawn spec (its siblings would meet the same
    # compile). The quota counts cases that ran, so 6 draws give 6 cases; a resume of the
    # interrupted run finds each group ended and runs nothing.
    opts = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="divfuzz.fuzzer.engine.planted:compile_error"),
                           max_cases=6, seed=3, inputs_per_compile=4)
    first = run_campaign(opts)
    db = sqlite3.connect(tmp_path / STORE_NAME)
    idxs = [i for (i,) in db.execute("SELECT idx FROM cases ORDER BY idx")]
    with db:
        db.execute("UPDATE runs SET status='interrupted' WHERE id=?", (first.run_id,))
    db.close()
    assert first.progress.cases == first.progress.graphs == 6  # one compile (failed) per case: no sibling ran
    assert len(idxs) == 6 and all(i % opts.members_per_draw == 0 for i in idxs)  # each a draw's first member
    again = run_campaign(opts)
    assert again.resumed and (again.progress.skipped, again.progress.cases) == (6, 0)


def test_the_cli_resumes_a_run_from_before_input_siblings_with_its_own_one_input(tmp_path):
    # A run interrupted before --inputs-per-compile existed stored no such option: the same command
    # (no --inputs-per-compile) resumes it with 1 instead of starting a new run.
    import subprocess
    import sys
    from pathlib import Path

    earlier = CampaignOptions(device="cpu", out_dir=tmp_path, config=CompileConfig(backend="eager"), seed=5, max_cases=2, workers=1)
    store = Store(tmp_path / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=5, device="cpu", config=earlier.config.to_dict(), options=earlier.identity(), versions={})
        store.finish_run(run_id, "interrupted")
    finally:
        store.close()
    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--backend", "eager", "--max-cases", "2", "--seed", "5",
           "--workers", "1", "--no-minimize", "--no-live", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run 1 (resumed)" in " ".join(done.stdout.split())
    db = sqlite3.connect(tmp_path / STORE_NAME)
    assert db.execute("SELECT id, status FROM runs").fetchall() == [(1, "finished")]
    assert [i for (i,) in db.execute("SELECT idx FROM cases ORDER BY idx")] == [0, 1]  # one input per compile: no siblings
    db.close()


def test_the_first_members_tensors_are_freed_before_its_siblings_run(monkeypatch):
    # A sibling needs the memory a case of its own would have: by its verdict, neither the first
    # member's inputs nor its compiled outputs are held (a GPU graph near the limit would
    # otherwise fail on a sibling as it would not alone).
    import gc
    import weakref

    from divfuzz.fuzzer.engine import execute

    held, alive = [], []
    judge = execute.judge_case

    def watching_judge(case, compiled):
        if not held:
            held.extend([weakref.ref(case.inputs[0]), weakref.ref(compiled[0][1])])
        return judge(case, compiled)

    def on_verdict(verdict):
        gc.collect()
        alive.append([ref() is not None for ref in held])

    monkeypatch.setattr(execute, "judge_case", watching_judge)
    spec = unary_bf16("relu", 8, 8)
    execute_group([spec, *input_siblings(spec, 3)], "cpu", CompileConfig(backend="eager"), on_verdict=on_verdict)
    assert alive == [[True, True], [False, False], [False, False]]
