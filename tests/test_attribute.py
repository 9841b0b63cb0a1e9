"""Attribution quality on the real Inductor (CPU; GPU variants marked `gpu`), and one bucket per root cause."""

from __future__ import annotations

from dataclasses import replace

import pytest

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.records.culprit import BisectResult, Culprit, bisect_text_of, summarize
from divfuzz.records.deadline import Deadline
from divfuzz.records.errors import StoreError
from divfuzz.fuzzer.triage.analysis import BucketAnalyzer
from divfuzz.fuzzer.engine.bucketing import bucket_key
from divfuzz.records.config import CompileConfig
from divfuzz.fuzzer.triage.analysis import analyze_finding
from divfuzz.fuzzer.store import Store
from divfuzz.fuzzer.engine.worker import Worker
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.records.verdict import Finding
from divfuzz.records.outcomes import FindingKind
from seed_specs import layer_norm_linear, sigmoid_gate


def test_summary_names_the_decomposition_and_the_switch():
    ln = Culprit(stage="aot_eager_decomp_partition", summary="", subsystem="decomposition", detail="aten.native_layer_norm")
    assert summarize(ln) == "decomposition of aten.native_layer_norm"
    gate = Culprit(stage="inductor", summary="", subsystem="inductor_emulate_precision_casts", fixes=("emulate_precision_casts",))
    assert summarize(gate) == "inductor: emulate_precision_casts removes it"
    assert Culprit.from_dict(gate.to_dict()) == gate


# What torch's compiler_bisector gives for a lowering (the FX node's repr: its name) and for a
# decomposition (the OpOverload's repr), as debug_info.
_LOWERING = BisectResult(backend="inductor", subsystem="lowerings", bisect_number=0, debug_info="eq")
_DECOMPOSITION = BisectResult(backend="aot_eager_decomp_partition", subsystem="decomposition", bisect_number=3,
                              debug_info="<OpOverload(op='aten.native_layer_norm', overload='default')>")


def test_a_bisected_culprit_reads_from_its_fields_never_from_a_repr():
    lowered = Culprit(stage="inductor", summary="").with_bisect(_LOWERING)
    assert lowered.summary == "inductor lowering of eq" == summarize(lowered)
    assert lowered.describe() == "inductor lowering of eq (bisect #0)"
    assert lowered.bisect_text() == "inductor / lowerings, application #0 (eq)"
    decomposed = Culprit(stage="inductor", summary="", fixes=("emulate_precision_casts",)).with_bisect(_DECOMPOSITION)
    assert decomposed.stage == "aot_eager_decomp_partition" and decomposed.detail == "aten.native_layer_norm"
    assert decomposed.describe() == "decomposition of aten.native_layer_norm (bisect #3)"
    for c in (lowered, decomposed):
        for text in (c.summary, c.describe(), c.bisect_text(), bisect_text_of(c.to_dict())):
            assert "BisectionResult(" not in text and "BisectResult(" not in text
        assert Culprit.from_dict(c.to_dict()) == c


def test_the_lowering_of_a_numbered_node_is_its_ops_lowering():
    # The bisector names a lowering by the FX node's repr, its name: "div_1" is the graph's second div.
    # On the H100, "inductor lowering of div" and "... of div_1" split one lowering's bug reports.
    for name, op in (("div_1", "div"), ("var_mean_12", "var_mean"), ("div", "div"), ("avg_pool2d", "avg_pool2d"),
                     ("prepare_softmax_online_default", "prepare_softmax_online_default")):
        result = BisectResult(backend="inductor", subsystem="lowerings", bisect_number=0, debug_info=name)
        assert Culprit(stage="inductor", summary="").with_bisect(result).summary == f"inductor lowering of {op}"
        assert result.describe().endswith(f"({op})") and result.debug_info == name  # torch's own text kept as it was


