"""One command's deadline and where its time went: `PhaseClock`.

`minimize --module --budget B` is a deadline for the whole command, as `fuzz --budget` is: every
phase after the capture gets only what is left, checks `expired()` before it starts a step, and
skips or cuts what it cannot finish, saying so. `phase(name)` adds the wall time of a block to
`seconds[name]` (a phase entered several times, say one ladder rung per graph, adds up), and
`in_flight` names the phase running now, so a run killed at the deadline plus its grace can still
say where it was (`progress` writes both to a file after every phase change).

Invariants: torch-free; the deadline is a `divfuzz.records.deadline.Deadline` (monotonic),
handed to each step as a share (`deadline.share`); `left()` is never negative; callers do not
nest phases, so the recorded seconds of all phases add up to at most the clock's own age.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from divfuzz.records.deadline import Deadline


class PhaseClock:
    """A deadline `budget_s` seconds after creation, and the seconds spent in each named phase."""

    def __init__(self, budget_s: float, *, progress: Path | None = None):
        self.deadline = Deadline.after(budget_s)
        self.budget_s = budget_s
        self.seconds: dict[str, float] = {}
        self.in_flight: str | None = None
        self.cut: list[str] = []  # what the deadline cut or skipped, one readable line each
        self._progress = progress

    def left(self) -> float:
        return self.deadline.left()

    def expired(self) -> bool:
        return self.deadline.expired()

    def note_cut(self, line: str) -> None:
        """Record that the deadline skipped or cut a step (shown in the output and the JSON)."""
        if line not in self.cut:
            self.cut.append(line)
        self._write_progress()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time the block under `name` (added to what `name` already has)."""
        outer, self.in_flight = self.in_flight, name
        self._write_progress()
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - t0
            self.in_flight = outer
            self._write_progress()

    def to_dict(self) -> dict:
        """`phases_s` (seconds per phase, 0.1 s), the budget, the total so far and the cuts."""
        return {
            "phases_s": {k: round(v, 1) for k, v in self.seconds.items()},
            "budget_s": round(self.budget_s, 1),
            "total_s": round(self.deadline.spent(), 1),
            "in_flight": self.in_flight,
            "cut_by_budget": list(self.cut),
        }

    def _write_progress(self) -> None:
        if self._progress is None:
            return
        self._progress.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._progress.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(self._progress)  # whole or absent: a reader never sees half a file


def read_progress(path: Path) -> dict | None:
    """What `PhaseClock` last wrote to `path`, or None when there is no readable file."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
