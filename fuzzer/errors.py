"""divfuzz's own errors raised by the engine (all map to exit code 2 in the CLI)."""

from generators.errors import DivfuzzError


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


class StoreBusyError(StoreError):
    """Another live campaign holds the store's lock."""


class OutputError(DivfuzzError):
    """An output path that cannot be written: under a regular file, read-only, or a full disk."""
