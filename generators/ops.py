"""The registered ops: norms, activations, linears, pointwise, reductions, casts, integer encodings.

Rules shared by all ops (they make every drawn graph valid by construction):
- data inputs are floating; only encodings and counts produce integers, and nothing consumes an
  integer value (integer values are always graph outputs);
- binary ops take two values of the same shape;
- weights have the data input's dtype, except under autocast, where they stay float32 as a
  model's parameters would.
Each op's meaning is written once, as its `code` template: a Python expression that
`generators.build` compiles into the function that builds the graph (and its float64 reference)
and that `reports.repro` prints into `repro.py`. In templates, `D(torch.X)` is the dtype map:
identity in the real graph, float64 for floating dtypes in the reference.

Every op declares its `params` schema; `validate_spec` holds every loaded spec to it, and each
`draw_params` draws only inside it. `code` templates print a parameter only through `_num`
(the `repr` of a finite int or float) or a lookup table (`_BOOL`, `_DTYPE_CODE`, `_ROUND`,
`_CMP`, ...), so no string from a spec file ever becomes Python source.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from generators.opdef import Choice, Flag, FloatRange, IntRange, JumpRule, Meta, OpDef, WeightSpec

# Every registered op by name, in registration order (`generators.registry` looks them up).
OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is registered twice")
    OPS[op.name] = op
    return op

FLOATS = ("float32", "bfloat16", "float16")
INV_SQRT2 = 0.7071067811865476
GELU_TANH_C = 0.7978845608028654


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    return "float32"


def _one_float(metas: tuple[Meta, ...]) -> bool:
    return len(metas) == 1 and metas[0].is_float and len(metas[0].shape) >= 1


def _two_same(metas: tuple[Meta, ...]) -> bool:
    return len(metas) == 2 and all(m.is_float for m in metas) and metas[0].shape == metas[1].shape


def _same(metas, p):
    return metas[0]


def _same_binary(metas, p):
    return Meta(metas[0].shape, _promote(metas[0].dtype, metas[1].dtype))


def _eps(draw) -> float:
    return draw(st.sampled_from([1e-5, 1e-6, 1e-12, 1e-3]))


def _num(v: Any) -> str:
    """A validated number as Python source; anything else is refused (never pasted as text)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"expected a finite number for a code template but got {v!r}")
    return repr(int(v)) if isinstance(v, int) else repr(float(v))


# Lookup tables: the only way a string or bool parameter reaches generated code.
_BOOL = {True: "True", False: "False"}
_DTYPE_CODE = {d: f"torch.{d}" for d in ("float32", "bfloat16", "float16", "float64", "uint8", "int8", "int32", "int64", "bool")}

# Parameter schemas shared by several ops. Ranges are far wider than what is drawn, so that
# hand-written and minimized specs load, but every value is finite and of its declared type.
EPS = FloatRange(0.0, 1.0)
THRESHOLD = FloatRange(-1e30, 1e30)
NORM_PARAMS = {"eps": EPS, "affine": Flag()}


# ---------------------------------------------------------------------------------------------
# Norms
# ---------------------------------------------------------------------------------------------


def _ln_weights(metas, p):
    d = metas[0].shape[-1]
    if not p.get("affine", True):
        return ()
    return (WeightSpec("weight", (d,), "near_one"), WeightSpec("bias", (d,), "near_zero"))


def _code_layer_norm(a, p):
    w, b = (a[1], a[2]) if p["affine"] else ("None", "None")
    return f"F.layer_norm({a[0]}, ({a[0]}.shape[-1],), {w}, {b}, eps={_num(p['eps'])})"


register(
    OpDef(
        name="layer_norm",
        family="norm",
        arity=1,
        accepts=_one_float,
        infer=_same,
        code=_code_layer_norm,
        params=NORM_PARAMS,
        draw_params=lambda draw, metas: {"eps": _eps(draw), "affine": draw(st.booleans())},
        weights=_ln_weights,
    )
)


def _code_layer_norm_manual(a, p):
    x = a[0]
    core = (
        f"(({x} - {x}.mean(-1, keepdim=True)) / torch.sqrt(({x} - {x}.mean(-1, keepdim=True)).pow(2)"
        f".mean(-1, keepdim=True) + {_num(p['eps'])}))"
    )
    return f"{core} * {a[1]} + {a[2]}" if p["affine"] else core