def test_an_older_stored_culprit_with_the_bisector_as_text_still_reads():
    old = {"stage": "inductor", "summary": "inductor lowering of eq", "subsystem": "lowerings", "detail": "eq",
           "fixes": [], "ladder": [["aot_eager", "ok"]], "probes": [],
           "bisect": "BisectionResult(backend='inductor', subsystem='lowerings', bisect_number=0, debug_info='eq')"}
    c = Culprit.from_dict(old)
    assert c.bisect is None and c.bisect_note == old["bisect"] and c.summary == old["summary"]
    assert c.bisect_text() == old["bisect"] == bisect_text_of(old)
    assert Culprit.from_dict(c.to_dict()) == c
    failed = Culprit.from_dict(dict(old, bisect="bisector failed: worker died"))
    assert failed.bisect_text() == "bisector failed: worker died" and failed.describe() == old["summary"]


@pytest.mark.parametrize("bad, field", [({"subsystem": "lowerings"}, "backend"), ({"backend": "inductor", "bisect_number": "0"}, "bisect_number"),
                                        ({"backend": 3}, "backend"), ([1, 2], "expected an object")])
def test_a_malformed_stored_bisect_result_is_refused_naming_the_field(bad, field):
    with pytest.raises(StoreError, match=field):
        Culprit.from_dict({"stage": "inductor", "summary": "s", "bisect": bad})


def test_the_bisectors_own_result_is_copied_field_by_field():
    from torch._inductor.compiler_bisector import BisectionResult

    from divfuzz.fuzzer.triage.attribute import bisect_result_of

    raw = BisectionResult(backend="inductor", subsystem="lowerings", bisect_number=0, debug_info="eq")
    assert bisect_result_of(raw) == BisectResult("inductor", "lowerings", 0, "eq")
    assert Culprit(stage="inductor", summary="").with_bisect(bisect_result_of(raw)).describe() == "inductor lowering of eq (bisect #0)"


def _analyze(spec, device):
    worker = Worker(device)
    try:
        return analyze_finding(spec, worker=worker, device=device, config=CompileConfig(), kind="bf16-ulp", budget_s=60, timeout_s=120)
    finally:
        worker.stop()


def _noise_beside_a_floor_division() -> GraphSpec:
    """Two independent outputs: a float16 layer norm whose decomposition rounds one element
    another way (noise, at aot_eager_decomp_partition already), and a float32 floor division by
    0.1 that Inductor's lowering gets wrong by one (a bug, under Inductor only; torch 2.13 CPU)."""
    return GraphSpec(
        inputs=(TensorSpec("x0", (64, 128), "float16"), TensorSpec("x1", (4000,), "float32")),
        nodes=(Node("v1", "layer_norm", ("x0",), (("affine", False), ("eps", 1e-5)), "float16", (64, 128)),
               Node("v3", "div", ("x1",), (("divisor", 0.1), ("mode", "floor")), "float32", (4000,))),
        outputs=("v1", "v3"), recipe=InputRecipe("decimal_grid", 0))


def test_a_bucket_follows_its_bug_and_attribution_blames_no_stage_that_changes_another_output():
    """The case's bucket is the output its severity reason names (the float32 division, not the
    float16 layer norm whose kind ranks first), every rung is asked for a finding on that output,
    and the minimizer keeps the division alone: before, the float16 noise made the bucket an
    fp16-ulp one, the layer norm's decomposition its culprit, and the layer norm stayed in the repro."""
    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.oracles.findings import finding_of
    from divfuzz.oracles.severity_policy import case_finding, severity_of

    spec = _noise_beside_a_floor_division()
    verdict = execute_case(spec, "cpu", CompileConfig())
    reason = severity_of(verdict)
    assert (reason.severity.value, reason.rule, reason.output) == ("bug", "int-valued-wrong", "v3")
    assert finding_of(verdict).output == "v1"  # the kind order alone would bucket the noise
    finding = case_finding(verdict)
    assert (finding.kind, finding.output) == (FindingKind.FP32_ULP, "v3")
    worker = Worker("cpu")
    try:
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind=finding.kind.value,
                            budget_s=90, timeout_s=120, case_verdict=verdict)
    finally:
        worker.stop()
    assert a.spec.op_names == ("div",) and a.spec.outputs == ("v3",)
    assert a.culprit.stage == "inductor" and "lowering of div" in a.culprit.summary
    assert dict(a.culprit.ladder)["aot_eager_decomp_partition"] == "ok"


