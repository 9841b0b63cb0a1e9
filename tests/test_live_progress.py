"""`divfuzz fuzz`'s live view on a terminal: a bar toward the case count or the budget, cases/s,
and the run's buckets by severity. The rendering is a pure function of the options and a
`Progress`, tested here on a console that is not the terminal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from divfuzz.fuzzer.campaign.loop import CampaignOptions, Progress
from divfuzz.fuzzer.cli.fuzz_command import live_progress, progress_fraction
from divfuzz.records.severity import Severity


def _render(renderable) -> list[str]:
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()


def _progress() -> Progress:
    p = Progress(started=1000.0)
    p.cases, p.findings, p.new_buckets = 12, 6, 4
    p.note_severity(1, Severity.SUSPECT)
    p.note_severity(1, Severity.BUG)  # the bucket's most severe case counts
    p.note_severity(1, Severity.NOISE)
    p.note_severity(2, Severity.SUSPECT)
    p.note_severity(3, Severity.NOISE)
    p.note_severity(4, Severity.NOISE)
    return p


def test_bar_toward_the_case_count_with_rate_and_severity_counts():
    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=40)
    bar, counts = _render(live_progress(opts, _progress(), now=1006.0))
    assert progress_fraction(opts, _progress(), now=1006.0) == 0.3
    assert bar.count("━") == 12  # 30% of the 40-column bar (no colour: only the done part is drawn)
    assert "30%" in bar and "12/40 cases" in bar and "2.00 cases/s" in bar
    assert "bug 1 · suspect 1 · by-design 0 · noise 2" in counts
    assert "6 findings, 4 new buckets" in counts


def test_bar_toward_the_budget():
    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), budget_s=600.0)
    bar, counts = _render(live_progress(opts, _progress(), now=1150.0))
    assert bar.count("━") == 10 and "25%" in bar and "450 s of 600 s left" in bar
    done = _render(live_progress(opts, _progress(), now=2000.0))[0]
    assert done.count("━") == 40 and "100%" in done  # past the budget: full, never more


def test_off_a_terminal_the_lines_stay_plain():
    from divfuzz.fuzzer.cli.fuzz_command import _status_line

    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=40)
    line = _status_line(opts, _progress())
    assert isinstance(line, str) and "12/40 cases" in line and "━" not in line


def test_replays_of_known_specs_do_not_fill_the_bar():
    """`fuzz --replay-known` runs known specs first: they are cases, but not drawn toward --max-cases."""
    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=40)
    p = _progress()
    p.cases, p.replays = 22, 10  # 12 drawn, 10 replayed
    bar, _ = _render(live_progress(opts, p, now=1006.0))
    assert bar.count("━") == 12 and "12/40 cases (+10 known replayed)" in bar
