"""Every error that divfuzz raises for bad input to the IR, in one place.

A bug in the compiler under test is never one of these: it is a finding (data), not an exception.
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