def test_a_rung_whose_finding_is_on_another_output_reads_another_and_is_not_the_stage():
    """The float16 kind on both outputs: the layer norm's noise (at aot_eager_decomp_partition
    already) and the same floor division in float16 (under Inductor). Asked about the division's
    output, the decomposition rung reads "another fp16-ulp" and the stage is Inductor; asked about
    the layer norm's, the decomposition is the stage, as it is for a bucket about that output."""
    from divfuzz.fuzzer.triage.attribute import attribute_case

    spec = _noise_beside_a_floor_division()
    spec = replace(spec, inputs=(spec.inputs[0], TensorSpec("x1", (4000,), "float16")),
                   nodes=(spec.nodes[0], Node("v3", "div", ("x1",), (("divisor", 0.1), ("mode", "floor")), "float16", (4000,))))
    worker = Worker("cpu")
    try:
        about_division = attribute_case(spec, worker=worker, device="cpu", config=CompileConfig(), kind="fp16-ulp",
                                        bisect=False, output="v3")
        about_norm = attribute_case(spec, worker=worker, device="cpu", config=CompileConfig(), kind="fp16-ulp",
                                    bisect=False, output="v1")
    finally:
        worker.stop()
    assert dict(about_division.ladder)["aot_eager_decomp_partition"] == "another fp16-ulp"
    assert about_division.stage == "inductor" and dict(about_division.ladder)["inductor"] == "fp16-ulp"
    assert about_norm.stage == "aot_eager_decomp_partition"


@pytest.mark.slow
def test_layer_norm_linear_names_the_layer_norm_decomposition():
    a = _analyze(layer_norm_linear(4096, 128), "cpu")
    assert len(a.spec.nodes) <= 2 and "layer_norm" in a.spec.op_names
    assert a.culprit.stage == "aot_eager_decomp_partition"
    assert "aten.native_layer_norm" in a.culprit.summary
    assert dict(a.culprit.ladder)["aot_eager"] == "ok"


@pytest.mark.slow
def test_sigmoid_gate_minimizes_to_the_gate_and_names_emulate_precision_casts():
    a = _analyze(sigmoid_gate(4096, 128), "cpu")
    assert a.spec.op_names == ("gate",)
    assert a.culprit.stage == "inductor" and "emulate_precision_casts" in a.culprit.summary
    assert "emulate_precision_casts" in a.culprit.fixes


def _bf16_chain(ops, rows=64, dim=32):
    nodes, prev = [], "x0"
    for i, op in enumerate(ops):
        nodes.append(Node(f"v{i + 1}", op, (prev,), (), "bfloat16", (rows, dim)))
        prev = f"v{i + 1}"
    return GraphSpec(inputs=(TensorSpec("x0", (rows, dim), "bfloat16"),), nodes=tuple(nodes), outputs=(prev,))


def test_raw_keys_separate_autocast_and_backward_so_they_are_minimized_apart():
    # The campaign minimizes one graph per raw key and reuses its root cause for the rest.
    finding = Finding(FindingKind.BF16_ULP, "bfloat16", "compiled-worse", "out")
    plain = _bf16_chain(("relu", "sigmoid"))
    keys = {
        bucket_key(finding, plain, "cpu", reason=None),
        bucket_key(finding, replace(plain, autocast="bfloat16"), "cpu", reason=None),
        bucket_key(finding, replace(plain, backward=True), "cpu", reason=None),
    }
    assert len(keys) == 3 and len({k.identity() for k in keys}) == 3
    # the raw key holds the graph's sorted op set: the same ops in another order or repeated share it
    assert bucket_key(finding, plain, "cpu", reason=None) == bucket_key(finding, _bf16_chain(("sigmoid", "relu", "sigmoid")), "cpu",
                                                                        reason=None)
    assert bucket_key(finding, plain, "cpu", reason=None).ops == ("relu", "sigmoid")


