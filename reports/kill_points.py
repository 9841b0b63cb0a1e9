"""Named places where divfuzz can be made to SIGKILL itself, so that a test kills a real campaign at
a chosen moment of its work (a failpoint, as crash-consistency tests of databases use): the real
store, the real workers and a real SIGKILL, at a phase an outside `kill -9` hits only by luck.

`DIVFUZZ_KILL_AT=<point>` kills the process the first time it reaches `kill_point(<point>)`;
`<point>:<n>` the n-th time. Unset (always, outside tests), `kill_point` does nothing. The points:
- `case-stored`: a case that opened a bucket is committed, its folder not yet written;
- `folder-written`: a bucket folder's files are in `buckets/.tmp-*`, not yet moved into place;
- `folder-moved`: the folder is in place, the store does not record it yet;
- `root-cause-filed`: an analysis's root cause is filed in the open transaction, its folder not written;
- `report`: the run is over, `report.html` is being written.
Torch-free and import-light: the report writers and the campaign share it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

KILL_POINTS = ("case-stored", "folder-written", "folder-moved", "root-cause-filed", "report")

_reached: Counter = Counter()
_lock = threading.Lock()


def kill_point(name: str) -> None:
    """SIGKILL this process here when DIVFUZZ_KILL_AT names `name` (and this is its n-th time)."""
    wanted = os.environ.get("DIVFUZZ_KILL_AT")
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    with _lock:
        _reached[name] += 1
        if _reached[name] >= int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
