"""Every bug bucket of a real campaign gets an `issue.py` a maintainer pastes as it is: plain torch
(no `divfuzz` in it), at most 30 lines for a graph of 3 ops or fewer, exiting 1 on the device it
names while the bug is there; and an `issue.md` in PyTorch's bug template. A bucket that is not a
bug gets neither (issue 39).

The default tier runs a small campaign of the real Inductor with a planted NaN behind it
(`planted:inductor_nan_first`: Inductor's own kernels, logs and warnings, then a certain bug);
tests/test_repro_one_line.py checks a type change's and a compile error's issue.py on one tiny
spec each. The slow tier runs a campaign of the real Inductor alone, minimization on, and
planted campaigns of every bug rule.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from divfuzz.fuzzer.campaign.loop import CampaignOptions, run_campaign
from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.generators.validate import load_spec
from divfuzz.records.config import CompileConfig
from divfuzz.reports.issue_folder import ISSUE_MARKDOWN, ISSUE_SCRIPT
from divfuzz.reports.issue_markdown import NO_MATCH

PLANTED = "divfuzz.fuzzer.engine.planted:"
# The template's fields (pytorch/pytorch .github/ISSUE_TEMPLATE/pt2-bug-report.yml) and ours.
TEMPLATE_FIELDS = ("### 🐛 Describe the bug", "### Error logs", "### Versions", "**fp64 verdict.**", "**Culprit.**",
                   "### Matching upstream issues")


def _campaign(tmp_path: Path, backend: str, device: str = "cpu", **kw):
    kw.setdefault("max_cases", 3)
    opts = CampaignOptions(device=device, out_dir=tmp_path, config=CompileConfig(backend=backend), **kw)
    result = run_campaign(opts)
    store = Store(tmp_path / STORE_NAME)
    try:
        return store.buckets(run_id=result.run_id)
    finally:
        store.close()


def check_issue_files(buckets, *, device: str, planted: bool) -> int:
    """The issue files of every bucket: a bug's issue.py fails as the bug does; the others have none.
    Returns how many bug buckets there were."""
    bugs = 0
    for b in buckets:
        folder = Path(b.folder)
        script, markdown = folder / ISSUE_SCRIPT, folder / ISSUE_MARKDOWN
        if b.severity != "bug":
            assert not script.exists() and not markdown.exists(), (str(b.key), b.severity)
            continue
        bugs += 1
        assert script.exists() and markdown.exists(), (str(b.key), sorted(p.name for p in folder.iterdir()))
        text = script.read_text()
        # code that names divfuzz (a comment may say what divfuzz checked: a pin's reason)
        mentions = [line for line in text.splitlines() if "divfuzz" in line.split("#", 1)[0]]
        # A planted backend is divfuzz's own code: its import is then the one line that names it.
        allowed = "backend = getattr(importlib.import_module('divfuzz.fuzzer.engine.planted'), "
        assert len(mentions) == (1 if planted else 0) and all(m.startswith(allowed) for m in mentions), mentions
        assert "import divfuzz" not in text and "from divfuzz" not in text
        spec = load_spec((folder / "spec.json").read_text(), source=str(folder))
        if len(spec.nodes) <= 3:
            assert len(text.splitlines()) <= 30, (str(b.key), len(text.splitlines()), text)
        assert device == "cpu" or repr(device) in text  # it runs on the device it names
        proc = subprocess.run([sys.executable, ISSUE_SCRIPT], cwd=folder, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1, (str(b.key), text, proc.stdout[-2000:], proc.stderr[-3000:])
        md = markdown.read_text()
        assert all(field in md for field in TEMPLATE_FIELDS), md
        # a NaN/Inf finding is judged by where NaN/Inf are, never by same()'s RMSE (`fp64_verdict`)
        numeric = b.key.kind not in ("compile-error", "runtime-error", "crash", "hang", "type-mismatch", "nan-inf")
        assert not numeric or "torch._dynamo.utils.same" in md, md
        assert text.strip() in md  # issue.py inline
        assert f"torch: {torch.__version__}" in md
        assert "pytorch#" in md or NO_MATCH in md
    return bugs


def test_a_campaign_of_inductor_with_a_planted_nan_gives_every_bug_bucket_a_failing_issue_py(tmp_path):
    buckets = _campaign(tmp_path, PLANTED + "inductor_nan_first", seed=5, max_cases=2, max_ops=3)
    assert check_issue_files(buckets, device="cpu", planted=True) >= 1
    # `divfuzz report --bucket N --issue` prints the bug's issue.md as it is, ready to paste
    bug = next(b for b in buckets if b.severity == "bug")
    printed = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--bucket", str(bug.id), "--issue"])
    assert printed.exit_code == 0, printed.output
    assert printed.output == (Path(bug.folder) / ISSUE_MARKDOWN).read_text()
    missing = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--bucket", "999", "--issue"])
    assert missing.exit_code == 2 and "no bucket 999" in missing.output


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["nan_first", "uint8_flip", "drift", "wrong_dtype", "compile_error"])
def test_planted_campaigns_of_every_numeric_rule_give_failing_issue_scripts(tmp_path, backend):
    ops = ("e8m0_encode",) if backend == "uint8_flip" else None
    buckets = _campaign(tmp_path, PLANTED + backend, seed=1, max_cases=4, max_ops=3, ops=ops, minimize=True,
                        minimize_budget_s=30)
    check_issue_files(buckets, device="cpu", planted=True)


@pytest.mark.slow
def test_a_campaign_of_the_real_inductor_gives_every_bug_bucket_a_failing_issue_py(tmp_path):
    buckets = _campaign(tmp_path, "inductor", seed=11, max_cases=60, minimize=True, minimize_budget_s=60)
    check_issue_files(buckets, device="cpu", planted=False)


@pytest.mark.gpu
def test_on_cuda_every_bug_bucket_gets_an_issue_py_that_fails_there(tmp_path):
    buckets = _campaign(tmp_path / "planted", PLANTED + "inductor_nan_first", device="cuda", seed=5, max_cases=3, max_ops=3)
    assert check_issue_files(buckets, device="cuda", planted=True) >= 1
    buckets = _campaign(tmp_path / "inductor", "inductor", device="cuda", seed=21, max_cases=60, minimize=True,
                        minimize_budget_s=60)
    check_issue_files(buckets, device="cuda", planted=False)