@pytest.mark.slow
def test_graphs_with_one_root_cause_share_one_bucket(tmp_path):
    config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump")
    specs = [_bf16_chain(("relu", "sigmoid")), _bf16_chain(("tanh", "abs", "sigmoid")), _bf16_chain(("exp", "relu", "tanh", "sigmoid"))]
    analyzer = BucketAnalyzer(device="cpu", config=config, strict=False, budget_s=30, timeout_s=60)
    store = Store(tmp_path / "s.sqlite")
    run_id, _ = store.start_run(seed=0, device="cpu", config=config.to_dict(), options={}, versions={})
    worker = Worker("cpu")
    finding = Finding(FindingKind.BF16_ULP, "bfloat16", "compiled-worse", "out")
    try:
        raw_keys, keys = set(), set()
        for i, spec in enumerate(specs):
            raw = bucket_key(finding, spec, "cpu", reason=None)
            key, analysis = analyzer.key_for(spec, raw, worker)
            raw_keys.add(raw)
            keys.add(key)
            store.add_case(run_id=run_id, slot=0, idx=i, spec_digest=spec.digest(), spec_json=spec.to_json(), device="cpu",
                           config=config.to_dict(), verdict={"status": "diverged"}, score=1.0, wall_s=0.0,
                           finding_kind="bf16-ulp", key=key, judged=bucket_severity(key, None))
    finally:
        worker.stop()
    assert len(raw_keys) == 3
    assert len(keys) == 1 and len(store.buckets()) == 1, keys
    (key,) = keys
    assert key.ops == ("sigmoid",) and key.culprit is not None, key
    assert key.culprit.stage == "divfuzz.fuzzer.engine.planted:ulp_bump", key  # the backend is the culprit
    assert "sigmoid @ " in str(key)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_layer_norm_linear_and_gate():
    a = _analyze(layer_norm_linear(4096, 128), "cuda")
    # The stage is the minimal graph's (issue 54: the ladder climbs the minimized graph). At a smaller
    # shape the decomposition of native_layer_norm no longer shows it, and the bisector names what
    # the layer norm lowers to, var_mean (H200, torch 2.11); at the input's shape the decomposition.
    assert len(a.spec.nodes) <= 2 and a.spec.op_names[0] == "layer_norm"
    assert "aten.native_layer_norm" in a.culprit.summary or "lowering of var_mean" in a.culprit.summary, a.culprit
    b = _analyze(sigmoid_gate(4096, 128), "cuda")
    assert b.spec.op_names == ("gate",) and "emulate_precision_casts" in b.culprit.summary


def test_a_user_modules_culprit_uses_the_same_summary_as_a_campaigns():
    from divfuzz.fuzzer.triage.user_module import _culprit

    assert _culprit("inductor", None).summary == "inductor (no single subsystem)"
    named = _culprit("aot_eager_decomp_partition", _DECOMPOSITION)
    campaign = Culprit(stage="aot_eager_decomp_partition", summary="").with_bisect(_DECOMPOSITION)
    assert named == campaign and named.summary == "decomposition of aten.native_layer_norm"
    assert named.subsystem == "decomposition" and named.detail == "aten.native_layer_norm"  # what peeling removes next


class _CountingWorker:
    """A real `Worker`, with every case it is asked to run counted by (spec digest, config)."""

    def __init__(self, device: str):
        self.inner = Worker(device)
        self.runs: list[tuple[str, CompileConfig]] = []
        self.verdicts: list = []  # each run's, in the order of `runs`

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, request, timeout_s):
        self.runs.append((request.spec.digest(), request.config))
        verdict = self.inner.run(request, timeout_s)
        self.verdicts.append(verdict)
        return verdict


