"""The end of `divfuzz fuzz` holds no line wider than the terminal (issue 35): the run's own facts
(what it did, the graphs compiled, why analyses are pending and the command that finishes them)
wrap onto lines of their own instead of being cut at 80 columns; so does a bug line, whole, its culprit
visible, with its lead bucket's folder beneath it (issue 57). The live view's first line wraps too,
rather than losing its rate and time left past the edge, and it is drawn anew at each refresh.

A real store, written through the `Store` API the campaign uses (`test_root_causes.Campaign`).
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.campaign.loop import CampaignOptions, CampaignResult, Progress
from divfuzz.fuzzer.cli.fuzz_command import live_progress, summary_screen
from divfuzz.fuzzer.store import STORE_NAME
from test_root_causes import Campaign, floor_div, plant_floor_division, unary_chain


def _result(out_dir: Path, run: int, **progress) -> CampaignResult:
    p = Progress(started=time.monotonic() - 95, **progress)
    return CampaignResult(run_id=run, resumed=True, progress=p, store_path=out_dir / STORE_NAME, interrupted=False,
                          cut_at_end=True, pending_analyses=26, pending_by_severity={"bug": 3, "suspect": 20, "noise": 3})


@pytest.mark.parametrize("width", [80, 60])
def test_the_summary_wraps_its_facts_and_bug_lines_whole_and_names_each_bug_s_folder(tmp_path, width):
    out_dir = tmp_path / "a-campaign-folder-with-a-rather-long-name"
    c = Campaign(out_dir)
    plant_floor_division(c)
    long_culprit = "decomposition of aten.div through a rewrite with a very long description " + "y" * 40
    long_ops = ("relu", "abs", "neg", "exp", "sigmoid", "tanh", "log", "sin", "cos", "sign")
    long_bug = c.file(c.find(unary_chain(*long_ops)), unary_chain(*long_ops), long_culprit)  # a long line, new upstream
    c.store.set_bucket_folder(long_bug, str(out_dir / "buckets" / f"{long_bug:04d}-fp32-ulp-a-long-pattern"))
    c.close()
    store = c.reopen()
    buckets = store.buckets(run_id=c.run)
    store.close()
    result = _result(out_dir, c.run, cases=1234, graphs=310, repeats=17, skipped=40, exhausted_slots=1)
    lines = summary_screen(result, buckets, elapsed=95.0, width=width, min_severity="suspect")
    screen = "\n".join(lines)
    assert max(len(line) for line in lines) <= width, screen
    assert len(lines) <= 23 or width < 80, screen  # and report.html's line makes 24
    def whole(text: str) -> bool:  # in the screen, wrapped or not (a path may be split where it is too long)
        return re.sub(r"\s", "", text) in re.sub(r"\s", "", screen)

    # every fact whole, none cut
    assert whole("310 graphs compiled (4.0 inputs each); 17 repeated draws not run again; 1 slot(s) stopped")
    assert whole("budget reached: work still in flight then was dropped (re-run resumes it)")
    assert whole("26 analyses pending (3 bug, 3 noise, 20 suspect)")
    assert whole(f"to finish them: divfuzz minimize --pending --out {out_dir}")
    # the long bug line is wrapped, not cut: its culprit is on the screen whole, its folder beneath
    assert "…" not in screen and "+run" not in screen, screen
    assert whole(f"#{long_bug} 1 case (new this run)  new  {'+'.join(long_ops)} @ {long_culprit}"), screen
    assert whole(f"folder: {out_dir / 'buckets' / f'{long_bug:04d}-fp32-ulp-a-long-pattern'}"), screen
    tail = screen[screen.index("every root cause"):]
    assert re.sub(r"\s", "", tail) == re.sub(r"\s", "", f"every root cause, why and repro: divfuzz report --out {out_dir} "
                                                      "--min-severity suspect")


def test_a_screen_with_more_bugs_than_fit_wraps_those_it_shows_and_counts_the_rest(tmp_path):
    c = Campaign(tmp_path / "out")
    names = ("exp", "sin", "cos", "tanh", "sigmoid", "log", "relu", "abs", "neg", "sign", "sqrt", "rsqrt")
    for op in names:
        bug = c.file(c.find(unary_chain(op)), unary_chain(op),
                     f"inductor lowering of aten.{op} with a culprit long enough to need a second line")
        c.store.set_bucket_folder(bug, str(tmp_path / "out" / "buckets" / f"{bug:04d}-fp32-ulp-{op}"))
    c.close()
    store = c.reopen()
    buckets = store.buckets(run_id=c.run)
    store.close()
    result = CampaignResult(run_id=c.run, resumed=False, progress=Progress(started=0, cases=30), store_path=tmp_path / "out" / STORE_NAME,
                            interrupted=False)
    lines = summary_screen(result, buckets, elapsed=60.0, width=80)
    screen = "\n".join(lines)
    assert len(lines) <= 23 and max(map(len, lines)) <= 80 and "…" not in screen, screen
    shown = [line for line in lines if line.startswith("  #")]
    folders = [line for line in lines if line.startswith(("    folder: ", f"    {tmp_path}"))]
    assert 2 <= len(shown) == len(folders) < len(names), screen
    assert re.search(rf"^  \.\.\. and {len(names) - len(shown)} more bug root causes$", screen, re.M), screen


def test_the_live_view_wraps_its_first_line_instead_of_losing_its_end():
    p = Progress(started=1000.0)
    p.cases, p.findings, p.new_buckets, p.pending_analyses, p.skipped = 1234, 600, 40, 26, 100
    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), budget_s=600.0, max_cases=100000)
    for width in (80, 50):
        console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
        console.print(live_progress(opts, p, now=1150.0, fleet_line="fleet: node-a 4 workers on 2 GPUs, node-b 4 workers, 0 lost"))
        text = console.file.getvalue()
        assert max(len(line) for line in text.splitlines()) <= width
        flat = re.sub(r"\s+", " ", text)
        assert "…" not in text, text
        assert "450 s of 600 s left" in flat and "cases/s" in flat and "0 lost" in flat, text


# ---- `divfuzz report`'s markdown, read on a terminal and rendered by a CommonMark renderer ----------


def test_report_markdown_reads_as_itself_and_renders_no_html_from_the_store(tmp_path):
    from markdown_it import MarkdownIt

    from divfuzz.fuzzer.store import Store
    from divfuzz.records.buckets import BucketKey
    from divfuzz.reports.markdown import buckets_markdown

    store = Store(tmp_path / STORE_NAME)
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    from divfuzz.records.buckets import CulpritKey

    hostile = BucketKey("bf16-ulp", "bfloat16", "cpu", ("mul", "<img src=x onerror=alert(1)>"), rule="float-gross-worse",
                        culprit=CulpritKey("inductor", "lowerings", "<script>alert(2)</script>"))
    for i, (key, severity, detail) in enumerate((
            (hostile, "bug", "compiled > 4 ULP further from fp64 &amp; <b>bold</b> \\<i>"),
            (BucketKey("fp32-ulp", "float32", "cpu", ("add", "mul"), backward=True, rule="few-ulps"), "noise", "1 ULP"),
            (BucketKey("fp32-ulp", "float32", "cpu", ("sub",), backward=True, rule="few-ulps"), "noise", "1 ULP"))):
        store.add_case(run_id=run_id, slot=0, idx=i, spec_digest=f"d{i}", spec_json="{}", device="cpu", config={},
                       verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind=key.kind, key=key,
                       judged=bucket_severity(key, {"severity": severity, "rule": key.rule, "output": "o", "detail": detail}))
    text = buckets_markdown(store)
    store.close()
    assert "&gt;" not in text and "&lt;" not in text
    assert "compiled > 4 ULP further from fp64" in text  # as stored, on a terminal
    html = MarkdownIt("commonmark").render(text)
    for tag in ("<img", "<script", "<b>", "<i>"):
        assert tag not in html, tag  # shown as text (entities in the HTML), never a tag
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "&amp;amp;" in html and "\\&lt;i&gt;" in html  # the text itself, rendered
    folded = [line for line in text.splitlines() if line.startswith("- noise")]
    assert folded == ["- noise, culprit not attributed yet: 2 buckets, 2 cases, 2 root causes (buckets 2, 3)"]


def test_a_root_cause_s_pattern_line_is_short_and_points_to_its_spec():
    from divfuzz.reports.markdown import PATTERN_CHARS, pattern_text
    from divfuzz.reports.root_causes import graph_pattern
    from tests.seed_specs import layer_norm_linear

    short = graph_pattern(layer_norm_linear(rows=4, dim=8).to_dict())
    assert pattern_text(short) == f"`{short}`"
    nodes = [{"name": f"v{i}", "op": "mul", "inputs": ["x0", "x0" if i == 1 else f"v{i - 1}"], "params": {},
              "dtype": "float32", "shape": [4, 8]} for i in range(1, 31)]
    spec = {"schema_version": 1, "inputs": [{"name": "x0", "shape": [4, 8], "dtype": "float32", "requires_grad": True,
                                             "init": "data"}],
            "nodes": nodes, "outputs": ["v30"], "recipe": {"kind": "normal", "seed": 0}, "autocast": None, "backward": True}
    long = graph_pattern(spec)
    assert long is not None and len(long) > 600
    line = pattern_text(long, spec="divfuzz-out/buckets/0007-x/spec.json")
    assert len(line) <= PATTERN_CHARS + 80 and "…" in line
    assert line.endswith("(30 ops; whole in `divfuzz-out/buckets/0007-x/spec.json`)")


def test_plain_progress_lines_are_never_the_same_line_twice():
    """Off a terminal, the end of a run waits on its analyses and the view is updated again and again
    at the same case count: a line is printed only when the cases or the open analyses move."""
    from divfuzz.fuzzer.cli.fuzz_command import _LineView
    from divfuzz.fuzzer.cli.options import console

    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=30)
    p = Progress(started=time.time())
    view = _LineView(opts)
    with console.capture() as captured:
        for cases, pending in ((9, 0), (10, 0), (10, 0), (20, 3), (30, 3), (30, 3), (30, 2), (30, 2), (30, 0)):
            p.cases, p.pending_analyses = cases, pending
            view.update(p)
    lines = [re.sub(r"\(.*?/min\)", "", line) for line in captured.get().splitlines()]
    assert len(lines) == 5 and len(set(lines)) == 5, lines


def test_a_low_confidence_upstream_match_reads_possibly_on_the_first_screen_never_known(tmp_path):
    """Issue 57: a match whose culprit names something else is 'possibly pytorch#N' on the first
    screen, as the report and issue.md say it; a raw bucket's key without a culprit is matched
    with its root cause's culprit, so the two never disagree."""
    from dataclasses import replace
    from types import SimpleNamespace

    from divfuzz.records.buckets import BucketKey
    from divfuzz.reports.root_causes import CauseTotals, known_of_buckets, root_cause_groups, summary_lines, upstream_of

    assert upstream_of("known: pytorch#195214 (closed)") == "pytorch#195214"
    assert upstream_of("possibly: pytorch#195214 (closed)") == "possibly pytorch#195214"
    assert upstream_of("new") == "new"
    c = Campaign(tmp_path / "out")
    plant_floor_division(c)
    [rc] = root_cause_groups(c.store.buckets())
    c.close()
    assert rc.known.startswith("known: pytorch#197895")
    weak = replace(rc, totals=CauseTotals(buckets=1, cases=rc.cases, severities=(("bug", 1),),
                                          known=rc.known.replace("known: ", "possibly: ", 1)))
    [line] = summary_lines([weak], width=200)
    assert "  possibly pytorch#197895  " in line and "known" not in line, line
    [line] = summary_lines([weak, rc], width=200)  # one line per issue: the surer match names it
    assert "  pytorch#197895  " in line, line
    # An amax backward's NaN (pytorch#195214's pattern) in a raw bucket whose key has no culprit:
    raw = SimpleNamespace(key=BucketKey("nan-inf", "float32", "cpu", ops=("amax", "div"), autocast="bfloat16", backward=True,
                                        rule="nan-inf-new"), minimized=None, severity_reason={"rule": "nan-inf-new"})
    assert known_of_buckets([raw], culprit="-", severity="bug").startswith("known: pytorch#195214")
    assert known_of_buckets([raw], culprit="inductor lowering of aten.amax", severity="bug").startswith("possibly: pytorch#195214")
    # A fixed entry's pattern (pytorch#177740's approximate division, fixed after 2.11) on the torch of the bucket's run:
    division = SimpleNamespace(key=BucketKey("int-valued", "float16", "cuda", ops=("div",), rule="int-valued-wrong",
                                             mechanism="approximate-division"),
                               minimized=None, severity_reason={"rule": "int-valued-wrong"}, first_run_id=1)
    assert known_of_buckets([division], culprit="-", severity="bug", torch_versions={1: "2.11.0+cu130"}).startswith("known: pytorch#177740")
    assert known_of_buckets([division], culprit="-", severity="bug", torch_versions={1: "2.13.0+cu130"}).startswith("possibly: pytorch#177740")


def test_a_bug_s_folder_is_named_under_the_campaign_folder_as_the_user_named_it(tmp_path, monkeypatch):
    from divfuzz.reports.root_causes import _under

    monkeypatch.chdir(tmp_path)
    assert _under(str(tmp_path / "divfuzz-out" / "buckets" / "0006-x"), "divfuzz-out") == "divfuzz-out/buckets/0006-x"
    assert _under("/elsewhere/buckets/0006-x", "divfuzz-out") == "/elsewhere/buckets/0006-x"
