"""The one signal policy of every divfuzz command: SIGINT and SIGTERM stop it with exit code 2.

`timeout` and CI runners signal the whole process group, often more than once. The first
SIGINT or SIGTERM raises KeyboardInterrupt in the main thread; the ones after it are ignored, so
they cannot cut the shutdown short. Each command then unwinds: its workers are killed (they
ignore terminal signals and die with the parent, `divfuzz.fuzzer.engine.worker`), files are written whole
or not at all, and the group (`divfuzz.fuzzer.cli.main`) prints one line and exits 2. Never 1: `gate`
and `repro.py` use 1 for "the compiler diverges", and an interrupted gate is not a regression.
"""

from __future__ import annotations

import signal

INTERRUPTED_EXIT = 2
_received: list[int] = []


def interrupt_once(signum, frame) -> None:
    """SIGINT/SIGTERM: KeyboardInterrupt once, then ignore both while the command stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _received.append(signum)
    raise KeyboardInterrupt


def signal_received() -> bool:
    """Whether a signal has stopped this command. A KeyboardInterrupt raised inside an import
    that catches it (numpy's extension modules turn it into "ImportError: cannot load module more
    than once per process" on the next import) comes back as another exception: it is still the
    signal, not divfuzz's own failure."""
    return bool(_received)


def stop_on_signals() -> None:
    """Install the policy (main thread only; a no-op elsewhere, e.g. under a test runner's thread)."""
    try:
        signal.signal(signal.SIGTERM, interrupt_once)
        signal.signal(signal.SIGINT, interrupt_once)
    except ValueError:  # not the main thread
        pass