def test_an_analysis_compiles_each_spec_and_config_once_and_probes_the_input_up_to_its_first_fix():
    # Real Inductor on the CPU: the fused bf16 gate. Which switch removes it first, and what the
    # minimal gate is blamed on, depend on the host's CPU (here emulate_precision_casts, the first
    # probe; the GPU host's AVX512 CPU blames the lowering of mul for a 1x8 gate).
    from divfuzz.fuzzer.triage.attribute import available_probes
    from divfuzz.oracles.findings import finding_of

    spec = sigmoid_gate(64, 32)
    worker = _CountingWorker("cpu")
    try:
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=20, timeout_s=120)
    finally:
        worker.stop()
    assert a.minimized is not None and a.culprit.summary
    repeated = [pair for pair in set(worker.runs) if worker.runs.count(pair) > 1]
    assert not repeated, repeated
    # On the input, the probes run in the table's order, and none after the first that removes
    # the finding: its culprit is named by that fix alone.
    probed = [(cfg, v) for (digest, cfg), v in zip(worker.runs, worker.verdicts) if digest == spec.digest() and cfg.inductor]
    table = [CompileConfig().with_inductor(**{k: v}) for k, v in available_probes("cpu")]
    assert probed and [cfg for cfg, _ in probed] == table[:len(probed)]
    removed = [finding_of(v) is None or finding_of(v).kind.value != "bf16-ulp" for _, v in probed]
    assert removed.index(True) == len(probed) - 1 if any(removed) else len(probed) == len(table), removed


def test_a_numeric_findings_first_pass_climbs_no_ladder_on_the_input_and_the_minimal_graph_gets_it():
    """Issue 54: the first pass on the (large) input runs the case's config and the precision switch
    only; the AOT rungs run on the minimized graph, whose digest differs."""
    spec = sigmoid_gate(64, 32)
    worker = _CountingWorker("cpu")
    try:
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=20, timeout_s=120)
        whole = _CountingWorker("cpu")
        try:
            analyze_finding(spec, worker=whole, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=20, timeout_s=120,
                            cheap_first_pass=False)
        finally:
            whole.stop()
    finally:
        worker.stop()
    on_input = [cfg for digest, cfg in worker.runs if digest == spec.digest()]
    assert not any(cfg.backend != "inductor" for cfg in on_input), on_input
    assert all(set(dict(cfg.inductor)) <= {"emulate_precision_casts"} for cfg in on_input), on_input
    assert any(cfg.backend != "inductor" for digest, cfg in whole.runs if digest == spec.digest())  # the whole pass's ladder
    if a.minimized is not None:  # not by-design on this CPU: the minimal graph climbs the ladder
        assert [r for r, _ in a.culprit.ladder][:1] == ["aot_eager"], a.culprit.ladder


def test_an_analysis_past_its_deadline_runs_nothing_and_files_a_culprit_that_claims_no_stage(machine_slowness):
    import time

    from divfuzz.fuzzer.engine.worker import CaseRequest
    from divfuzz.records.culprit import NOT_ATTRIBUTED

    spec = sigmoid_gate(64, 32)
    worker = _CountingWorker("cpu")
    try:
        case_verdict = worker.inner.run(CaseRequest(spec, "cpu", CompileConfig()), 120)  # the campaign's run of the case
        t0 = time.monotonic()
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=20, timeout_s=120,
                            deadline=Deadline.after(-1.0), case_verdict=case_verdict)
        wall = time.monotonic() - t0
    finally:
        worker.stop()
    assert worker.runs == [] and wall < 5 * machine_slowness, (worker.runs, wall)
    assert a.minimized is None and "time ran out" in a.note and a.verdict is case_verdict
    assert a.culprit.stage == "inductor" and a.culprit.probes == () and a.culprit.fixes == ()
    assert a.culprit.bisect_note.startswith(NOT_ATTRIBUTED) and "stage ladder" in a.culprit.bisect_note
    assert NOT_ATTRIBUTED in a.culprit.summary  # what its bucket shows as its culprit (`culprit_of`)


