"""Time has one owner: a `Deadline` on the monotonic clock, passed down from the command to each
step under it, one `StopReason` saying why work stopped, and one exception for "time's up"
(`divfuzz.records.errors.TimeUp`).

A campaign's budget, an analysis's span inside it, the minimizer's share of that span, a
candidate's run, `minimize --module`'s phases: each is a `Deadline`, and a step given a share of
its caller's (`share`) never ends after it. Invariants:
- every moment is `time.monotonic()`: a wall-clock jump (NTP, a suspended VM) moves no deadline;
  wall-clock time (`time.time()`) is only for timestamps that are stored or shown (`wall_clock`);
- `left()` is never negative, and is infinite for a deadline without an end (`Deadline.never()`);
- a share ends no later than the deadline it was taken from;
- torch-free, like every record.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

from divfuzz.records.errors import TimeUp


class StopReason(enum.Enum):
    """Why a piece of work (a campaign, a minimization, a reduction) stopped."""

    FINISHED = "finished"  # it ran to its own end: nothing left to draw, shrink or try
    TIME_UP = "time's up"  # its deadline passed (`TimeUp`): what it had so far stands, the rest is cut
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or an abort from above: work in flight is dropped
    FAILED = "failed"  # divfuzz's own error stopped it (`divfuzz.records.errors.InternalError`)


@dataclass(frozen=True)
class Deadline:
    """A moment on `time.monotonic()` (`at`; None: no end) and when its clock started (`start`)."""

    at: float | None = None
    start: float = field(default_factory=time.monotonic)

    @classmethod
    def never(cls) -> Deadline:
        """No end: `left()` is infinite and nothing is ever cut."""
        return cls(None)

    @classmethod
    def after(cls, seconds: float | None, *, start: float | None = None) -> Deadline:
        """`seconds` after `start` (a `time.monotonic()` value; default now); None: no end. A
        negative `seconds` gives a deadline already passed."""
        begin = time.monotonic() if start is None else start
        return cls(None if seconds is None else begin + seconds, begin)

    @property
    def bounded(self) -> bool:
        return self.at is not None

    def left(self) -> float:
        """Seconds until the end, never negative; infinite without one."""
        return math.inf if self.at is None else max(0.0, self.at - time.monotonic())

    def spent(self) -> float:
        """Seconds since this deadline's clock started."""
        return time.monotonic() - self.start

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def fits(self, seconds: float) -> bool:
        """Whether `seconds` of work started now would end by the deadline."""
        return self.at is None or time.monotonic() + seconds <= self.at

    def share(self, seconds: float | None) -> Deadline:
        """A sub-task's deadline: `seconds` from now (None: all that is left), and never past this one."""
        now = time.monotonic()
        ends = [t for t in (self.at, None if seconds is None else now + seconds) if t is not None]
        return Deadline(min(ends) if ends else None, now)

    def earlier_by(self, seconds: float) -> Deadline:
        """The same clock, ending `seconds` sooner (a reserve kept for what follows the work)."""
        return self if self.at is None else Deadline(self.at - seconds, self.start)

    def check(self, what: str) -> None:
        """Raise `TimeUp` naming `what` when the deadline has passed."""
        if self.expired():
            raise TimeUp(f"the deadline passed before {what}")

    def wall_clock(self) -> float | None:
        """The end as a `time.time()` timestamp (for a file or a screen), None without one."""
        return None if self.at is None else wall_clock_of(self.at)


def wall_clock_of(moment: float) -> float:
    """A `time.monotonic()` moment as a `time.time()` timestamp, for what is stored or shown."""
    return time.time() - (time.monotonic() - moment)
