"""One command's deadline and where its time went: `PhaseClock`; one analysis's seconds and
compiles per phase: `PhaseTally`.

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


class PhaseTally:
    """Seconds and compiles per named phase of one piece of work (a bucket analysis: its first
    pass, the minimizer, the final ladder, probes and bisector), for the run's timings file and
    `bench --breakdown`. It keeps no deadline (the caller's `Deadline` does).

    Invariants: a phase entered inside another is named `outer/inner`, and time goes to the
    innermost phase running only (exclusive), so the phases' seconds add up to the time spent
    inside outermost phases, never more; a compile (`compiled`) counts in the innermost phase
    running, or in "other" outside every phase."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.compiles: dict[str, int] = {}
        self._stack: list[tuple[str, float]] = []  # (full name, time.monotonic() it last resumed)

    @contextlib.contextmanager
    def phase(self, name: str):
        """Time the block under `name` (inside a running phase: `outer/name`), added to what it has."""
        now = time.monotonic()
        if self._stack:  # the outer phase pauses while this one runs
            outer, since = self._stack[-1]
            self.seconds[outer] = self.seconds.get(outer, 0.0) + now - since
        full = f"{self._stack[-1][0]}/{name}" if self._stack else name
        self.seconds.setdefault(full, 0.0)
        self._stack.append((full, now))
        try:
            yield
        finally:
            end = time.monotonic()
            _, since = self._stack.pop()
            self.seconds[full] += end - since
            if self._stack:  # the outer phase resumes
                self._stack[-1] = (self._stack[-1][0], end)

    def compiled(self, count: int = 1) -> None:
        """`count` compiles ran in the phase running now ("other" outside every phase)."""
        name = self._stack[-1][0] if self._stack else "other"
        self.compiles[name] = self.compiles.get(name, 0) + count

    def to_dict(self) -> dict[str, dict]:
        """{phase: {"s": seconds (ms precision), "compiles": count}}, phases in the order first entered."""
        names = list(self.seconds) + [n for n in self.compiles if n not in self.seconds]
        return {n: {"s": round(self.seconds.get(n, 0.0), 3), "compiles": self.compiles.get(n, 0)} for n in names}
