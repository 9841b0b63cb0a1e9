"""The per-element error sample (`FloatComparison.error_sample`) and its scatter in the HTML report.

The sample is what the report's "eager error against compiled error versus fp64" scatter draws: up
to 64 (eager, compiled) errors in ULPs of the output dtype over differing elements, the largest
excesses of compiled over eager first, deterministic, and absent (not invented) in old verdicts.
"""

from __future__ import annotations

import json
import re

import torch

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.oracles.compare import ERROR_SAMPLE_STRIDE, ERROR_SAMPLE_TOP, _error_sample, compare_float
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict
from divfuzz.reports import plots
from divfuzz.reports.html import collect, render_html
from tests.seed_specs import layer_norm_linear


def _bf16_case(n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=g, dtype=torch.float64)
    eager = ref.to(torch.bfloat16)
    compiled = eager.clone()
    compiled[::5] = (ref[::5] * 1.02).to(torch.bfloat16)  # many elements a few ULPs worse
    return ref, eager, compiled


def test_sample_holds_the_worst_elements_and_a_stride_in_ulps():
    ref, eager, compiled = _bf16_case()
    compiled[1234] = (ref[1234] * 1.5).to(torch.bfloat16)  # the worst element by far: ~64 bf16 ULPs more
    f = compare_float(eager, compiled, ref)
    assert f.n_diff > ERROR_SAMPLE_TOP + ERROR_SAMPLE_STRIDE
    assert len(f.error_sample) <= ERROR_SAMPLE_TOP + ERROR_SAMPLE_STRIDE
    assert len(f.error_sample) > ERROR_SAMPLE_TOP  # the stride adds elements beyond the top ones
    # the largest excess is in the sample, and equals the verdict's own max excess (same unit: ULPs)
    worst = max(c - e for e, c in f.error_sample)
    assert abs(worst - f.max_excess_ulps) <= 0.01 * f.max_excess_ulps and worst > 30
    # every sampled element differs, so compiled moved: eager (correctly rounded) is within 1/2 ULP
    assert all(0 <= e <= 0.5 + 1e-3 for e, _ in f.error_sample)
    assert sum(c > e for e, c in f.error_sample) > len(f.error_sample) // 2
    # deterministic: the same tensors give the same sample
    assert compare_float(eager, compiled, ref).error_sample == f.error_sample
    # small in JSON: under 1.5 kB for 64 pairs
    assert len(json.dumps(f.to_dict()["error_sample"])) < 1500


def test_few_differing_elements_are_all_sampled_once_and_equal_outputs_have_none():
    ref, eager, _ = _bf16_case(n=300)
    compiled = eager.clone()
    compiled[[3, 77, 200]] = (ref[[3, 77, 200]] * 1.1).to(torch.bfloat16)
    f = compare_float(eager, compiled, ref)
    assert f.n_diff == 3 and len(f.error_sample) == 3
    assert compare_float(eager, eager.clone(), ref).error_sample == ()


def test_ties_go_to_the_lower_index():
    """Equal excesses everywhere: the top part is the first elements, not an arbitrary set; then
    the stride (rank j * n_diff // 32 among the differing: every other element here)."""
    n = 1000
    err_e = torch.arange(n, dtype=torch.float64) / n
    err_c = err_e + 1.0
    differs = torch.arange(n) % 2 == 0  # only even elements differ
    rows = _error_sample(err_e, err_c, differs).view(-1, 4)
    assert rows[:ERROR_SAMPLE_TOP, 0].tolist() == [2.0 * i for i in range(ERROR_SAMPLE_TOP)]
    assert rows[ERROR_SAMPLE_TOP:, 0].tolist() == [2.0 * (j * 500 // ERROR_SAMPLE_STRIDE) for j in range(ERROR_SAMPLE_STRIDE)]
    assert rows[:, 1].tolist() == [1.0] * len(rows)


def test_old_verdicts_without_a_sample_still_load_and_round_trip():
    ref, eager, compiled = _bf16_case(n=256)
    d = compare_float(eager, compiled, ref).to_dict()
    assert FloatComparison.from_dict(json.loads(json.dumps(d))).error_sample == tuple(map(tuple, d["error_sample"]))
    d.pop("error_sample")
    assert FloatComparison.from_dict(d).error_sample == ()
    v = Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=FloatComparison.from_dict(d)),)).to_dict()
    assert Verdict.from_dict(json.loads(json.dumps(v))).outputs[0].float_cmp.error_sample == ()


