"""`divfuzz recheck --python PATH` runs a store's bug folders' issue.py under another Python
environment and records, per folder, "still fails / passes / errors in torch X" in the store and
in its issue.md (issue 52 item 4).

The default tier uses this interpreter as the "other" one (the mechanism: a second process, its
torch version asked and recorded); the slow tier a second venv (`DIVFUZZ_OTHER_PYTHON`, default
/tmp/other-torch/bin/python: `python3 -m venv /tmp/other-torch && /tmp/other-torch/bin/pip install
torch==2.13.0`), skipped where there is none.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.records.config import CompileConfig
from divfuzz.reports.issue_markdown import RECHECK_HEADING, recheck_tag, with_recheck_section

PLANTED = "divfuzz.fuzzer.engine.planted:"
OTHER_PYTHON = os.environ.get("DIVFUZZ_OTHER_PYTHON", "/tmp/other-torch/bin/python")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """A tiny campaign whose every bucket is a bug: a NaN planted behind eager (no compile)."""
    out = tmp_path_factory.mktemp("recheck")
    run_campaign(CampaignOptions(device="cpu", out_dir=out, config=CompileConfig(backend=PLANTED + "nan_first"),
                                 seed=3, max_cases=2, max_ops=2))
    return out


def _bugs(out: Path):
    store = Store(out / STORE_NAME, create=False)
    try:
        return [b for b in store.buckets() if b.severity == "bug"], store.rechecks()
    finally:
        store.close()


def test_recheck_records_still_fails_and_passes_per_folder_in_the_store_and_issue_md(campaign):
    bugs, before = _bugs(campaign)
    assert bugs and before == []
    result = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", sys.executable])
    assert result.exit_code == 0, result.output
    _, rows = _bugs(campaign)
    assert sorted(r.bucket_id for r in rows) == sorted(b.id for b in bugs)
    assert {(r.torch_version, r.outcome) for r in rows} == {(torch.__version__, "still fails")}, rows
    assert f"rechecked {len(bugs)} of {len(bugs)} bug folders under torch {torch.__version__}" in result.output
    assert f"{len(bugs)} still fails, 0 passes, 0 errors" in result.output
    md = (Path(bugs[0].folder) / "issue.md").read_text()
    assert md.rstrip().endswith(f"- still fails in torch {torch.__version__} ({rows[0].detail})"), md
    assert md.count(RECHECK_HEADING) == 1 and rows[0].detail.startswith("exits 1 (AssertionError")
    # The bug gone (its planted defect swapped for none): that one folder passes, the row replaced, not added.
    script = Path(bugs[0].folder) / "issue.py"
    fixed = script.read_text().replace("'nan_first')", "'eager_in_disguise')")
    assert fixed != script.read_text()
    script.write_text(fixed)
    again = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", sys.executable, "--bucket", str(bugs[0].id)])
    assert again.exit_code == 0, again.output
    _, rows = _bugs(campaign)
    mine = [r for r in rows if r.bucket_id == bugs[0].id]
    assert [(r.outcome, r.detail) for r in mine] == [("passes", "exits 0")], mine
    md = (Path(bugs[0].folder) / "issue.md").read_text()
    assert md.rstrip().endswith(f"- passes in torch {torch.__version__} (exits 0)") and md.count(RECHECK_HEADING) == 1, md
    assert recheck_tag([(r.torch_version, r.outcome, r.detail) for r in mine]) == f"passes in {torch.__version__}"


def test_recheck_refuses_what_is_not_an_interpreter_or_a_bug_bucket(campaign, tmp_path):
    bad = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "--python" in bad.output and "not an executable file" in bad.output, bad.output
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\nexit 3\n")
    no_torch.chmod(0o755)
    refused = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", str(no_torch)])
    assert refused.exit_code == 2 and "does not import torch" in refused.output, refused.output
    missing = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", sys.executable, "--bucket", "999"])
    assert missing.exit_code == 2 and "bucket 999 is not a bug bucket" in missing.output, missing.output


def test_the_recheck_section_is_replaced_past_the_upstream_matches_only():
    text = "# t\n\n### Error logs\n\n```\n### Other torch builds\n```\n\n### Matching upstream issues\n\n- none\n"
    once = with_recheck_section(text, [("2.14.1", "passes", "exits 0")])
    assert once.startswith(text.rstrip("\n")) and once.endswith(f"\n{RECHECK_HEADING}\n\n- passes in torch 2.14.1 (exits 0)\n")
    twice = with_recheck_section(once, [("2.14.1", "still fails", "exits 1")])
    assert twice.count(RECHECK_HEADING) == 2 and twice.endswith("- still fails in torch 2.14.1 (exits 1)\n")  # the log's one kept
    assert with_recheck_section(twice, []) == text


@pytest.mark.slow
def test_recheck_under_a_second_venv_records_its_torch(campaign):
    if not Path(OTHER_PYTHON).is_file():
        pytest.skip(f"no second torch environment at {OTHER_PYTHON} (DIVFUZZ_OTHER_PYTHON)")
    bugs, _ = _bugs(campaign)
    result = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", OTHER_PYTHON, "--bucket", str(bugs[-1].id)])
    assert result.exit_code == 0, result.output
    _, rows = _bugs(campaign)
    other = [r for r in rows if r.python == str(Path(OTHER_PYTHON).absolute())]
    assert len(other) == 1 and other[0].bucket_id == bugs[-1].id, rows
    # divfuzz is not installed there: a planted backend's script cannot import it, an error, not a pass
    assert other[0].outcome == "errors" and "ModuleNotFoundError" in other[0].detail, other
    md = (Path(bugs[-1].folder) / "issue.md").read_text()
    assert f"- errors in torch {other[0].torch_version} (" in md, md
    # The planted defect as plain torch: the script now needs only that torch, and still fails there.
    script = Path(bugs[-1].folder) / "issue.py"
    plain = re.sub(r"(?m)^backend = getattr\(importlib\.import_module\('divfuzz\.fuzzer\.engine\.planted'\), '\w+'\)$",
                   "backend = lambda gm, ex: (lambda *a: tuple((o.view(-1).__setitem__(0, float('nan')), o)[1] for o in gm(*a)))",
                   script.read_text())
    assert "divfuzz" not in plain, plain
    script.write_text(plain)
    again = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", OTHER_PYTHON, "--bucket", str(bugs[-1].id)])
    assert again.exit_code == 0, again.output
    _, rows = _bugs(campaign)
    other = [r for r in rows if r.python == str(Path(OTHER_PYTHON).absolute())]
    assert [r.outcome for r in other] == ["still fails"], other
    assert (Path(bugs[-1].folder) / "issue.md").read_text().rstrip().endswith(
        f"- still fails in torch {other[0].torch_version} ({other[0].detail})")


def test_the_report_s_first_screen_says_what_another_torch_gave(campaign):
    """After `divfuzz recheck`, each rechecked bug line of `divfuzz report`'s first screen ends with
    what the other torch gave (`reports.issue_markdown.recheck_tag`)."""
    result = CliRunner().invoke(main, ["recheck", "--out", str(campaign), "--python", sys.executable])
    assert result.exit_code == 0, result.output
    report = CliRunner().invoke(main, ["report", "--out", str(campaign)])
    assert report.exit_code == 0, report.output
    screen = report.output.split("## First screen", 1)[1].split("\n## ", 1)[0]
    assert f"still fails in {torch.__version__}]" in screen, screen