register(
    OpDef(
        name="layer_norm_manual",
        family="norm",
        arity=1,
        accepts=_one_float,
        infer=_same,
        code=_code_layer_norm_manual,
        params=NORM_PARAMS,
        draw_params=lambda draw, metas: {"eps": _eps(draw), "affine": draw(st.booleans())},
        weights=_ln_weights,
    )
)


def _rms_weights(metas, p):
    return (WeightSpec("weight", (metas[0].shape[-1],), "near_one"),) if p.get("affine", True) else ()


register(
    OpDef(
        name="rms_norm",
        family="norm",
        arity=1,
        accepts=_one_float,
        infer=_same,
        code=lambda a, p: f"F.rms_norm({a[0]}, ({a[0]}.shape[-1],), {a[1] if p['affine'] else 'None'}, eps={_num(p['eps'])})",
        params=NORM_PARAMS,
        draw_params=lambda draw, metas: {"eps": _eps(draw), "affine": draw(st.booleans())},
        weights=_rms_weights,
    )
)


register(
    OpDef(
        name="rms_norm_manual",
        family="norm",
        arity=1,
        accepts=_one_float,
        infer=_same,
        code=lambda a, p: (
            f"{a[0]} * torch.rsqrt({a[0]}.pow(2).mean(-1, keepdim=True) + {_num(p['eps'])})"
            + (f" * {a[1]}" if p["affine"] else "")
        ),
        params=NORM_PARAMS,
        draw_params=lambda draw, metas: {"eps": _eps(draw), "affine": draw(st.booleans())},
        weights=_rms_weights,
    )
)


def _channels(meta: Meta) -> int:
    return meta.shape[1]


def _gn_accepts(metas):
    return _one_float(metas) and len(metas[0].shape) >= 2 and metas[0].shape[1] >= 2


def _gn_params(draw, metas):
    c = _channels(metas[0])
    divisors = [g for g in range(1, c + 1) if c % g == 0 and g <= 32]
    return {"groups": draw(st.sampled_from(divisors)), "eps": _eps(draw), "affine": draw(st.booleans())}


def _gn_infer(metas, p):
    if _channels(metas[0]) % p["groups"]:
        raise ValueError(f"groups={p['groups']} does not divide the {_channels(metas[0])} channels")
    return metas[0]


def _gn_weights(metas, p):
    c = _channels(metas[0])
    if not p["affine"]:
        return ()
    return (WeightSpec("weight", (c,), "near_one"), WeightSpec("bias", (c,), "near_zero"))


register(
    OpDef(
        name="group_norm",
        family="norm",
        arity=1,
        accepts=_gn_accepts,
        infer=_gn_infer,
        code=lambda a, p: (
            f"F.group_norm({a[0]}, {_num(p['groups'])}, {a[1] if p['affine'] else 'None'}, "
            f"{a[2] if p['affine'] else 'None'}, eps={_num(p['eps'])})"
        ),
        params={"groups": IntRange(1, 1024), **NORM_PARAMS},
        draw_params=_gn_params,
        weights=_gn_weights,
    )
)


def _bn_weights(metas, p):
    c = _channels(metas[0])
    return (
        WeightSpec("running_mean", (c,), "near_zero", trainable=False),
        WeightSpec("running_var", (c,), "near_one", trainable=False),
        WeightSpec("weight", (c,), "near_one"),
        WeightSpec("bias", (c,), "near_zero"),
    )


register(
    OpDef(
        name="batch_norm_eval",
        family="norm",
        arity=1,
        accepts=_gn_accepts,
        infer=_same,
        code=lambda a, p: f"F.batch_norm({a[0]}, {a[1]}, {a[2]}, {a[3]}, {a[4]}, training=False, eps={_num(p['eps'])})",
        params={"eps": EPS},
        draw_params=lambda draw, metas: {"eps": _eps(draw)},
        weights=_bn_weights,
    )
)

# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def _unary(name, family, code, **extra):
    register(OpDef(name=name, family=family, arity=1, accepts=_one_float, infer=_same, code=code, **extra))


_unary("gelu", "activation", lambda a, p: f"F.gelu({a[0]})")
_unary("gelu_tanh", "activation", lambda a, p: f"F.gelu({a[0]}, approximate='tanh')")
_unary("gelu_manual", "activation", lambda a, p: f"0.5 * {a[0]} * (1 + torch.erf({a[0]} * {INV_SQRT2!r}))")
_unary("silu", "activation", lambda a, p: f"F.silu({a[0]})")
_unary("sigmoid", "activation", lambda a, p: f"torch.sigmoid({a[0]})")
_unary("relu", "activation", lambda a, p: f"torch.relu({a[0]})")
_unary("elu", "activation", lambda a, p: f"F.elu({a[0]})")
_unary("tanh", "activation", lambda a, p: f"torch.tanh({a[0]})")
_unary("softmax", "activation", lambda a, p: f"torch.softmax({a[0]}, dim=-1)")
_unary("log_softmax", "activation", lambda a, p: f"torch.log_softmax({a[0]}, dim=-1)")

