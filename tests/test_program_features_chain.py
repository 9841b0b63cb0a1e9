"""The chain carries the program features (layouts, mutation, views, dynamic shapes, modes): bucket
keys hold them (old keys keep their identity), the minimizer drops a view or a layout or a compile
dimension only where the finding stays, the gate's corpus loads them, the report counts them."""

from __future__ import annotations

import json
from dataclasses import replace

from divfuzz.fuzzer.engine.bucketing import bucket_key, root_cause_key
from divfuzz.fuzzer.gate.corpus import load_corpus
from divfuzz.fuzzer.triage.shrink import minimize_spec
from divfuzz.generators.features import FEATURES, feature_coverage, program_features
from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.outcomes import FindingKind
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Finding
from divfuzz.reports.markdown import features_markdown

S = (8, 6)


def _featured(layout: str = "transposed", dynamic: str = "marked", mode: str = "reduce-overhead") -> GraphSpec:
    """x0 (laid out) -> transpose -> mul_ by exp(x1).t() -> sigmoid, compiled dynamic in a mode."""
    t = (6, 8)
    return validate_spec(GraphSpec(
        inputs=(TensorSpec("x0", S, "float32", layout=layout), TensorSpec("x1", S, "float32")),
        nodes=(Node("v1", "transpose", ("x0",), (), "float32", t), Node("v2", "exp", ("x1",), (), "float32", S),
               Node("v3", "transpose", ("v2",), (), "float32", t), Node("v4", "mul_", ("v1", "v3"), (("clone", False),), "float32", t),
               Node("v5", "sigmoid", ("v4",), (), "float32", t)),
        outputs=("v5",), dynamic=dynamic, dynamic_dims=(0,) if dynamic == "marked" else (), mode=mode))


def test_a_key_of_before_keeps_its_identity_and_the_features_are_fields():
    old = {"kind": "bf16-ulp", "dtype": "bfloat16", "device_type": "cuda", "ops": ["gelu"], "autocast": "", "backward": False,
           "detail": "", "site": "", "rule": "few-ulps", "mechanism": "", "culprit": None}
    key = BucketKey.from_dict(old)
    assert (key.layout, key.dynamic, key.mode) == ("", "", "") and key.identity() == json.dumps(old, sort_keys=True, separators=(",", ":"))
    featured = replace(key, layout="strided+transposed", dynamic="marked", mode="reduce-overhead")
    assert BucketKey.from_identity(featured.identity()) == featured != key
    assert "strided+transposed inputs, dynamic marked, mode reduce-overhead" in str(featured)


def test_a_raw_key_and_its_root_cause_carry_the_graphs_features():
    spec = _featured()
    assert program_features(spec) == set(FEATURES)
    finding = Finding(FindingKind.NAN_INF, "float32", "compiled-worse", "mutated:x0")
    key = bucket_key(finding, spec, "cuda:0", reason=SeverityReason(Severity.BUG, "nan-inf-new", "mutated:x0", "d"))
    assert (key.layout, key.dynamic, key.mode) == ("transposed", "marked", "reduce-overhead") and "mul_" in key.ops
    plain = _featured(layout="contiguous", dynamic="", mode="")
    rooted = root_cause_key(key, plain, CulpritKey("inductor"))
    assert (rooted.layout, rooted.dynamic, rooted.mode) == ("", "", "")  # the minimal graph's, not the raw one's


def test_the_minimizer_drops_a_view_a_layout_and_the_compile_dimensions_only_where_the_finding_stays():
    spec = _featured()
    # A finding that needs only the in-place op on x0 through some view: layout, dims and mode go.
    loose = minimize_spec(spec, lambda s: any(n.op == "mul_" for n in s.nodes), budget_s=60)
    assert all(t.layout == "contiguous" for t in loose.spec.inputs) and not loose.spec.dynamic and not loose.spec.mode
    # One that needs the transposed input and the dynamic dims: they stay, the mode goes.
    kept = minimize_spec(spec, lambda s: s.inputs[0].layout == "transposed" and s.dynamic == "marked"
                         and any(n.op == "mul_" for n in s.nodes), budget_s=60)
    assert kept.spec.inputs[0].layout == "transposed" and kept.spec.dynamic == "marked" and not kept.spec.mode
    # One that needs the view in front of the in-place op keeps it; one that does not drops it.
    viewed = minimize_spec(spec, lambda s: any(n.op == "transpose" for n in s.nodes), budget_s=60)
    assert [n.op for n in viewed.spec.nodes] == ["transpose"]


def test_the_gates_corpus_loads_specs_of_every_feature(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "featured.json").write_text(_featured().to_json())
    [loaded] = load_corpus(tmp_path)
    assert loaded.spec == _featured() and program_features(loaded.spec) == set(FEATURES)


class _Cases:
    def __init__(self, rows):
        self.rows = rows

    def iter_case_specs(self, *, run_id=None):
        return iter(self.rows)


def test_the_report_counts_cases_and_buckets_by_severity_per_feature():
    plain = _featured(layout="contiguous", dynamic="", mode="")
    rows = [(_featured().to_json(), 1, "bug"), (_featured().to_json(), 1, "bug"), (_featured(mode="").to_json(), 2, "suspect"),
            (plain.to_json(), None, None), ("not json", 3, "bug")]
    table = {r.feature: r for r in feature_coverage(rows)}
    assert [r for r in table] == list(FEATURES)
    assert (table["layout"].cases, table["layout"].buckets) == (3, (("bug", 1), ("suspect", 1)))
    assert (table["mode"].cases, table["mode"].buckets) == (2, (("bug", 1),))
    text = features_markdown(_Cases(rows))
    assert text.startswith("## Program features") and "| mutation |" in text and "| 4 | 1 bug, 1 suspect |" in text
