"""What the fp64 reference means, as rules both of its builders follow: the campaign's graphs
(`divfuzz.generators.build.build_reference`) and a user's captured aten graphs
(`divfuzz.fuzzer.triage.user_module.reference_graph`). Torch-free.

One reference semantics for every path (PyTorch's maintainers judge with `same()` against fp64,
and treat eager's type semantics as what an op means):
- every floating value is computed in float64 and autocast is off: a compiler may compute more
  precisely than eager (precision elision is its documented default);
- a model's own casts are kept: the reference rounds where the model explicitly casts
  (`x.half()`, `x.to(torch.bfloat16)`), unlike autocast's casts, which it drops;
- a Python scalar is rounded where eager rounds it, per op and per device (`eager_rounds_scalar`):
  comparisons round it to the tensor's bfloat16/float16 dtype on every device (issue 173987,
  PR 175807, PR 195223); on the CPU every other binary op but mul and div does too, because
  TensorIterator casts a wrapped CPU scalar to the common dtype (PR 185869, PR 186818's table);
  on CUDA arithmetic keeps the scalar at float32 opmath. With a float32 tensor every op on every
  device computes with the scalar rounded to float32, the common dtype and its opmath alike
  (`scalar_dtype`): `torch.remainder(x, 0.37)` of float32 values near 1e7 is the remainder by
  0.37 rounded to float32, thousands of ULPs from the remainder by the double 0.37;
- a bfloat16 or float16 value a comparison reads is rounded to that dtype first, as eager holds it
  (`rounds_before_comparison`): a comparison's answer is discrete, and a rounding that decides it
  is part of what the model computes, not precision the reference may add (PR 195223 keeps those
  roundings in Inductor by default, issue 195214; no maintainer has called their loss intended).
"""

from __future__ import annotations

import math
import struct

# Tensor methods (and `torch.Tensor.to`) a model calls to cast: their results are kept rounded.
EXPLICIT_CAST_METHODS = frozenset({"to", "type", "half", "float", "bfloat16", "double"})

# Kinds of scalar use, as `eager_rounds_scalar` takes them.
COMPARE, BINARY, MUL_DIV = "compare", "binary", "mul_div"


def eager_rounds_scalar(kind: str, device_type: str) -> bool:
    """Whether eager rounds a Python scalar to a bfloat16/float16 tensor's dtype in an op of
    `kind` (`COMPARE`, `BINARY`: add, sub, remainder, fmod, ...; `MUL_DIV`) on `device_type`."""
    if kind == COMPARE:
        return True
    return kind == BINARY and device_type == "cpu"


def scalar_dtype(kind: str, tensor_dtype: str, device_type: str) -> str | None:
    """The dtype eager computes with a Python scalar in an op of `kind` with a tensor of
    `tensor_dtype` on `device_type`: that dtype where eager rounds the scalar to it
    (`eager_rounds_scalar`), else float32 (the opmath of bfloat16, float16 and float32); None for
    any other tensor dtype (float64 keeps the scalar as it is)."""
    if tensor_dtype == "float32":
        return "float32"
    if tensor_dtype in ("bfloat16", "float16"):
        return tensor_dtype if eager_rounds_scalar(kind, device_type) else "float32"
    return None


def round_scalar(value: float, dtype: str) -> float:
    """`value` as PyTorch rounds a Python scalar to `dtype` (round to nearest even, through float32
    for bfloat16 and float16); ValueError when it does not fit."""
    if dtype == "float64":
        return float(value)
    try:
        f32 = struct.unpack("<f", struct.pack("<f", value))[0]
        if dtype == "float16":
            return struct.unpack("<e", struct.pack("<e", f32))[0]
    except OverflowError:
        raise ValueError(f"scalar {value!r} does not fit {dtype}") from None
    if dtype == "bfloat16":
        bits = struct.unpack("<I", struct.pack("<f", f32))[0]
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
        rounded = struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
        if not math.isfinite(rounded):
            raise ValueError(f"scalar {value!r} does not fit {dtype}")
        return rounded
    if dtype == "float32":
        return f32
    raise ValueError(f"Expected a floating dtype but got dtype={dtype!r}")


# The dtypes whose values a comparison reads rounded in the reference (`rounds_before_comparison`).
ROUNDED_BEFORE_COMPARISON = frozenset({"bfloat16", "float16"})


def rounds_before_comparison(value_dtype: str) -> bool:
    """Whether the reference rounds a value of `value_dtype` (eager's dtype for it) to that dtype
    where a comparison reads it: bfloat16 and float16, whose rounding can decide the answer."""
    return value_dtype in ROUNDED_BEFORE_COMPARISON
