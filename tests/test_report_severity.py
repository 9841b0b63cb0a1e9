"""Reports are led by severity: real SQLite stores, no compile."""

from __future__ import annotations

import sqlite3

from click.testing import CliRunner

from divfuzz.records.buckets import BucketKey
from divfuzz.fuzzer.store import SCHEMA_VERSION, STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.reports.markdown import buckets_markdown

_VERDICT = {"status": "diverged", "outputs": [], "error_type": None, "error_message": None, "timings": {}}


def _add(store: Store, run_id: int, idx: int, key: BucketKey, severity: Severity, rule: str) -> None:
    reason = SeverityReason(severity, rule, "y", f"{rule} detail {idx}")
    store.add_case(run_id=run_id, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json="{}", device="cpu", config={},
                   verdict=_VERDICT, score=1.0, wall_s=0.1, finding_kind=key.kind, key=key, severity=reason.to_dict())


def _store_with_every_severity(path) -> Store:
    store = Store(path)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    knob = "gate+mul @ inductor: emulate_precision_casts removes it"
    _add(store, run_id, 0, BucketKey("bf16-ulp", "bfloat16", "cpu", knob), Severity.BY_DESIGN, "precision-knob")
    _add(store, run_id, 1, BucketKey("bf16-ulp", "bfloat16", "cpu", "gate+linear @ " + knob.split(" @ ")[1]), Severity.BY_DESIGN, "precision-knob")
    _add(store, run_id, 2, BucketKey("fp32-ulp", "float32", "cpu", "rms_norm @ inductor (no single subsystem)"), Severity.NOISE, "few-ulps")
    _add(store, run_id, 3, BucketKey("bf16-ulp", "bfloat16", "cpu", "gelu @ inductor lowering"), Severity.SUSPECT, "many-ulps")
    _add(store, run_id, 4, BucketKey("fp32-ulp", "float32", "cpu", "div @ inductor lowering of div"), Severity.BUG, "int-valued-wrong")
    # a later, less severe case does not lower its bucket's severity
    _add(store, run_id, 5, BucketKey("fp32-ulp", "float32", "cpu", "div @ inductor lowering of div"), Severity.NOISE, "few-ulps")
    return store


def test_report_lists_bug_first_then_suspect_and_folds_the_rest_by_culprit(tmp_path):
    store = _store_with_every_severity(tmp_path / "s.sqlite")
    text = buckets_markdown(store)
    assert {b.key.signature.split(" @ ")[0]: b.severity for b in store.buckets()}["div"] == "bug"
    store.close()
    assert "Severity (buckets): 1 bug, 1 suspect, 2 by-design, 1 noise." in text
    assert "Root causes: 1 bug, 1 suspect, 2 by-design, 1 noise." in text  # none minimized: one per bucket
    assert text.index("## bug") < text.index("## suspect") < text.index("folded by culprit")
    assert text.index("int-valued-wrong detail 4") < text.index("many-ulps detail 3")
    folded = [line for line in text.splitlines() if line.startswith(("- by-design", "- noise"))]
    # not minimized: each bucket is a root cause of its own, folded by culprit with the others
    assert folded[0] == ("- by-design, culprit inductor: emulate_precision_casts removes it: 2 buckets, 2 cases, 2 root causes "
                         "(buckets 1, 2)")
    assert folded[1].startswith("- noise, culprit inductor (no single subsystem): 1 buckets, 1 cases, 1 root causes")


def test_min_severity_hides_what_is_below_it(tmp_path):
    _store_with_every_severity(tmp_path / STORE_NAME).close()
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--min-severity", "suspect"])
    assert result.exit_code == 0, result.output
    assert "## bug" in result.output and "## suspect" in result.output and "folded" not in result.output
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--min-severity", "bug"])
    assert "## suspect" not in result.output and "## bug" in result.output
    bad = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--min-severity", "high"])
    assert bad.exit_code == 2 and "'high'" in bad.output


def test_a_version_1_store_is_migrated_and_its_buckets_judged_from_stored_verdicts(tmp_path):
    path = tmp_path / STORE_NAME
    store = Store(path)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    hang = {**_VERDICT, "status": "hang", "error_type": "Timeout"}
    store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json="{}", device="cpu", config={},
                   verdict=hang, score=1.0, wall_s=0.1, finding_kind="hang", key=BucketKey("hang", "-", "cpu", "gelu", "Timeout"))
    store.close()
    db = sqlite3.connect(path)  # make it a version-1 store, as written before severities existed
    db.execute("ALTER TABLE buckets DROP COLUMN severity_json")
    db.execute("ALTER TABLE buckets DROP COLUMN severity")
    db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    db.commit()
    db.close()
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Severity (buckets): 1 bug" in result.output and "the compiler under test failed: hang Timeout" in result.output
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("SELECT severity FROM buckets").fetchall() == [("bug",)]


def test_a_bucket_report_md_leads_with_its_severity_and_reason():
    """The markdown a user pastes upstream says what the policy made of it: severity, rule, numbers;
    and a documented precision knob in the culprit turns a suspect into by-design there too."""
    import torch

    from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
    from divfuzz.oracles.compare import compare_float
    from divfuzz.records.verdict import OutputVerdict, Verdict
    from divfuzz.records.outcomes import Status
    from divfuzz.reports.bug_report import render_bug_report

    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "bfloat16"),),
                     nodes=(Node("v1", "sigmoid", ("x0",), (), "bfloat16", (4, 8)),), outputs=("v1",))
    ref = torch.linspace(-3, 3, 32, dtype=torch.float64).reshape(4, 8)
    eager = ref.to(torch.bfloat16)
    compiled = eager.clone()
    compiled.view(torch.int16).view(-1)[::2] += 1  # one bf16 ULP (away from zero) on every other element
    verdict = Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=compare_float(eager, compiled, ref)),))

    def render(summary):
        return render_bug_report(spec, title="t", culprit={"summary": summary}, versions={"torch": "x"}, device="cpu",
                                 config_desc="inductor", verdict=verdict)

    plain = render("inductor (no single subsystem)")
    assert "**Severity: suspect**" in plain and "16/32 bfloat16 elements differ" in plain
    assert "**Severity: by-design** (precision-knob)" in render("inductor: emulate_precision_casts removes it")
