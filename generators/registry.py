"""The op registry: every op `divfuzz.generators.ops` registers, looked up by name."""

from __future__ import annotations

from divfuzz.generators.opdef import OpDef
from divfuzz.generators.ops import OPS
from divfuzz.records.errors import UnknownOpError


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        known = ", ".join(sorted(OPS))
        raise UnknownOpError(f"unknown op {name!r}; known ops: {known}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(OPS)