register(
    OpDef(
        name="gate",
        family="activation",
        arity=2,
        accepts=_two_same,
        infer=_same_binary,
        code=lambda a, p: f"{a[0]} * torch.sigmoid({a[1]})",
    )
)

# ---------------------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------------------

OUT_FEATURES = (8, 24, 48, 64, 96, 100, 128, 160, 192)


def _linear_params(draw, metas):
    return {"out_features": draw(st.sampled_from(OUT_FEATURES)), "bias": draw(st.booleans())}


def _linear_infer(metas, p):
    return Meta(metas[0].shape[:-1] + (p["out_features"],), metas[0].dtype)


def _linear_weights(metas, p):
    w = (WeightSpec("weight", (p["out_features"], metas[0].shape[-1]), "fan_in"),)
    return w + ((WeightSpec("bias", (p["out_features"],), "near_zero"),) if p["bias"] else ())


register(
    OpDef(
        name="linear",
        family="linear",
        arity=1,
        accepts=_one_float,
        infer=_linear_infer,
        code=lambda a, p: f"F.linear({a[0]}, {a[1]}, {a[2] if p['bias'] else 'None'})",
        params={"out_features": IntRange(1, 4096), "bias": Flag()},
        draw_params=_linear_params,
        weights=_linear_weights,
    )
)

register(
    OpDef(
        name="matmul",
        family="linear",
        arity=1,
        accepts=_one_float,
        infer=_linear_infer,
        code=lambda a, p: f"{a[0]} @ {a[1]}",
        params={"out_features": IntRange(1, 4096)},
        draw_params=lambda draw, metas: {"out_features": draw(st.sampled_from(OUT_FEATURES))},
        weights=lambda metas, p: (WeightSpec("weight", (metas[0].shape[-1], p["out_features"]), "fan_in"),),
    )
)

# ---------------------------------------------------------------------------------------------
# Pointwise
# ---------------------------------------------------------------------------------------------

register(
    OpDef(
        name="add",
        family="pointwise",
        arity=2,
        accepts=_two_same,
        infer=_same_binary,
        code=lambda a, p: f"{a[0]} + {a[1]}",
    )
)
register(
    OpDef(
        name="mul",
        family="pointwise",
        arity=2,
        accepts=_two_same,
        infer=_same_binary,
        code=lambda a, p: f"{a[0]} * {a[1]}",
    )
)
_unary("abs", "pointwise", lambda a, p: f"torch.abs({a[0]})")
_unary("exp", "pointwise", lambda a, p: f"torch.exp({a[0]})")
_unary("log", "pointwise", lambda a, p: f"torch.log({a[0]})")
_unary("sign", "pointwise", lambda a, p: f"torch.sign({a[0]})")
_unary(
    "add_eps",
    "pointwise",
    lambda a, p: f"{a[0]} + {_num(p['eps'])}",
    params={"eps": EPS},
    draw_params=lambda draw, metas: {"eps": draw(st.sampled_from([1e-7, 1e-6, 1e-5, 1e-3]))},
)

DIVISORS = (3.0, 7.0, 0.1, 0.3, 2.5, -1.5)


_ROUNDING_MODE_CODE = {None: "None", "floor": "'floor'", "trunc": "'trunc'"}


_unary(
    "div",
    "pointwise",
    lambda a, p: f"torch.div({a[0]}, {_num(p['divisor'])}, rounding_mode={_ROUNDING_MODE_CODE[p['mode']]})",
    params={"divisor": FloatRange(-1e30, 1e30, nonzero=True), "mode": Choice(tuple(_ROUNDING_MODE_CODE))},
    draw_params=lambda draw, metas: {
        "divisor": draw(st.sampled_from(DIVISORS)),
        "mode": draw(st.sampled_from([None, "floor", "trunc"])),
    },
)

_CMP = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "=="}


def _where_params(draw, metas):
    return {
        "cmp": draw(st.sampled_from(sorted(_CMP))),
        "against": draw(st.sampled_from(["tensor", "scalar"])),
        "threshold": draw(st.sampled_from([0.0, 0.5, -1.0, 1.0])),
    }


