"""The dtype vocabulary: every dtype name a spec may hold, and what divfuzz knows about each.

Torch-free data, so that every layer can use it: records (what a backend compiles), generators
(the IR, the op registry, the strategies; `divfuzz.generators.build` maps these names to torch dtypes) and
oracles (ULPs of a floating dtype). A new dtype is one `DtypeInfo` row here.

Invariants: names are torch's own (`torch.<name>` exists for each); the tuples below are views of
`DTYPES` in its order, and that order is part of what the strategies draw (a seed names one graph).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DtypeInfo:
    """One dtype. Floating ones carry their format (explicit mantissa bits, the smallest normal
    exponent, the largest finite value); integer ones their range (bool as 0..1)."""

    name: str
    is_float: bool
    mantissa_bits: int | None = None
    min_exponent: int | None = None
    max_finite: float | None = None
    int_range: tuple[int, int] | None = None


DTYPES: dict[str, DtypeInfo] = {
    d.name: d
    for d in (
        DtypeInfo("float32", True, mantissa_bits=23, min_exponent=-126, max_finite=3.4028234663852886e38),
        DtypeInfo("bfloat16", True, mantissa_bits=7, min_exponent=-126, max_finite=3.3895313892515355e38),
        DtypeInfo("float16", True, mantissa_bits=10, min_exponent=-14, max_finite=65504.0),
        DtypeInfo("float64", True, mantissa_bits=52, min_exponent=-1022, max_finite=1.7976931348623157e308),
        DtypeInfo("uint8", False, int_range=(0, 255)),
        DtypeInfo("int8", False, int_range=(-128, 127)),
        DtypeInfo("int32", False, int_range=(-(2**31), 2**31 - 1)),
        DtypeInfo("int64", False, int_range=(-(2**63), 2**63 - 1)),
        DtypeInfo("bool", False, int_range=(0, 1)),
    )
}

# Every dtype a spec's tensor may have, floating ones first.
ALL_DTYPES: tuple[str, ...] = tuple(DTYPES)
FLOAT_DTYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.is_float)
INT_DTYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if not d.is_float)
# The floating dtypes graph data is drawn in, a cast draws its target from, and a backend declares
# (float64 is the reference's dtype, not a case's).
DATA_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
# The low-precision dtypes a spec's autocast region may run in.
AUTOCAST_DTYPES: tuple[str, ...] = ("bfloat16", "float16")
# Explicit mantissa bits of each floating dtype: 2**bits is where its spacing reaches 1.
MANTISSA_BITS: dict[str, int] = {n: d.mantissa_bits for n, d in DTYPES.items() if d.mantissa_bits is not None}


def is_float(name: str) -> bool:
    """Whether `name` is a floating dtype of the vocabulary (False for an unknown name)."""
    info = DTYPES.get(name)
    return info is not None and info.is_float


def promote(a: str, b: str) -> str:
    """The dtype torch's type promotion gives two floating tensors of dtypes `a` and `b`: the
    same dtype, else the smallest that holds both (bfloat16 with float16 is float32)."""
    if a == b:
        return a
    if "float64" in (a, b):
        return "float64"
    return "float32"
