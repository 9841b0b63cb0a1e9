"""Reports are led by severity: real SQLite stores, no compile."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from click.testing import CliRunner

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.fuzzer.store import SCHEMA_VERSION, STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.reports.markdown import buckets_markdown

_VERDICT = {"status": "diverged", "outputs": [], "error_type": None, "error_message": None, "timings": {}}


def _add(store: Store, run_id: int, idx: int, key: BucketKey, severity: Severity, rule: str) -> None:
    reason = SeverityReason(severity, rule, "y", f"{rule} detail {idx}")
    store.add_case(run_id=run_id, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json="{}", device="cpu", config={},
                   verdict=_VERDICT, score=1.0, wall_s=0.1, finding_kind=key.kind, key=key, judged=bucket_severity(key, reason.to_dict()))


def _store_with_every_severity(path) -> Store:
    store = Store(path)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    knob = CulpritKey("inductor", switch="emulate_precision_casts")
    # Suspect cases whose culprit is a documented precision switch: by-design, the switch named in their reason.
    _add(store, run_id, 0, BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gate", "mul"), rule="many-ulps", culprit=knob),
         Severity.SUSPECT, "many-ulps")
    _add(store, run_id, 1, BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gate", "linear"), rule="many-ulps", culprit=knob),
         Severity.SUSPECT, "many-ulps")
    _add(store, run_id, 2, BucketKey("fp32-ulp", "float32", "cpu", ops=("rms_norm",), rule="few-ulps", culprit=CulpritKey("inductor")),
         Severity.NOISE, "few-ulps")
    _add(store, run_id, 3, BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps",
                                     culprit=CulpritKey("inductor", "lowering")), Severity.SUSPECT, "many-ulps")
    div = BucketKey("fp32-ulp", "float32", "cpu", ops=("div",), rule="int-valued-wrong",
                    culprit=CulpritKey("inductor", "lowerings", "div"))
    _add(store, run_id, 4, div, Severity.BUG, "int-valued-wrong")
    # a later, less severe case does not lower its bucket's severity: a bucket's severity is its key's
    _add(store, run_id, 5, div, Severity.NOISE, "few-ulps")
    return store


def test_report_lists_bug_first_then_suspect_and_folds_the_rest_by_culprit(tmp_path):
    store = _store_with_every_severity(tmp_path / "s.sqlite")
    text = buckets_markdown(store)
    buckets = {b.key.ops_text(): b for b in store.buckets()}
    assert (buckets["div"].severity, buckets["div"].count) == ("bug", 2)
    assert buckets["div"].severity_reason["detail"] == "int-valued-wrong detail 4"  # the first case's reason is shown
    assert buckets["gate+mul"].severity == "by-design"
    assert buckets["gate+mul"].severity_reason == {"severity": "by-design", "rule": "precision-knob", "output": "y",
                                                   "detail": "emulate_precision_casts removes it; many-ulps detail 0"}
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
                   verdict=hang, score=1.0, wall_s=0.1, finding_kind="hang", key=BucketKey("hang", "-", "cpu", ops=("gelu",)), judged=bucket_severity(BucketKey("hang", "-", "cpu", ops=("gelu",)), None))
    store.close()
    db = sqlite3.connect(path)  # make it a version-1 store, as written before severities existed
    db.execute("ALTER TABLE buckets DROP COLUMN severity_json")
    db.execute("ALTER TABLE buckets DROP COLUMN severity")
    old_key = {"kind": "hang", "dtype": "-", "device_type": "cpu", "signature": "gelu", "detail": "Timeout"}  # its key as text
    db.execute("UPDATE buckets SET key=?, key_json=?, signature='gelu', detail='Timeout'",
               ("hang Timeout · - · cpu · gelu", json.dumps(old_key)))
    db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    db.commit()
    db.close()
    # A writing command's open migrates it: its bucket is judged from its first case's stored verdict, once.
    Store(path, create=False, read_only=False).close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("SELECT severity FROM buckets").fetchall() == [("bug",)]
    [(key_json,)] = db.execute("SELECT key_json FROM buckets").fetchall()
    db.close()
    assert BucketKey.from_dict(json.loads(key_json)) == BucketKey("hang", "-", "cpu", ops=("gelu",), detail="Timeout", rule="hang")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Severity (buckets): 1 bug" in result.output and "the compiler under test failed: hang Timeout" in result.output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # report writes nothing


def test_a_bucket_report_md_leads_with_its_severity_and_reason():
    """The markdown a user pastes upstream says what the policy made of it: severity, rule, numbers;
    and a documented precision knob named by the culprit turns a suspect into by-design there too.
    The report shows the reason it is given (`Analysis.reason`): it judges nothing itself."""
    import torch

    from divfuzz.generators.spec import GraphSpec, Node, TensorSpec
    from divfuzz.oracles.compare import compare_float
    from divfuzz.records.verdict import OutputVerdict, Verdict
    from divfuzz.records.outcomes import Status
    from divfuzz.fuzzer.triage.analysis import Analysis
    from divfuzz.oracles.severity_policy import severity_of
    from divfuzz.records.culprit import Culprit
    from divfuzz.reports.bug_report import render_bug_report

    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "bfloat16"),),
                     nodes=(Node("v1", "sigmoid", ("x0",), (), "bfloat16", (4, 8)),), outputs=("v1",))
    ref = torch.linspace(-3, 3, 32, dtype=torch.float64).reshape(4, 8)
    eager = ref.to(torch.bfloat16)
    compiled = eager.clone()
    compiled.view(torch.int16).view(-1)[::2] += 1  # one bf16 ULP (away from zero) on every other element
    verdict = Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=compare_float(eager, compiled, ref)),))

    def render(culprit: Culprit):
        reason = Analysis(spec, culprit, None, verdict).reason
        return render_bug_report(spec, title="t", reason=reason, culprit=culprit.to_dict(), versions={"torch": "x"},
                                 device="cpu", config_desc="inductor", verdict=verdict)

    plain = render(Culprit(stage="inductor", summary="inductor (no single subsystem)"))
    assert "**Severity: suspect**" in plain and "16/32 bfloat16 elements differ" in plain
    knob = Culprit(stage="inductor", summary="inductor: emulate_precision_casts removes it", fixes=("emulate_precision_casts",))
    assert "**Severity: by-design** (precision-knob)" in render(knob)
    # What it is given is what it shows: nothing judged again from the verdict.
    shown = render_bug_report(spec, title="t", reason=severity_of(verdict, switch="emulate_precision_casts"),
                              culprit={"summary": "-"}, versions={"torch": "x"}, device="cpu", config_desc="inductor",
                              verdict=verdict)
    assert "**Severity: by-design** (precision-knob)" in shown
    unjudged = render_bug_report(spec, title="t", reason=None, culprit=knob.to_dict(), versions={"torch": "x"}, device="cpu",
                                 config_desc="inductor", verdict=verdict)
    assert "**Severity:** not judged" in unjudged and "by-design" not in unjudged