def test_the_cases_own_verdict_stands_for_the_ladders_last_rung():
    from divfuzz.fuzzer.engine.worker import CaseRequest
    from divfuzz.fuzzer.triage.attribute import attribute_case

    spec = sigmoid_gate(64, 32)
    worker = _CountingWorker("cpu")
    try:
        case_verdict = worker.inner.run(CaseRequest(spec, "cpu", CompileConfig()), 120)  # the campaign's run of the case
        culprit = attribute_case(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", bisect=False,
                                 first_fix_only=True, known={(spec.digest(), CompileConfig()): case_verdict})
    finally:
        worker.stop()
    assert [cfg.backend for _, cfg in worker.runs if not cfg.inductor] == ["aot_eager", "aot_eager_decomp_partition"]
    assert culprit.stage == "inductor" and culprit.ladder[-1] == (CompileConfig().describe(), "bf16-ulp")


class _HangingRungWorker(_CountingWorker):
    """A real `Worker` whose `aot_eager_decomp_partition` rung really hangs: that rung runs under
    the planted `hang` backend (its compiled graph sleeps for an hour), so only a timeout ends it."""

    def run(self, request, timeout_s):
        if request.config.backend == "aot_eager_decomp_partition":
            request = replace(request, config=replace(request.config, backend="divfuzz.fuzzer.engine.planted:hang"))
        return super().run(request, timeout_s)


def test_a_rung_that_hangs_is_stopped_at_the_deadline_recorded_nowhere_and_claims_no_stage(machine_slowness):
    # In a 420 s H200 campaign one bug analysis ran 57 s into a 26 s budget's span: the ladder
    # was bounded by no deadline, and its run went on until the budget's cut dropped it unfiled.
    import time

    from divfuzz.fuzzer.engine.worker import CaseRequest
    from divfuzz.fuzzer.triage.attribute import attribute_case, guard_configs
    from divfuzz.records.culprit import NOT_ATTRIBUTED

    spec = sigmoid_gate(64, 32)
    worker = _HangingRungWorker("cpu")
    recorded = []
    try:
        t_case = time.monotonic()
        case_verdict = worker.inner.run(CaseRequest(spec, "cpu", CompileConfig()), 120)
        # Time for the aot_eager rung on a slow host too: a warm worker's AOT compile costs less
        # than its first Inductor compile did (35 s on the GPU host's CPU, 4 s here).
        allowed = max(8.0, 2 * (time.monotonic() - t_case))
        t0 = time.monotonic()
        culprit = attribute_case(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", timeout_s=120,
                                 known={(spec.digest(), CompileConfig()): case_verdict}, deadline=Deadline.after(allowed, start=t0),
                                 on_verdict=lambda s, cfg, v: recorded.append(cfg.backend))
        wall = time.monotonic() - t0
    finally:
        worker.stop()
    assert allowed < 100 * machine_slowness and wall < allowed + 4 * machine_slowness, (wall, allowed)  # the hang's own timeout is 120 s
    assert culprit.ladder == (("aot_eager", "ok"),) and recorded == ["aot_eager"]  # the stopped run is no verdict
    assert culprit.stage == "inductor" and culprit.probes == () and culprit.bisect is None
    assert culprit.bisect_note.startswith(NOT_ATTRIBUTED) and "stage ladder" in culprit.summary
    # The minimizer then keeps the finding under the case's own config, and nothing more.
    assert guard_configs(culprit, CompileConfig()) == (CompileConfig(), None)