def _where_cond(a, b, p):
    rhs = b if p["against"] == "tensor" else _num(p["threshold"])
    return f"{a} {_CMP[p['cmp']]} {rhs}"


register(
    OpDef(
        name="where_cmp",
        family="compare",
        arity=2,
        accepts=_two_same,
        infer=_same_binary,
        code=lambda a, p: f"torch.where({_where_cond(a[0], a[1], p)}, {a[0]}, {a[1]})",
        params={"cmp": Choice(tuple(sorted(_CMP))), "against": Choice(("tensor", "scalar")), "threshold": THRESHOLD},
        draw_params=_where_params,
    )
)

# ---------------------------------------------------------------------------------------------
# Reductions (over the last dim)
# ---------------------------------------------------------------------------------------------


def _red_accepts(metas):
    return _one_float(metas) and len(metas[0].shape) >= 2


def _red_infer(metas, p):
    s = metas[0].shape
    return Meta(s[:-1] + ((1,) if p["keepdim"] else ()), metas[0].dtype)


for _name, _fn in (("sum", "sum"), ("mean", "mean"), ("amax", "amax")):
    register(
        OpDef(
            name=_name,
            family="reduction",
            arity=1,
            accepts=_red_accepts,
            infer=_red_infer,
            code=(lambda f: lambda a, p: f"torch.{f}({a[0]}, -1, keepdim={_BOOL[p['keepdim']]})")(_fn),
            params={"keepdim": Flag()},
            draw_params=lambda draw, metas: {"keepdim": draw(st.booleans())},
        )
    )

# ---------------------------------------------------------------------------------------------
# Casts between floating dtypes
# ---------------------------------------------------------------------------------------------


def _cast_params(draw, metas):
    return {"to": draw(st.sampled_from([d for d in FLOATS if d != metas[0].dtype]))}


register(
    OpDef(
        name="cast",
        family="cast",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape, p["to"]),
        code=lambda a, p: f"{a[0]}.to(D({_DTYPE_CODE[p['to']]}))",
        params={"to": Choice(FLOATS)},
        draw_params=_cast_params,
    )
)

# ---------------------------------------------------------------------------------------------
# Integer encodings: the float pre-image is rounded, clamped and cast. Their outputs are graph
# outputs; `boundary` says where each element's output jumps (the oracle measures how close eager's pre-image was).
# ---------------------------------------------------------------------------------------------

_INT_RANGE = {"uint8": (0, 255), "int8": (-128, 127)}
_ROUND = {"ceil": "torch.ceil", "floor": "torch.floor", "round": "torch.round", "trunc": "torch.trunc"}
_ENCODING_PARAMS = {"mode": Choice(tuple(_ROUND)), "to": Choice(tuple(_INT_RANGE))}


def _grid_offset(mode: str) -> float:
    # ceil/floor/trunc jump at integers; round jumps at half-integers.
    return 0.5 if mode == "round" else 0.0


# Each encoding's pre-image is one template, printed inside its `code` and evaluated alone by
# `boundary`: the value eager rounds and the value the oracle measures are the same expression.
def _e8m0_pre_image(a, p):
    return f"torch.log2(torch.abs({a[0]}) + 1e-07)"


def _code_e8m0(a, p):
    offset = " + 127" if p["to"] == "uint8" else ""
    return (
        f"(torch.clamp({_ROUND[p['mode']]}({_e8m0_pre_image(a, p)}), -127, 127){offset})"
        f".to(D({_DTYPE_CODE[p['to']]}))"
    )


register(
    OpDef(
        name="e8m0_encode",
        family="encoding",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape, p["to"]),
        code=_code_e8m0,
        params=_ENCODING_PARAMS,
        draw_params=lambda draw, metas: {
            "mode": draw(st.sampled_from(["ceil", "ceil", "floor", "round"])),
            "to": draw(st.sampled_from(["uint8", "uint8", "int8"])),
        },
        boundary=lambda a, p: JumpRule(_e8m0_pre_image(a, p), grid_offset=_grid_offset(p["mode"])),
        differentiable=False,
    )
)

SCALES = (0.01, 0.05, 0.1, 1 / 127, 0.25)


def _quantize_pre_image(a, p):
    return f"{a[0]} / {_num(p['scale'])}"


