"""What the compiler prints, kept off divfuzz's terminal: a worker's stdout and stderr go to a file.

Inductor's and Dynamo's logging (the `torch` logger hierarchy writes to the process's stderr),
Python warnings (`UserWarning: bf16 and fp16 are mixed in the scheduler node`), C++ and Triton
output, and a dying process's last words are all written to file descriptors 1 and 2 of the
worker (and of the compile subprocesses it starts, which inherit them). `redirect_output` points
both at a file as the worker starts; `OutputCapture` is the parent's end: after each request the
parent `take`s what was written, and a bucket keeps it as `compile.log`.

Invariants: the file is the worker's own (made by the parent, one per `Worker`, removed by
`close`); the child opens it append-only, so the parent may empty it between requests; nothing
divfuzz itself must show the user is written by a worker (its answers go through the pipe).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

# What one `take` returns at most: the first and last halves of a larger output (a compile can
# print one line per IR node, for every graph an analysis compiles).
MAX_TAKE_CHARS = 2_000_000


class OutputCapture:
    """The parent's end of one worker's captured output (a temporary file)."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="divfuzz-worker-", suffix=".log")
        os.close(fd)

    def take(self) -> str:
        """What the worker wrote since the last `take`, as text (undecodable bytes replaced), and empty the file."""
        try:
            with open(self.path, "r+b") as f:
                data = f.read()
                f.truncate(0)
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        if len(text) > MAX_TAKE_CHARS:
            half = MAX_TAKE_CHARS // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"
        return text

    def close(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def redirect_output(path: str) -> None:
    """In a worker, first thing: file descriptors 1 and 2 (and so `sys.stdout`, `sys.stderr`, every
    logging handler on them, and the subprocesses it starts) write to `path`, appending, each
    line as it comes."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    for stream, target in ((sys.stdout, 1), (sys.stderr, 2)):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
        os.dup2(fd, target)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


def flush_output() -> None:
    """Push what Python buffered to the file, before the parent takes it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def show_warnings_again() -> None:
    """Let each case's warnings be printed again: Python shows a warning once per place per process
    (its registries), and a worker runs many cases. Invalidates the registries as a change of the
    filters does (CPython's `_filters_mutated`), keeping the filters themselves."""
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
