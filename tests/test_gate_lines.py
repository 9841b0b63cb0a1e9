"""`divfuzz gate` prints lines that fit the terminal (issue 57: a compiler's error message made
lines of 1,324 characters); the long detail stays whole in its markdown and JSON, and the last line
says so."""

from __future__ import annotations

import io

from rich.console import Console

from divfuzz.fuzzer.cli import gate_command

LONG_ERROR = "new-error: error InductorError: " + "CppCompileError: C++ compile error " * 37 + "at the end"


def _data() -> dict:
    return {"result": "fail", "exit_code": 1, "fuzz": None, "timings": {"total_s": 12.0}, "notes": [],
            "counts": {"passed": 1, "specs": 2, "failed": 1, "improved": 0},
            "machine": {"rows": [{"field": "cpu_model", "baseline": "x" * 150, "current": "y" * 150, "differs": True}]},
            "specs": [{"name": "softmax-float32-bwd", "problems": [LONG_ERROR], "verdict": "error",
                       "moved_bounds": ["grad:x0: ulp bound 4 -> 9 " + "(a very long detail) " * 20]},
                      {"name": "ok-spec", "problems": [], "verdict": "ok", "moved_bounds": []}]}


def _printed(monkeypatch, width: int, **where) -> list[str]:
    screen = Console(file=io.StringIO(), width=width, color_system=None)
    monkeypatch.setattr(gate_command, "out", screen)
    lines = gate_command.GateLines()
    lines.print(screen, "softmax-float32-bwd: error: " + LONG_ERROR + " (3.2 s)")  # the replay's log line of a case
    gate_command._print_outcome(_data(), lines)
    lines.where_whole(**where)
    return screen.file.getvalue().splitlines()


def test_gate_lines_fit_the_terminal_and_say_where_they_are_whole(monkeypatch, tmp_path):
    assert len(LONG_ERROR) > 1300
    for width in (80, 120):
        printed = _printed(monkeypatch, width, markdown_path=tmp_path / "gate.md", json_path=tmp_path / "gate.json")
        assert max(map(len, printed)) <= width, printed
        assert printed[1].startswith("gate FAIL: 1/2 specs pass, 1 fail")
        assert any(line.startswith("  FAIL softmax-float32-bwd: new-error: error InductorError:") and line.endswith("…")
                   for line in printed)
        tail = "".join(line.strip() for line in printed[printed.index(next(p for p in printed if "cut at the terminal" in p)):])
        assert f"whole in {tmp_path / 'gate.md'} and {tmp_path / 'gate.json'}".replace(" ", "") in tail.replace(" ", ""), printed
    # without the files, the last line names the options that write them
    assert "--markdown FILE and --json FILE" in " ".join(" ".join(_printed(monkeypatch, 80)[-3:]).split())


def test_lines_that_fit_say_nothing_more(monkeypatch):
    screen = Console(file=io.StringIO(), width=80, color_system=None)
    monkeypatch.setattr(gate_command, "out", screen)
    lines = gate_command.GateLines()
    lines.print(screen, "spec-a: ok (1.0 s)")
    lines.where_whole()
    assert screen.file.getvalue() == "spec-a: ok (1.0 s)\n"