@pytest.mark.slow
def test_an_analysis_whose_rung_hangs_is_still_minimized_and_filed_by_its_deadline(machine_slowness):
    import time

    from divfuzz.fuzzer.engine.worker import CaseRequest
    from divfuzz.records.culprit import NOT_ATTRIBUTED

    spec = sigmoid_gate(64, 32)
    worker = _HangingRungWorker("cpu")
    try:
        case_verdict = worker.inner.run(CaseRequest(spec, "cpu", CompileConfig()), 120)
        t0 = time.monotonic()
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=30, timeout_s=120,
                            deadline=Deadline.after(60.0, start=t0), case_verdict=case_verdict)
        wall = time.monotonic() - t0
    finally:
        worker.stop()
    assert wall < 60 + 10 * machine_slowness, wall
    assert a.minimized is not None and a.spec.op_names == ("gate",), a.note
    assert a.culprit.bisect_note.startswith(NOT_ATTRIBUTED)


def test_a_candidate_whose_must_pass_run_is_cut_by_the_deadline_does_not_hold():
    # Found in review: a cut run counted as "no finding", so a cut must-pass run (the run with
    # the fix switch) accepted an unchecked candidate.

    from divfuzz.fuzzer.engine.worker import CaseRequest
    from divfuzz.fuzzer.triage.shrink import case_predicate

    spec = sigmoid_gate(64, 32)
    worker = _CountingWorker("cpu")
    fix = CompileConfig().with_inductor(emulate_precision_casts=True)
    try:
        finding = worker.inner.run(CaseRequest(spec, "cpu", CompileConfig()), 120)
        known = {(spec.digest(), CompileConfig()): finding}  # the must-fail run, seen: it shows the finding
        assert case_predicate(worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", known=known,
                              deadline=Deadline.after(300))(spec)  # no guard: holds
        cut = case_predicate(worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", must_pass_with=fix, known=known,
                             deadline=Deadline.after(-1.0))
        assert cut(spec) is False and worker.runs == [] and (spec.digest(), fix) not in known
    finally:
        worker.stop()


def test_a_ladder_cut_before_the_input_ran_under_its_config_leaves_it_unminimized(machine_slowness):
    # With no case verdict (`minimize --pending`, `--against`) the severity the minimizer must keep
    # comes from the first pass's run of the input: cut before it, nothing is minimized.
    import time

    from divfuzz.records.culprit import NOT_ATTRIBUTED

    spec = sigmoid_gate(64, 32)
    worker = _HangingRungWorker("cpu")
    try:
        worker.ensure_started()
        t0 = time.monotonic()
        # the whole first pass (a compiler failure's): its ladder's rungs run before the config
        a = analyze_finding(spec, worker=worker, device="cpu", config=CompileConfig(), kind="bf16-ulp", budget_s=12,
                            timeout_s=120, deadline=Deadline.after(20, start=t0), cheap_first_pass=False)
        wall = time.monotonic() - t0
    finally:
        worker.stop()
    assert a.minimized is None and a.note == "not minimized: the analysis's time ran out before the input ran under its config"
    assert CompileConfig() not in [cfg for _, cfg in worker.runs] and a.culprit.bisect_note.startswith(NOT_ATTRIBUTED)
    assert wall < 20 + 30 * machine_slowness, wall  # a worker restart after each cut is not counted against the deadline


def test_a_cut_ladder_of_another_backend_names_that_backend_as_an_uncut_one_does():
    # One bug, one root-cause key: a planted or user backend is its own culprit however far the ladder got.

    from divfuzz.fuzzer.triage.attribute import attribute_case

    config = CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump")
    worker = _CountingWorker("cpu")
    try:
        culprit = attribute_case(sigmoid_gate(64, 32), worker=worker, device="cpu", config=config, kind="bf16-ulp",
                                 deadline=Deadline.after(-1.0))
    finally:
        worker.stop()
    assert worker.runs == [] and culprit.ladder == ()
    assert culprit.summary == "backend divfuzz.fuzzer.engine.planted:ulp_bump" and culprit.bisect_note is None
