"""Every exception divfuzz raises, in one module: bad input, bad configuration, and divfuzz's own
failures. The CLI maps each to exit code 2 with its one-line message.

A bug in the compiler under test is never one of these: it is a finding (data, see
`divfuzz.records.outcomes`), not an exception. `TimeUp` is no error at all: a step that its
deadline stopped (`divfuzz.records.deadline`), caught by whoever set that deadline.
"""


class DivfuzzError(Exception):
    """Base of divfuzz's own errors: bad input or bad configuration. The CLI maps these to exit 2."""


class SpecError(DivfuzzError):
    """A spec file or dict is malformed: not JSON, a wrong field type, a future schema version."""


class UnknownOpError(SpecError):
    """A spec names an op that the registry does not know."""


class InvalidGraphError(SpecError):
    """A spec is well-formed JSON but not a valid graph: a dangling name, a wrong shape or dtype."""


class UnsafePathError(DivfuzzError):
    """A file or folder name taken from data (a spec's name, a bucket folder) is not a safe slug,
    or would resolve outside the folder it must be written in."""


class TimeUp(Exception):
    """The one "time's up": a step that its `divfuzz.records.deadline.Deadline` left no time for,
    or stopped. Never a verdict (a run the deadline stopped says nothing of how the compiler
    behaves, so nothing of it is recorded) and never an exit code: whoever set the deadline
    catches it and says what was cut."""


class ConfigError(DivfuzzError):
    """A bad option: an unknown backend, a malformed Inductor override, a bad budget."""


class DeviceUnavailableError(DivfuzzError):
    """The requested device does not exist on this machine (e.g. `--device cuda` without a GPU)."""


class StoreError(DivfuzzError):
    """The store file is not a divfuzz store, or is corrupt."""


class InternalError(DivfuzzError):
    """divfuzz's own code failed: building inputs, the fp64 reference, judging, the store, the
    minimizer or a campaign slot. Never a compiler finding: the command stops and exits 2.
    `details` holds the traceback for the log file; the message stays one line."""

    def __init__(self, message: str, *, details: str = ""):
        super().__init__(message)
        self.details = details


class ClusterError(DivfuzzError):
    """The Dask cluster of `fuzz --cluster` failed divfuzz: the scheduler cannot be reached or
    was lost, its workers cannot start divfuzz's processes, or a case lost node after node.
    Never a compiler finding: the campaign stops and exits 2."""


class StoreBusyError(StoreError):
    """Another live campaign holds the store's lock."""


class OutputError(DivfuzzError):
    """An output path that cannot be written: under a regular file, read-only, or a full disk."""


class BaselineError(DivfuzzError):
    """A baseline file is missing, not JSON, or not a divfuzz gate baseline."""


class MinimizeError(DivfuzzError):
    """The case given to the minimizer does not fail its predicate (nothing to minimize)."""


class CompileCacheError(DivfuzzError):
    """Inductor's compile cache gave an error that a compile without the cache does not: the cache
    is corrupt or was tampered with (`divfuzz.fuzzer.engine.compile_cache`). divfuzz's environment,
    never a compiler finding: the command stops and exits 2, naming the cache folder."""
