"""README.md holds what a newcomer needs first (issue 35): the two set-up commands on the first
screen (the test command exactly as `.ci/run` runs it), a Quick start that works as written, and
links to docs/ for the rest, in under 150 lines.

The Quick start is run here line by line, as written, in a folder laid out like a checkout (the
corpus and the example module), on a small scale: fewer cases and one corpus spec. Each line is
then held to what the README says it does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _code_block_after(heading: str) -> list[str]:
    """The lines of the first fenced code block under `heading`."""
    section = README[README.index(heading):]
    block = re.search(r"```[a-z]*\n(.*?)```", section, re.S)
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_is_short_and_its_two_set_up_commands_are_on_the_first_screen():
    lines = README.splitlines()
    assert len(lines) <= 150
    first_screen = "\n".join(lines[:30])
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = ci[ci.index('# README: "Run the tests"') + 1]  # the line .ci/run runs
    assert "**Run the main job**" in first_screen and "**Run the tests**" in first_screen
    assert "\npip install torch==2.13.0 -e . && divfuzz fuzz\n" in first_screen
    assert f"\n{test_command}\n" in first_screen


def test_readme_links_lead_somewhere():
    targets = re.findall(r"\]\(([^)#]+)\)", README)
    assert targets and all((ROOT / t).exists() for t in targets), [t for t in targets if not (ROOT / t).exists()]
    for doc in (ROOT / "docs").glob("*.md"):  # the reference moved there links back and to what exists
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), (doc.name, target)


# What "on a small scale" changes, and nothing else: fewer cases, one corpus spec.
SMALL_SCALE = (("--max-cases 30", "--max-cases 8"), ("divfuzz gate --device cpu", "divfuzz gate --device cpu --spec seed-gelu-tanh-bf16"))


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess:
    for written, small in SMALL_SCALE:
        line = line.replace(written, small)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", COLUMNS="100")
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(1500)
def test_the_quick_start_works_as_written(tmp_path):
    commands = _code_block_after("## Quick start")
    assert [c.split()[0:2] for c in commands] == [["divfuzz", "fuzz"], ["divfuzz", "report"], ["python", '"$(find'],
                                                  ["divfuzz", "replay"], ["divfuzz", "minimize"], ["divfuzz", "gate"]]
    assert not re.search(r"buckets/\d{4}", "\n".join(commands))  # no bucket number: numbering is bookkeeping
    shutil.copytree(ROOT / "corpus", tmp_path / "corpus")  # a checkout's corpus and example module
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "modules").symlink_to(ROOT / "tests" / "modules")
    fuzz, report, repro, replay, minimize, gate = (_run(c, tmp_path) for c in commands)

    # 1. a campaign: buckets and root causes by severity; the store, bucket folders and report.html in its own quickstart-out/
    assert fuzz.returncode == 0, fuzz.stdout + fuzz.stderr
    assert "buckets:" in fuzz.stdout and "root causes:" in fuzz.stdout and "divfuzz report --out quickstart-out" in fuzz.stdout
    out = tmp_path / "quickstart-out"
    assert (out / "divfuzz.sqlite").is_file() and (out / "report.html").is_file() and list((out / "buckets").glob("*/repro.py"))
    # 2. the root causes as markdown, each naming a repro.py that is there
    assert report.returncode == 0 and report.stdout.startswith("# divfuzz root causes"), report.stderr
    named = re.findall(r"^\* repro: `(.+?)`$", report.stdout, re.M)
    assert named and all((tmp_path / p).is_file() for p in named)
    assert "## Op coverage" in report.stdout
    # 3. a standalone repro: versions, eager against compiled, exit 1 while it diverges, 0 once gone
    assert repro.returncode in (0, 1), repro.stdout + repro.stderr
    assert repro.stdout.startswith("torch ") and "fp64 triage" in repro.stdout
    last = repro.stdout.rstrip().splitlines()[-1]
    # its last line: divfuzz's severity, rule and output while it diverges (as replay and the report say them)
    assert re.match(r"DIVERGES: [a-z-]+ \([a-z0-9-]+, output \S+\): ", last) if repro.returncode == 1 else last == "eager and compiled agree", last
    # 4. a replay with a switch flipped: the verdict table, the finding and its severity
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "| output |" in replay.stdout and "\nfinding: " in replay.stdout and "\nseverity: " in replay.stdout
    # 5. your own model: capture.json and a folder per root cause in my-bug/
    assert minimize.returncode == 0, minimize.stdout + minimize.stderr
    assert (tmp_path / "my-bug" / "capture.json").is_file() and "headline: " in minimize.stdout
    assert list((tmp_path / "my-bug").glob("*/repro.py")) and list((tmp_path / "my-bug").glob("*/culprit.json"))
    # 6. the gate: 0 pass, 1 a verdict got worse
    assert gate.returncode in (0, 1), gate.stdout + gate.stderr
    assert re.search(r"^gate (PASS|FAIL): ", gate.stdout, re.M)
    assert ("gate PASS" in gate.stdout) == (gate.returncode == 0)
