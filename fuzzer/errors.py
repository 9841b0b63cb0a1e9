"""divfuzz's own errors raised by the engine (all map to exit code 2 in the CLI)."""

from generators.errors import DivfuzzError


class ConfigError(DivfuzzError):
    """A bad option: an unknown backend, a malformed Inductor override, a bad budget."""


class DeviceUnavailableError(DivfuzzError):
    """The requested device does not exist on this machine (e.g. `--device cuda` without a GPU)."""


class StoreError(DivfuzzError):
    """The store file is not a divfuzz store, or is corrupt."""
