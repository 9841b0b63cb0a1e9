"""The one check of a number that comes from outside: an option, a spec, a store, a corpus, a baseline.

Invariant: a value that passes `number_problem` is an `int` or `float` (never a `bool`, which
Python counts as an int), finite, inside [low, high] when they are given, and a whole number when
`integer` is asked for. It is compared without converting to float first, so a 401-digit integer is
"out of range", not an OverflowError, and NaN or infinity is refused by name. Every reader of a
number (click options through `checked_number`, spec params, shapes, schema versions, run ids,
Inductor switches) calls this module, so the rule lives once.
"""

from __future__ import annotations

import math
from typing import Any

from divfuzz.records.errors import ConfigError, DivfuzzError


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else f"a {len(str(abs(value)))}-digit integer"
    return text if len(text) <= 80 else text[:77] + "..."


def describe_range(*, low: float | None = None, high: float | None = None, integer: bool = False) -> str:
    """'a whole number from 1 to 10', 'a finite number of at least 0', ..."""
    what = "a whole number" if integer else "a finite number"
    if low is not None and high is not None:
        return f"{what} from {low!r} to {high!r}"
    if low is not None:
        return f"{what} of at least {low!r}"
    if high is not None:
        return f"{what} of at most {high!r}"
    return what


def number_problem(value: Any, *, low: float | None = None, high: float | None = None, integer: bool = False) -> str | None:
    """What `value` should have been (`describe_range`), or None when it is a number in range."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not integer and isinstance(value, float):
        ok = math.isfinite(value)
    if ok and ((low is not None and value < low) or (high is not None and value > high)):
        ok = False
    return None if ok else describe_range(low=low, high=high, integer=integer)


def checked_number(value: Any, what: str, *, low: float | None = None, high: float | None = None, integer: bool = False,
                   error: type[DivfuzzError] = ConfigError):
    """`value` when it is a number in range, else `error` naming `what` and the value."""
    problem = number_problem(value, low=low, high=high, integer=integer)
    if problem is not None:
        raise error(f"{what}: expected {problem} but got {_short(value)}")
    return value


def parse_number(text: str, what: str, *, low: float | None = None, high: float | None = None, integer: bool = False,
                 error: type[DivfuzzError] = ConfigError):
    """A number typed on the command line ('5', '0.1', 'nan', '1e999'), checked like any other."""
    stripped = str(text).strip()
    value: Any = stripped
    if len(stripped) <= 400:  # longer is out of any range divfuzz takes; not worth parsing
        try:
            value = int(stripped)
        except ValueError:
            if not integer:
                try:
                    value = float(stripped)
                except ValueError:
                    pass
    return checked_number(value, what, low=low, high=high, integer=integer, error=error)


# The largest whole number a divfuzz option or stored field takes where nothing smaller is
# natural: SQLite's integer (run and case ids), numpy's and Hypothesis's seeds fit in it.
MAX_INT64 = 2**63 - 1