register(
    OpDef(
        name="quantize",
        family="encoding",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape, p["to"]),
        code=lambda a, p: (
            f"torch.clamp({_ROUND[p['mode']]}({_quantize_pre_image(a, p)}), "
            f"{_INT_RANGE[p['to']][0]}, {_INT_RANGE[p['to']][1]}).to(D({_DTYPE_CODE[p['to']]}))"
        ),
        params={"scale": FloatRange(1e-30, 1e30), **_ENCODING_PARAMS},
        draw_params=lambda draw, metas: {
            "scale": draw(st.sampled_from(SCALES)),
            "mode": draw(st.sampled_from(["round", "round", "floor", "trunc"])),
            "to": draw(st.sampled_from(["int8", "uint8"])),
        },
        boundary=lambda a, p: JumpRule(_quantize_pre_image(a, p), grid_offset=_grid_offset(p["mode"])),
        differentiable=False,
    )
)


# A float cast to an integer is undefined where it is NaN, infinite or out of the integer's range
# (the oracle files such flips as `undefined`, not findings). Real quantizers guard the cast, so
# the strategies feed every encoding through `cast_guard` (unless asked for unguarded casts): NaN
# becomes 0, and the value is clamped to what the encoding can represent, so its pre-image is
# finite and in range. The guard is exact (no rounding): it adds no divergence of its own.
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
              "float64": 1.7976931348623157e308}
CAST_GUARD = "cast_guard"
# The ops whose output is a float cast to an integer (a comparison count is not: it casts bools).
GUARDED_ENCODINGS = ("e8m0_encode", "quantize")


def _guard_bounds(dtype: str, p) -> tuple[float, float] | None:
    """The clamp a quantize guard applies ([lo * scale, hi * scale] of the target's range), or None for
    e8m0 (NaN to 0 and +-Inf to the dtype's largest value suffice: it clamps the exponent itself).
    Raises ValueError (an invalid node) where a bound does not fit the input dtype."""
    if p["encoding"] == "e8m0_encode":
        return None
    lo, hi = (v * p["scale"] for v in _INT_RANGE[p["to"]])
    if max(abs(lo), abs(hi)) > _FLOAT_MAX[dtype]:
        raise ValueError(f"cast_guard bound {hi!r} does not fit {dtype}")
    return lo, hi


def _code_cast_guard(a, p):
    finite = f"torch.nan_to_num({a[0]}, nan=0.0)"
    if p["encoding"] == "e8m0_encode":
        return finite
    lo, hi = (v * p["scale"] for v in _INT_RANGE[p["to"]])
    return f"torch.clamp({finite}, {_num(lo)}, {_num(hi)})"


def _infer_cast_guard(metas, p):
    _guard_bounds(metas[0].dtype, p)
    return metas[0]


def cast_guard_params(encoding: str, params: dict) -> dict:
    """The `cast_guard` params that guard an `encoding` node with `params` (both drawn ops' own)."""
    if encoding not in GUARDED_ENCODINGS:
        raise ValueError(f"Expected one of {GUARDED_ENCODINGS} but got encoding={encoding!r}")
    return {"encoding": encoding, "to": params["to"], "scale": params["scale"] if encoding == "quantize" else 1.0}


register(
    OpDef(
        name=CAST_GUARD,
        family="cast",
        arity=1,
        accepts=_one_float,
        infer=_infer_cast_guard,
        code=_code_cast_guard,
        params={"encoding": Choice(GUARDED_ENCODINGS), "to": Choice(tuple(_INT_RANGE)), "scale": FloatRange(1e-30, 1e30)},
        draw_params=lambda draw, metas: cast_guard_params(
            draw(st.sampled_from(GUARDED_ENCODINGS)),
            {"to": draw(st.sampled_from(sorted(_INT_RANGE))), "scale": draw(st.sampled_from(SCALES))},
        ),
    )
)


def _count_boundary(a, p):
    # A row's count flips when any of its elements crosses the threshold.
    return JumpRule(a[0], threshold=p["threshold"], row_reduced=True)


register(
    OpDef(
        name="count_cmp",
        family="compare",
        arity=1,
        accepts=_red_accepts,
        infer=lambda metas, p: Meta(metas[0].shape[:-1], "int64"),
        code=lambda a, p: f"({a[0]} {_CMP[p['cmp']]} {_num(p['threshold'])}).sum(-1)",
        params={"cmp": Choice(tuple(sorted(_CMP))), "threshold": THRESHOLD},
        draw_params=lambda draw, metas: {
            "cmp": draw(st.sampled_from(["gt", "ge", "lt", "le"])),
            "threshold": draw(st.sampled_from([0.0, 0.5, 1.0, -0.25])),
        },
        boundary=_count_boundary,
        differentiable=False,
    )
)