def test_scatter_is_log_log_with_the_diagonal_and_colours_each_side():
    svg = plots.scatter("s", "t", [(0.5, 8.0), (0.25, 2.0), (4.0, 1.0), (0.0, 3.0)], x_label="e", y_label="c",
                        diagonal=True, sides=("compiled worse", "eager worse"))
    assert 'class="diagonal"' in svg
    assert len(re.findall(r'class="point above"', svg)) == 2 and len(re.findall(r'class="point below"', svg)) == 1
    assert "compiled worse: 2" in svg and "eager worse: 1" in svg
    assert "(1 at 0 or not finite, not shown)" in svg  # log axes: the 0 is counted, not drawn
    empty = plots.scatter("s", "t", [], x_label="e", y_label="c", diagonal=True, empty_message="nothing stored here")
    assert "nothing stored here" in empty


def _store_with(tmp_path, samples):
    """One bf16 bucket per sample (None: a verdict stored before the field existed)."""
    store = Store(tmp_path / STORE_NAME)
    run, _ = store.start_run(seed=1, device="cpu", config={"backend": "inductor"}, options={}, versions={"torch": "2.13"})
    spec = layer_norm_linear(rows=4, dim=8)
    ids = []
    for i, sample in enumerate(samples):
        f = FloatComparison(dtype="bfloat16", numel=64, n_diff=5, max_ulp=3, ulp_histogram=(("1", 5),), nan_inf_mismatch=0,
                            triage="compiled-worse", n_worse=5, n_closer=0, rmse_eager=1e-3, rmse_compiled=2e-3,
                            max_abs_diff=0.01, error_sample=sample or ())
        verdict = Verdict(Status.DIVERGED, outputs=(OutputVerdict("v2", float_cmp=f),)).to_dict()
        if sample is None:
            verdict["outputs"][0]["float"].pop("error_sample")
        _, bucket_id, _ = store.add_case(
            run_id=run, slot=0, idx=i, spec_digest=f"d{i}", spec_json=spec.to_json(indent=None), device="cpu",
            config={}, verdict=verdict, score=1.0, wall_s=0.1, finding_kind="bf16-ulp",
            key=BucketKey("bf16-ulp", "bfloat16", "cpu", ops=(f"op{i}",), rule="many-ulps", culprit=CulpritKey("inductor")),
            triage="compiled-worse", judged=bucket_severity(BucketKey("bf16-ulp", "bfloat16", "cpu", ops=(f"op{i}",), rule="many-ulps", culprit=CulpritKey("inductor")), {"severity": "suspect", "rule": "many-ulps", "output": "v2", "detail": "t"}),
        )
        ids.append(bucket_id)
    store.finish_run(run)
    page = render_html(collect(store), tmp_path / "report.html", plots="all")
    store.close()
    return ids, page


def test_each_float_bucket_card_draws_its_element_scatter(tmp_path):
    sample = ((0.25, 3.0), (0.5, 6.0), (0.4, 0.1), (0.0, 2.0))  # 3 above the diagonal, 1 below; a 0 on eager's side
    (with_sample, old), page = _store_with(tmp_path, [sample, None])
    card = page[page.index(f'data-bucket="{with_sample}"'):page.index(f'data-bucket="{old}"')]
    plot = re.search(r'<svg class="plot" data-plot="element-errors-%d-bfloat16".*?</svg>' % with_sample, card, re.S)
    assert plot, card[:2000]
    svg = plot.group(0)
    assert 'class="diagonal"' in svg and "ULP (4 shown)" in svg
    assert len(re.findall(r'class="point above"', svg)) == 3 and len(re.findall(r'class="point below"', svg)) == 1
    assert "case 1 v2: 0.001, 2</title>" in svg  # the exact 0 is drawn at the floor, not dropped
    old_card = page[page.index(f'data-bucket="{old}"'):]
    old_plot = re.search(r'data-plot="element-errors-%d-bfloat16".*?</svg>' % old, old_card, re.S).group(0)
    assert "no per-element errors stored" in old_plot and "<circle" not in old_plot
