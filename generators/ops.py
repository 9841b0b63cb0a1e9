"""The registered ops: norms, activations, linears, pointwise, reductions, casts, integer encodings.

Rules shared by all ops (they make every drawn graph valid by construction):
- data inputs are floating; only encodings and counts produce integers, and nothing consumes an
  integer value (integer values are always graph outputs);
- binary ops take two values of the same shape;
- a node's output and weight dtypes, under autocast too, follow `divfuzz.generators.node_typing`; an op
  states its part in them as data (`autocast_policy`, `promotes_weights`).
Each op's meaning is written once, as its `code` template: a Python expression that
`divfuzz.generators.build` compiles into the function that builds the graph (and its float64 reference)
and that `divfuzz.reports.repro` prints into `repro.py`. In templates, `D(torch.X)` is the dtype map:
identity in the real graph, float64 for floating dtypes in the reference.

Every op declares its `params` schema; `validate_spec` holds every loaded spec to it, and each
`draw_params` draws only inside it. `code` templates print a parameter only through `_num`
(the `repr` of a finite int or float) or a lookup table (`_BOOL`, `DTYPE_CODE`, `_ROUND`,
`_CMP`, ...), so no string from a spec file ever becomes Python source.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from divfuzz.generators.node_typing import promote
from divfuzz.generators.opdef import FP32, LOWER_PRECISION, Choice, Flag, FloatRange, IntRange, JumpRule, Meta, OpDef, OrderFree, WeightSpec
from divfuzz.records.dtypes import ALL_DTYPES, DATA_DTYPES, DTYPES, FLOAT_DTYPES
from divfuzz.records.reference_rules import BINARY, MUL_DIV, round_scalar

# Every registered op by name, in registration order (`divfuzz.generators.registry` looks them up).
OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is registered twice")
    OPS[op.name] = op
    return op

INV_SQRT2 = 0.7071067811865476
GELU_TANH_C = 0.7978845608028654


def _one_float(metas: tuple[Meta, ...]) -> bool:
    return len(metas) == 1 and metas[0].is_float and len(metas[0].shape) >= 1


def _two_same(metas: tuple[Meta, ...]) -> bool:
    return len(metas) == 2 and all(m.is_float for m in metas) and metas[0].shape == metas[1].shape


def _same(metas, p):
    return metas[0]


def _same_binary(metas, p):
    return Meta(metas[0].shape, promote(metas[0].dtype, metas[1].dtype))


def _eps(draw) -> float:
    return draw(st.sampled_from([1e-5, 1e-6, 1e-12, 1e-3]))


def _num(v: Any) -> str:
    """A validated number as Python source; anything else is refused (never pasted as text)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"expected a finite number for a code template but got {v!r}")
    return repr(int(v)) if isinstance(v, int) else repr(float(v))


# Lookup tables: the only way a string or bool parameter reaches generated code.
_BOOL = {True: "True", False: "False"}
# Each dtype of the vocabulary as the source text that names it (public: a script printer may use it).
DTYPE_CODE = {d: f"torch.{d}" for d in ALL_DTYPES}

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
        accumulates="centered_sum_of_squares",
        order_free=OrderFree(args=(0, 1, 2), keeps_dim=True),
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
        promotes_weights=True,
        accumulates="centered_sum_of_squares",
        order_free=OrderFree(args=(0, 1, 2), keeps_dim=True),
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
        accumulates="sum_of_squares",
        order_free=OrderFree(args=(0, 1), keeps_dim=True),
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
        promotes_weights=True,
        accumulates="sum_of_squares",
        order_free=OrderFree(args=(0, 1), keeps_dim=True),
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
        # Its statistics run over (C/G, L...) per group: the last dim past the channels is free.
        order_free=OrderFree(keeps_dim=True, min_dims=3),
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
_unary("softmax", "activation", lambda a, p: f"torch.softmax({a[0]}, dim=-1)", order_free=OrderFree(keeps_dim=True))
_unary("log_softmax", "activation", lambda a, p: f"torch.log_softmax({a[0]}, dim=-1)", order_free=OrderFree(keeps_dim=True))

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
        autocast_policy=LOWER_PRECISION,
        order_free=OrderFree(args=(0, 1)),  # the inner dim: x's last and the weight's last
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
        autocast_policy=LOWER_PRECISION,
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
    eager_rounds_scalars={"eps": BINARY},
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
    eager_rounds_scalars={"divisor": MUL_DIV},
    # A floor or trunc division jumps where the quotient crosses an integer. Eager computes it
    # exactly from its operands, so only a dividend the graph computed (whose last bits upstream
    # rounding decides) makes a flip at the jump a boundary; on a graph input it is the op's own.
    boundary=lambda a, p: JumpRule(f"({a[0]} / {_num(p['divisor'])})", grid_offset=0.0, computed_input_only=True,
                                   quotient=True),
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


def _where_decision(a, p):
    """where_cmp's comparison as a jump: the difference of its operands against 0, or its first
    operand against the threshold."""
    if p["against"] == "tensor":
        return JumpRule(f"({a[0]} - {a[1]})", threshold=0.0)
    return JumpRule(a[0], threshold=float(p["threshold"]))


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
        decision=_where_decision,
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
            accumulates=None if _name == "amax" else "sum",
            order_free=OrderFree(),
        )
    )

# ---------------------------------------------------------------------------------------------
# Casts between floating dtypes
# ---------------------------------------------------------------------------------------------


def _cast_params(draw, metas):
    return {"to": draw(st.sampled_from([d for d in DATA_DTYPES if d != metas[0].dtype]))}


register(
    OpDef(
        name="cast",
        family="cast",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape, p["to"]),
        code=lambda a, p: f"{a[0]}.to(D({DTYPE_CODE[p['to']]}))",
        params={"to": Choice(DATA_DTYPES)},
        draw_params=_cast_params,
        rounds_to_param="to",
    )
)

# ---------------------------------------------------------------------------------------------
# Integer encodings: the float pre-image is rounded, clamped and cast. Their outputs are graph
# outputs; `boundary` says where each element's output jumps (the oracle measures how close eager's pre-image was).
# ---------------------------------------------------------------------------------------------

# The integer dtypes an encoding casts to, and their ranges.
_INT_RANGE = {d: DTYPES[d].int_range for d in ("uint8", "int8")}
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
        f".to(D({DTYPE_CODE[p['to']]}))"
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
            f"{_INT_RANGE[p['to']][0]}, {_INT_RANGE[p['to']][1]}).to(D({DTYPE_CODE[p['to']]}))"
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
    if max(abs(lo), abs(hi)) > DTYPES[dtype].max_finite:
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


# =============================================================================================
# The classes of PyTorch's 2025-2026 silent-correctness issues (issue 24): value-selecting
# reductions and their backward with ties, remainder/fmod, comparisons with a Python scalar,
# cumulative ops, rsqrt/reciprocal/sqrt, pow/clamp/rounding on their own, variance, losses, index
# ops, pooling and interpolation. `EDGE_OPS` names them (scripts/probe_new_ops.py probes each).
#
# Integer outputs of value-selecting ops (argmax, argmin) jump where two candidates tie: their
# `JumpRule` pre-image is the row's gap between the best and the second-best value, relative to
# the best one's magnitude (at least 1), with threshold 0. So a flip between two values eager
# holds within a few ULPs of each other (an exact tie is distance 0) is a boundary flip, and only
# a flip in a row whose winner stood clear is gross. A row holding NaN or Inf counts as a tie.
# =============================================================================================

_EDGE: list[str] = []


def _edge(op: OpDef) -> OpDef:
    _EDGE.append(op.name)
    return register(op)


def _edge_unary(name, family, code, **extra):
    return _edge(OpDef(name=name, family=family, arity=1, accepts=_one_float, infer=_same, code=code, **extra))


def _edge_binary(name: str, fn: str) -> OpDef:
    """An edge op `torch.<fn>(a, b)` of two floating tensors of one shape, in their promoted dtype."""
    return _edge(OpDef(name=name, family="pointwise", arity=2, accepts=_two_same, infer=_same_binary,
                       code=lambda a, p: f"torch.{fn}({a[0]}, {a[1]})"))


KEEPDIM = {"keepdim": Flag()}


def _draw_keepdim(draw, metas):
    return {"keepdim": draw(st.booleans())}


def _at_least_two_last(metas):
    return _red_accepts(metas) and metas[0].shape[-1] >= 2


# ---- value-selecting reductions (the value output is differentiable: ties decide the gradient) ----

for _name, _code in (
    ("max_dim", "torch.max({x}, -1, keepdim={k}).values"),
    ("min_dim", "torch.min({x}, -1, keepdim={k}).values"),
    ("median", "torch.median({x}, -1, keepdim={k}).values"),
    ("amin", "torch.amin({x}, -1, keepdim={k})"),
):
    _edge(
        OpDef(
            name=_name,
            family="selection",
            arity=1,
            accepts=_red_accepts,
            infer=_red_infer,
            code=(lambda c: lambda a, p: c.format(x=a[0], k=_BOOL[p["keepdim"]]))(_code),
            params=KEEPDIM,
            draw_params=_draw_keepdim,
        )
    )


def _tie_gap(largest: bool):
    """The pre-image of an arg-reduction: each row's gap between its best and second-best value,
    relative to max(|best|, 1); NaN (a row with NaN, or tied infinities) reads as a tie."""

    def pre_image(a, p):
        x = a[0]
        extreme = "torch.amax" if largest else "torch.amin"
        gap = f"torch.diff(torch.topk({x}, 2, -1, largest={_BOOL[largest]}).values, dim=-1).abs()"
        scale = f"{extreme}({x}, -1, keepdim=True).abs().clamp(min=1)"
        rel = f"torch.nan_to_num({gap} / {scale}, nan=0.0)"
        return rel if p["keepdim"] else f"{rel}.squeeze(-1)"

    return lambda a, p: JumpRule(pre_image(a, p), threshold=0.0)


for _name, _fn, _largest in (("argmax", "argmax", True), ("argmin", "argmin", False)):
    _edge(
        OpDef(
            name=_name,
            family="selection",
            arity=1,
            accepts=_at_least_two_last,
            infer=lambda metas, p: Meta(metas[0].shape[:-1] + ((1,) if p["keepdim"] else ()), "int64"),
            code=(lambda f: lambda a, p: f"torch.{f}({a[0]}, -1, keepdim={_BOOL[p['keepdim']]})")(_fn),
            params=KEEPDIM,
            draw_params=_draw_keepdim,
            boundary=_tie_gap(_largest),
            differentiable=False,
        )
    )

TOPK = (1, 2, 3, 4, 5, 8)


def _topk_infer(metas, p):
    if p["k"] > metas[0].shape[-1]:
        raise ValueError(f"k={p['k']} is more than the last dim {metas[0].shape[-1]}")
    return Meta(metas[0].shape[:-1] + (p["k"],), metas[0].dtype)


_edge(
    OpDef(
        name="topk",
        family="selection",
        arity=1,
        accepts=_one_float,
        infer=_topk_infer,
        code=lambda a, p: f"torch.topk({a[0]}, {_num(p['k'])}, -1, largest={_BOOL[p['largest']]}).values",
        params={"k": Choice(TOPK), "largest": Flag()},
        draw_params=lambda draw, metas: {
            "k": draw(st.sampled_from([k for k in TOPK if k <= metas[0].shape[-1]])),
            "largest": draw(st.booleans()),
        },
    )
)
_edge_unary(
    "sort",
    "selection",
    lambda a, p: f"torch.sort({a[0]}, dim=-1, descending={_BOOL[p['descending']]}, stable=True).values",
    params={"descending": Flag()},
    draw_params=lambda draw, metas: {"descending": draw(st.booleans())},
)

# ---- remainder and fmod: scalar divisors (zero and negative among them) and tensor divisors (the
# recipes put zeros, -0.0 and infinities in them) ----

REMAINDER_DIVISORS = (3.0, 0.1, -1.5, 2.5, 0.3, -0.7, 1.0, 0.0)
for _name in ("remainder", "fmod"):
    _edge_unary(
        _name,
        "pointwise",
        (lambda f: lambda a, p: f"torch.{f}({a[0]}, {_num(p['divisor'])})")(_name),
        params={"divisor": FloatRange(-1e30, 1e30)},
        draw_params=lambda draw, metas: {"divisor": draw(st.sampled_from(REMAINDER_DIVISORS))},
        eager_rounds_scalars={"divisor": BINARY},
    )
    _edge_binary(f"{_name}_tensor", _name)

# ---- binary selections: minimum and maximum return one of their operands (IEEE 754-2019 orders
# -0.0 below +0.0, and NaN propagates; the recipes put signed zeros and NaN-free ties in them) ----

for _name in ("minimum", "maximum"):
    _edge_binary(_name, _name)

# ---- comparisons of a tensor with a Python scalar ----
# PyTorch's promotion: a Python float does not promote a tensor of a floating dtype, so
# `bf16_tensor > 0.1` compares in bfloat16 against 0.1 rounded to bfloat16 (through float32, as
# c10 converts). The op compares in its `scalar_dtype` (the input cast to it: the strategies draw the
# input's own dtype, where the cast is a no-op) against the scalar as the user wrote it; the fp64
# reference compares against the scalar as PyTorch rounds it to `scalar_dtype` (`round_scalar`).
# `D(torch.float32) is torch.float32` is true in the real graph and false in the reference.

CMP_SCALARS = (0.1, 0.3, 1 / 3, -0.7, 2.2, 1e-3, 0.5, 0.0)


def _promoted_scalar(p) -> str:
    return f"({_num(p['threshold'])} if D(torch.float32) is torch.float32 else {_num(round_scalar(p['threshold'], p['scalar_dtype']))})"


def _scalar_cond(a, p) -> str:
    return f"{a[0]}.to(D({DTYPE_CODE[p['scalar_dtype']]})) {_CMP[p['cmp']]} {_promoted_scalar(p)}"


def _scalar_infer(out_dtype):
    def infer(metas, p):
        round_scalar(p["threshold"], p["scalar_dtype"])
        return Meta(metas[0].shape, out_dtype or metas[0].dtype)

    return infer


def _scalar_cmp_params(draw, metas):
    return {
        "cmp": draw(st.sampled_from(sorted(_CMP))),
        "threshold": draw(st.sampled_from(CMP_SCALARS)),
        "scalar_dtype": metas[0].dtype,
    }


# Thresholds that every floating dtype holds (float16's largest finite value is 65504), so the
# template prints a finite rounded scalar for every value in the schema.
SCALAR_THRESHOLD = FloatRange(-60000.0, 60000.0)
SCALAR_CMP_PARAMS = {"cmp": Choice(tuple(sorted(_CMP))), "threshold": SCALAR_THRESHOLD, "scalar_dtype": Choice(FLOAT_DTYPES)}

_edge(
    OpDef(
        name="cmp_scalar",
        family="compare",
        arity=1,
        accepts=_one_float,
        infer=_scalar_infer("bool"),
        code=lambda a, p: f"({_scalar_cond(a, p)})",
        params=SCALAR_CMP_PARAMS,
        draw_params=_scalar_cmp_params,
        boundary=lambda a, p: JumpRule(f"{a[0]}.to(D({DTYPE_CODE[p['scalar_dtype']]}))", threshold=round_scalar(p["threshold"], p["scalar_dtype"])),
        differentiable=False,
    )
)
_edge(
    OpDef(
        name="where_scalar",
        family="compare",
        arity=1,
        accepts=_one_float,
        infer=_scalar_infer(None),
        code=lambda a, p: f"torch.where({_scalar_cond(a, p)}, {a[0]}, 0.0)",
        params=SCALAR_CMP_PARAMS,
        draw_params=_scalar_cmp_params,
        decision=lambda a, p: JumpRule(f"{a[0]}.to(D({DTYPE_CODE[p['scalar_dtype']]}))", threshold=round_scalar(p["threshold"], p["scalar_dtype"])),
    )
)

# ---- cumulative ops over the last dim (cumsum and cumprod with and without an explicit dtype) ----

CUM_DTYPES = (None, "float32")
for _name in ("cumsum", "cumprod"):
    _edge(
        OpDef(
            name=_name,
            family="cumulative",
            arity=1,
            accepts=_one_float,
            infer=lambda metas, p: Meta(metas[0].shape, p["dtype"] or metas[0].dtype),
            code=(lambda f: lambda a, p: f"torch.{f}({a[0]}, -1"
                  + (f", dtype=D({DTYPE_CODE[p['dtype']]}))" if p["dtype"] else ")"))(_name),
            params={"dtype": Choice(CUM_DTYPES)},
            draw_params=lambda draw, metas: {"dtype": draw(st.sampled_from(CUM_DTYPES))},
            accumulates="prod" if _name == "cumprod" else "sum",
            scan="mul" if _name == "cumprod" else "add",
        )
    )
_edge_unary("logcumsumexp", "cumulative", lambda a, p: f"torch.logcumsumexp({a[0]}, -1)", scan="logaddexp")
_edge_unary("cummax", "cumulative", lambda a, p: f"torch.cummax({a[0]}, -1).values")

# ---- pointwise edge cases: near zero and -0.0, scalar exponents and bounds, rounding alone ----

_edge_unary("rsqrt", "pointwise", lambda a, p: f"torch.rsqrt({a[0]})")
_edge_unary("reciprocal", "pointwise", lambda a, p: f"torch.reciprocal({a[0]})")
_edge_unary("sqrt", "pointwise", lambda a, p: f"torch.sqrt({a[0]})")

# An int exponent and the equal float one take different paths in Inductor's pow lowering.
POW_EXPONENTS = (2, 3, -1, -2, 2.0, 3.0, 0.5, -0.5, 1.5, 1 / 3)
_edge_unary(
    "pow_scalar",
    "pointwise",
    lambda a, p: f"torch.pow({a[0]}, {_num(p['exponent'])})",
    params={"exponent": Choice(POW_EXPONENTS)},
    draw_params=lambda draw, metas: {"exponent": draw(st.sampled_from(POW_EXPONENTS))},
)

CLAMP_LO = (-6.0, -1.0, -0.5, 0.0, 0.1)
CLAMP_HI = (0.3, 0.5, 1.0, 6.0)


def _clamp_params(draw, metas):
    lo = draw(st.sampled_from(CLAMP_LO))
    return {"lo": lo, "hi": draw(st.sampled_from([h for h in CLAMP_HI if h > lo]))}


def _clamp_infer(metas, p):
    if p["lo"] >= p["hi"]:
        raise ValueError(f"clamp bounds lo={p['lo']!r} >= hi={p['hi']!r}")
    return metas[0]


_edge(
    OpDef(
        name="clamp_scalar",
        family="pointwise",
        arity=1,
        accepts=_one_float,
        infer=_clamp_infer,
        code=lambda a, p: f"torch.clamp({a[0]}, min={_num(p['lo'])}, max={_num(p['hi'])})",
        params={"lo": Choice(CLAMP_LO), "hi": Choice(CLAMP_HI)},
        draw_params=_clamp_params,
    )
)

ROUND_DECIMALS = (0, 1, 2, -1)


def _rounding_jump(offset: float):
    """A rounding op's pre-image is its own input as eager computed it (scaled by 10**decimals for a
    round to decimals), jumping at k + offset: a flip whose input lies within a few ULPs of the jump
    is rounding at a boundary, whichever side computed the input (`divfuzz.oracles.compare`)."""
    def rule(a, p):
        decimals = p.get("decimals", 0)
        return JumpRule(a[0] if not decimals else f"({a[0]} * {_num(10.0 ** decimals)})", grid_offset=offset,
                        computed_input_only=True)
    return rule


_edge_unary(
    "round",
    "pointwise",
    lambda a, p: f"torch.round({a[0]})" if p["decimals"] == 0 else f"torch.round({a[0]}, decimals={_num(p['decimals'])})",
    params={"decimals": Choice(ROUND_DECIMALS)},
    draw_params=lambda draw, metas: {"decimals": draw(st.sampled_from((0, 0, 1, 2, -1)))},
    boundary=_rounding_jump(0.5),
)
for _name in ("floor", "ceil", "trunc"):
    _edge_unary(_name, "pointwise", (lambda f: lambda a, p: f"torch.{f}({a[0]})")(_name), boundary=_rounding_jump(0.0))

# ---- variance: var, std and var_mean, with a correction ----

CORRECTIONS = (0, 1, 2)
STAT_PARAMS = {"correction": Choice(CORRECTIONS), "keepdim": Flag()}


def _stat_params(draw, metas):
    return {"correction": draw(st.sampled_from((0, 1, 1, 2))), "keepdim": draw(st.booleans())}


for _name in ("var", "std"):
    _edge(
        OpDef(
            name=_name,
            family="statistic",
            arity=1,
            accepts=_at_least_two_last,
            infer=_red_infer,
            code=(lambda f: lambda a, p: f"torch.{f}({a[0]}, -1, correction={_num(p['correction'])}, keepdim={_BOOL[p['keepdim']]})")(_name),
            params=STAT_PARAMS,
            draw_params=_stat_params,
            accumulates="centered_sum_of_squares",
            order_free=OrderFree(),
        )
    )

# var_mean is one fused reduction; each part is its own output (mean and variance have different
# scales, and the oracle measures an output's errors at its own scale).
_VAR_MEAN_PART = {"var": "0", "mean": "1"}
_edge(
    OpDef(
        name="var_mean",
        family="statistic",
        arity=1,
        accepts=_at_least_two_last,
        infer=_red_infer,
        code=lambda a, p: (
            f"torch.var_mean({a[0]}, -1, correction={_num(p['correction'])}, keepdim={_BOOL[p['keepdim']]})"
            f"[{_VAR_MEAN_PART[p['part']]}]"
        ),
        params={"part": Choice(tuple(_VAR_MEAN_PART)), **STAT_PARAMS},
        draw_params=lambda draw, metas: {"part": draw(st.sampled_from(tuple(_VAR_MEAN_PART))), **_stat_params(draw, metas)},
        accumulates="centered_sum_of_squares",
        order_free=OrderFree(),
    )
)

# ---- losses ----
# All three are on torch's autocast fp32 list (CPU and CUDA): under autocast they output float32.

REDUCTIONS = ("mean", "sum", "none")
_REDUCTION_CODE = {r: repr(r) for r in REDUCTIONS}


def _loss_infer(rows_shape):
    def infer(metas, p):
        return Meta(rows_shape(metas[0].shape) if p["reduction"] == "none" else (), metas[0].dtype)

    return infer


def _draw_reduction(draw):
    return draw(st.sampled_from(REDUCTIONS))


# Class targets are a fixed pattern over the rows (row i is class (7 i + 3) mod C), so the loss
# reads every class; the input's last dim holds the class logits.
LABEL_SMOOTHING = (0.0, 0.1)
_edge(
    OpDef(
        name="cross_entropy",
        family="loss",
        arity=1,
        accepts=_at_least_two_last,
        infer=_loss_infer(lambda s: s[:-1]),
        code=lambda a, p: (
            f"F.cross_entropy({a[0]}.reshape(-1, {a[0]}.shape[-1]), "
            f"(torch.arange({a[0]}.numel() // {a[0]}.shape[-1], device={a[0]}.device) * 7 + 3) % {a[0]}.shape[-1], "
            f"reduction={_REDUCTION_CODE[p['reduction']]}, label_smoothing={_num(p['label_smoothing'])})"
            + (f".reshape({a[0]}.shape[:-1])" if p["reduction"] == "none" else "")
        ),
        params={"reduction": Choice(REDUCTIONS), "label_smoothing": Choice(LABEL_SMOOTHING)},
        draw_params=lambda draw, metas: {"reduction": _draw_reduction(draw), "label_smoothing": draw(st.sampled_from(LABEL_SMOOTHING))},
        autocast_policy=FP32,
    )
)
_edge(
    OpDef(
        name="mse_loss",
        family="loss",
        arity=2,
        accepts=_two_same,
        infer=lambda metas, p: Meta(metas[0].shape if p["reduction"] == "none" else (), promote(metas[0].dtype, metas[1].dtype)),
        code=lambda a, p: f"F.mse_loss({a[0]}, {a[1]}, reduction={_REDUCTION_CODE[p['reduction']]})",
        params={"reduction": Choice(REDUCTIONS)},
        draw_params=lambda draw, metas: {"reduction": _draw_reduction(draw)},
        autocast_policy=FP32,
    )
)

# The ranking target alternates +1, -1 over the flattened input.
MARGINS = (0.0, 0.5, 1.0)
_edge(
    OpDef(
        name="margin_ranking_loss",
        family="loss",
        arity=2,
        accepts=lambda metas: _two_same(metas) and metas[0].dtype == metas[1].dtype,
        infer=lambda metas, p: Meta(metas[0].shape if p["reduction"] == "none" else (), metas[0].dtype),
        code=lambda a, p: (
            f"F.margin_ranking_loss({a[0]}, {a[1]}, "
            f"(1 - 2 * (torch.arange({a[0]}.numel(), device={a[0]}.device) % 2)).reshape({a[0]}.shape).to({a[0]}.dtype), "
            f"margin={_num(p['margin'])}, reduction={_REDUCTION_CODE[p['reduction']]})"
        ),
        params={"margin": Choice(MARGINS), "reduction": Choice(REDUCTIONS)},
        draw_params=lambda draw, metas: {"margin": draw(st.sampled_from(MARGINS)), "reduction": _draw_reduction(draw)},
        autocast_policy=FP32,
    )
)

# ---- index ops: in-range indices drawn as a pattern (a lookup table of code over n and m) ----
# Each pattern is an int64 vector of n indices in [0, m): "repeat" and "constant" repeat indices,
# so scatter_add and index_add accumulate into the same slot.

# Each is one parenthesised expression, so that a method call can follow it.
_INDEX_PATTERN = {
    "cyclic": "(torch.arange({n}, device={dev}) % {m})",
    "strided": "((torch.arange({n}, device={dev}) * 5 + 3) % {m})",
    "reversed": "({m} - 1 - torch.arange({n}, device={dev}) % {m})",
    "repeat": "((torch.arange({n}, device={dev}) // 2) % {m})",
    "constant": "torch.zeros({n}, dtype=torch.int64, device={dev})",
}
INDEX_PATTERNS = tuple(_INDEX_PATTERN)
INDEX_SIZES = (1, 2, 3, 5, 8, 16)
# The patterns from the plainest to read to the least plain: what the minimizer rewrites an
# index towards where a plainer pattern gives the same indices (`index_values`).
INDEX_PATTERN_SIMPLICITY = ("constant", "cyclic", "repeat", "reversed", "strided")
# Each pattern's indices as plain Python (i in range(n), m the modulus), one for one with
# `_INDEX_PATTERN` (`tests/test_minimize.py` runs both and compares).
_INDEX_VALUES = {
    "cyclic": lambda i, m: i % m,
    "strided": lambda i, m: (i * 5 + 3) % m,
    "reversed": lambda i, m: m - 1 - i % m,
    "repeat": lambda i, m: (i // 2) % m,
    "constant": lambda i, m: 0,
}
# (n, m) of each index op's pattern from its params and its input's shape, as its `code` passes them.
_INDEX_EXTENTS = {
    "gather": lambda p, shape: (p["size"], shape[-1]),
    "index_select": lambda p, shape: (p["size"], shape[-1]),
    "scatter_add": lambda p, shape: (shape[-1], p["size"]),
    "index_add": lambda p, shape: (shape[0], p["size"]),
}


def index_values(op: str, params, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The indices an index op's pattern makes on an input of `shape`, or None when `op` draws no
    pattern (or its params or shape give none)."""
    extent = _INDEX_EXTENTS.get(op)
    pattern = params.get("pattern")
    if extent is None or pattern not in _INDEX_VALUES or not shape:
        return None
    n, m = extent(params, shape)
    if not isinstance(n, int) or not isinstance(m, int) or m < 1:
        return None
    return tuple(_INDEX_VALUES[pattern](i, m) for i in range(n))


def _index(pattern: str, n: str, m: str, x: str) -> str:
    return _INDEX_PATTERN[pattern].format(n=n, m=m, dev=f"{x}.device")


def _draw_index(draw, metas):
    return {"size": draw(st.sampled_from(INDEX_SIZES)), "pattern": draw(st.sampled_from(INDEX_PATTERNS))}


INDEX_PARAMS = {"size": Choice(INDEX_SIZES), "pattern": Choice(INDEX_PATTERNS)}


def _last_dim_index_op(name: str, code) -> OpDef:
    """An index op whose output is its input with the last dim resized to `size` (gather,
    index_select, scatter_add): one float input, the index drawn by `_draw_index`."""
    return OpDef(
        name=name,
        family="index",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape[:-1] + (p["size"],), metas[0].dtype),
        code=code,
        params=INDEX_PARAMS,
        draw_params=_draw_index,
    )


_edge(_last_dim_index_op("gather", lambda a, p: (
    f"torch.gather({a[0]}, -1, {_index(p['pattern'], _num(p['size']), f'{a[0]}.shape[-1]', a[0])}"
    f".expand({a[0]}.shape[:-1] + ({_num(p['size'])},)))"
)))
_edge(_last_dim_index_op("index_select", lambda a, p: (
    f"torch.index_select({a[0]}, -1, {_index(p['pattern'], _num(p['size']), f'{a[0]}.shape[-1]', a[0])})"
)))
_edge(_last_dim_index_op("scatter_add", lambda a, p: (
    f"{a[0]}.new_zeros({a[0]}.shape[:-1] + ({_num(p['size'])},)).scatter_add(-1, "
    f"{_index(p['pattern'], f'{a[0]}.shape[-1]', _num(p['size']), a[0])}.expand({a[0]}.shape), {a[0]})"
)))
_edge(
    OpDef(
        name="index_add",
        family="index",
        arity=1,
        accepts=_red_accepts,
        infer=lambda metas, p: Meta((p["size"],) + metas[0].shape[1:], metas[0].dtype),
        code=lambda a, p: (
            f"{a[0]}.new_zeros(({_num(p['size'])},) + {a[0]}.shape[1:]).index_add(0, "
            f"{_index(p['pattern'], f'{a[0]}.shape[0]', _num(p['size']), a[0])}, {a[0]})"
        ),
        params=INDEX_PARAMS,
        draw_params=_draw_index,
    )
)

# ---- pooling (windows over the last dim, or the last two) and interpolation ----

KERNELS = (2, 3, 4)
STRIDES = (1, 2)


def _pool_out(length: int, kernel: int, stride: int, padding: int = 0, ceil_mode: bool = False) -> int:
    """PyTorch's pooling output size (a ceil-mode window must start inside the padded input)."""
    span = length + 2 * padding - kernel
    if span < 0:
        raise ValueError(f"kernel {kernel} is larger than the padded length {length + 2 * padding}")
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= length + padding:
        out -= 1
    return out


def _pool1d_accepts(metas):
    return _one_float(metas) and 2 <= len(metas[0].shape) <= 3 and metas[0].shape[-1] >= min(KERNELS)


def _max_pool1d_infer(metas, p):
    s = metas[0].shape
    return Meta(s[:-1] + (_pool_out(s[-1], p["kernel"], p["stride"], ceil_mode=p["ceil_mode"]),), metas[0].dtype)


def _draw_window(draw, lengths):
    kernel = draw(st.sampled_from([k for k in KERNELS if k <= min(lengths)]))
    return {"kernel": kernel, "stride": draw(st.sampled_from(STRIDES))}


_edge(
    OpDef(
        name="max_pool1d",
        family="pool",
        arity=1,
        accepts=_pool1d_accepts,
        infer=_max_pool1d_infer,
        code=lambda a, p: f"F.max_pool1d({a[0]}, {_num(p['kernel'])}, {_num(p['stride'])}, ceil_mode={_BOOL[p['ceil_mode']]})",
        params={"kernel": Choice(KERNELS), "stride": Choice(STRIDES), "ceil_mode": Flag()},
        draw_params=lambda draw, metas: {**_draw_window(draw, metas[0].shape[-1:]), "ceil_mode": draw(st.booleans())},
    )
)


def _pool2d_accepts(metas):
    return _red_accepts(metas) and min(metas[0].shape[-2:]) >= min(KERNELS)


def _max_pool2d_out(metas, p) -> tuple[int, int]:
    return tuple(_pool_out(n, p["kernel"], p["stride"]) for n in metas[0].shape[-2:])


_edge(
    OpDef(
        name="max_pool2d",
        family="pool",
        arity=1,
        accepts=_pool2d_accepts,
        infer=lambda metas, p: Meta(metas[0].shape[:-2] + _max_pool2d_out(metas, p), metas[0].dtype),
        # Leading dims fold into one channel dim (an unbatched (C, H, W) input), then unfold.
        code=lambda a, p: (
            f"F.max_pool2d({a[0]}.reshape((-1,) + {a[0]}.shape[-2:]), {_num(p['kernel'])}, {_num(p['stride'])})"
            f".reshape({a[0]}.shape[:-2] + ((({a[0]}.shape[-2] - {_num(p['kernel'])}) // {_num(p['stride'])} + 1), -1))"
        ),
        params={"kernel": Choice(KERNELS), "stride": Choice(STRIDES)},
        draw_params=lambda draw, metas: _draw_window(draw, metas[0].shape[-2:]),
    )
)

PADDINGS = (0, 1)


def _avg_pool1d_params(draw, metas):
    window = _draw_window(draw, metas[0].shape[-1:])
    padding = draw(st.sampled_from([q for q in PADDINGS if 2 * q <= window["kernel"]]))
    return {**window, "padding": padding, "count_include_pad": draw(st.booleans())}


def _avg_pool1d_infer(metas, p):
    if 2 * p["padding"] > p["kernel"]:
        raise ValueError(f"padding {p['padding']} is more than half the kernel {p['kernel']}")
    s = metas[0].shape
    return Meta(s[:-1] + (_pool_out(s[-1], p["kernel"], p["stride"], p["padding"]),), metas[0].dtype)


_edge(
    OpDef(
        name="avg_pool1d",
        family="pool",
        arity=1,
        accepts=_pool1d_accepts,
        infer=_avg_pool1d_infer,
        code=lambda a, p: (
            f"F.avg_pool1d({a[0]}, {_num(p['kernel'])}, {_num(p['stride'])}, padding={_num(p['padding'])}, "
            f"count_include_pad={_BOOL[p['count_include_pad']]})"
        ),
        params={"kernel": Choice(KERNELS), "stride": Choice(STRIDES), "padding": Choice(PADDINGS), "count_include_pad": Flag()},
        draw_params=_avg_pool1d_params,
    )
)

# Non-integer scale factors are where nearest's source index (floor(i / scale)) is delicate.
SCALE_FACTORS = (2.0, 0.5, 1.5, 0.75, 3.0)
_NEAREST_MODES = {"nearest": "'nearest'", "nearest-exact": "'nearest-exact'"}


def _scaled(n: int, factor: float) -> int:
    out = math.floor(n * factor)
    if out < 1:
        raise ValueError(f"scale_factor {factor!r} leaves no element of a dim of {n}")
    return out


def _draw_scale(draw, lengths):
    return draw(st.sampled_from([f for f in SCALE_FACTORS if all(math.floor(n * f) >= 1 for n in lengths)]))


_edge(
    OpDef(
        name="interpolate_nearest",
        family="resample",
        arity=1,
        accepts=_one_float,
        infer=lambda metas, p: Meta(metas[0].shape[:-1] + (_scaled(metas[0].shape[-1], p["scale_factor"]),), metas[0].dtype),
        code=lambda a, p: (
            f"F.interpolate({a[0]}.reshape(-1, 1, {a[0]}.shape[-1]), scale_factor={_num(p['scale_factor'])}, "
            f"mode={_NEAREST_MODES[p['mode']]}).reshape({a[0]}.shape[:-1] + (-1,))"
        ),
        params={"scale_factor": Choice(SCALE_FACTORS), "mode": Choice(tuple(_NEAREST_MODES))},
        draw_params=lambda draw, metas: {"scale_factor": _draw_scale(draw, metas[0].shape[-1:]),
                                         "mode": draw(st.sampled_from(tuple(_NEAREST_MODES)))},
    )
)
# The leading dims fold into one batch dim, which the output keeps: (prod(leading), H', W').
_edge(
    OpDef(
        name="interpolate_bilinear",
        family="resample",
        arity=1,
        accepts=_red_accepts,
        infer=lambda metas, p: Meta(
            (math.prod(metas[0].shape[:-2]),) + tuple(_scaled(n, p["scale_factor"]) for n in metas[0].shape[-2:]), metas[0].dtype
        ),
        code=lambda a, p: (
            f"F.interpolate({a[0]}.reshape((-1, 1) + {a[0]}.shape[-2:]), scale_factor={_num(p['scale_factor'])}, "
            f"mode='bilinear', align_corners={_BOOL[p['align_corners']]}).squeeze(1)"
        ),
        params={"scale_factor": Choice(SCALE_FACTORS), "align_corners": Flag()},
        draw_params=lambda draw, metas: {"scale_factor": _draw_scale(draw, metas[0].shape[-2:]), "align_corners": draw(st.booleans())},
    )
)

EDGE_OPS: tuple[str, ...] = tuple(_EDGE)

# ---------------------------------------------------------------------------------------------
# Mutation and views (issue 53): in-place ops and views, whose aliasing `divfuzz.generators.aliasing`
# follows. An in-place op's `clone` param writes into a copy (`a0.clone().add_(a1)`), as users do
# on a leaf that requires grad: a backward graph's in-place ops all take it (`aliasing_problem`).
# ---------------------------------------------------------------------------------------------

CLONE = {"clone": Flag()}


def _in_place(a, p) -> str:
    """The op's target: its first input, or a copy of it."""
    return f"{a[0]}.clone()" if p["clone"] else a[0]


def _inplace_binary(name: str, method: str) -> None:
    register(OpDef(name=name, family="mutation", arity=2, accepts=_two_same, infer=_same,
                   code=(lambda m: lambda a, p: f"{_in_place(a, p)}.{m}({a[1]})")(method),
                   params=CLONE, draw_params=lambda draw, metas: {"clone": False}, mutates=True))


def _inplace_unary(name: str, method: str) -> None:
    register(OpDef(name=name, family="mutation", arity=1, accepts=_one_float, infer=_same,
                   code=(lambda m: lambda a, p: f"{_in_place(a, p)}.{m}()")(method),
                   params=CLONE, draw_params=lambda draw, metas: {"clone": False}, mutates=True))


_inplace_binary("add_", "add_")
_inplace_binary("mul_", "mul_")
_inplace_binary("sub_", "sub_")
_inplace_unary("sigmoid_", "sigmoid_")
_inplace_unary("relu_", "relu_")
register(
    OpDef(
        name="clamp_",
        family="mutation",
        arity=1,
        accepts=_one_float,
        infer=_clamp_infer,
        code=lambda a, p: f"{_in_place(a, p)}.clamp_(min={_num(p['lo'])}, max={_num(p['hi'])})",
        params={"lo": Choice(CLAMP_LO), "hi": Choice(CLAMP_HI), **CLONE},
        draw_params=lambda draw, metas: {**_clamp_params(draw, metas), "clone": False},
        mutates=True,
    )
)
MUL_SCALARS = (0.5, 2.0, -1.0, 3.0, 0.1)
register(
    OpDef(
        name="mul_scalar_",
        family="mutation",
        arity=1,
        accepts=_one_float,
        infer=_same,
        code=lambda a, p: f"{_in_place(a, p)}.mul_({_num(p['scalar'])})",
        params={"scalar": Choice(MUL_SCALARS), **CLONE},
        draw_params=lambda draw, metas: {"scalar": draw(st.sampled_from(MUL_SCALARS)), "clone": False},
        mutates=True,
        eager_rounds_scalars={"scalar": MUL_DIV},
    )
)
# index_put_: every other row of the first input takes the second's (a scatter into a strided
# selection); the value is the whole first input. Both of one dtype, as index_put_ requires.
register(
    OpDef(
        name="index_put_rows",
        family="mutation",
        arity=2,
        accepts=lambda metas: _two_same(metas) and metas[0].dtype == metas[1].dtype and len(metas[0].shape) >= 1,
        infer=_same,
        code=lambda a, p: (f"{_in_place(a, p)}.index_put_((torch.arange(0, {a[0]}.shape[0], 2, device={a[0]}.device),), "
                           f"{a[1]}[::2])"),
        params=CLONE,
        draw_params=lambda draw, metas: {"clone": False},
        mutates=True,
    )
)


def _slice_fits(metas, p):
    last = metas[0].shape[-1]
    if not 0 <= p["start"] < p["start"] + p["length"] <= last:
        raise ValueError(f"slice [{p['start']}, {p['start'] + p['length']}) outside a last dim of {last}")
    return metas[0]


def _slice_params(draw, metas):
    last = metas[0].shape[-1]
    start = draw(st.integers(0, last - 2))
    return {"start": start, "length": draw(st.integers(1, last - start))}


SLICE_PARAMS = {"start": IntRange(0, 2**20), "length": IntRange(1, 2**20)}


def _code_copy_slice(a, p):
    """`copy_` through a narrowed view, then the whole input; on a copy (`clone`), the same write
    as an `index_copy_` into the copy (an expression cannot name the copy twice)."""
    start, length = _num(p["start"]), _num(p["length"])
    if not p["clone"]:
        return f"({a[0]}.narrow(-1, {start}, {length}).copy_({a[1]}.narrow(-1, {start}, {length})), {a[0]})[1]"
    return (f"{a[0]}.clone().index_copy_(-1, torch.arange({start}, {_num(p['start'] + p['length'])}, device={a[0]}.device), "
            f"{a[1]}.narrow(-1, {start}, {length}))")
# copy_ into a slice of the last dim (the same slice of the second input); the value is the whole
# first input, written in place through the slice's view.
register(
    OpDef(
        name="copy_slice",
        family="mutation",
        arity=2,
        accepts=lambda metas: _two_same(metas) and metas[0].dtype == metas[1].dtype and len(metas[0].shape) >= 1
        and metas[0].shape[-1] >= 2,
        infer=_slice_fits,
        code=_code_copy_slice,
        params={**SLICE_PARAMS, **CLONE},
        draw_params=lambda draw, metas: {**_slice_params(draw, metas), "clone": False},
        mutates=True,
    )
)


# Views: each op's value shares its input's storage (`OpDef.view`).
register(
    OpDef(
        name="transpose",
        family="view",
        arity=1,
        accepts=_red_accepts,
        infer=lambda metas, p: Meta(metas[0].shape[:-2] + (metas[0].shape[-1], metas[0].shape[-2]), metas[0].dtype),
        code=lambda a, p: f"{a[0]}.transpose(-2, -1)",
        view=True,
    )
)
register(
    OpDef(
        name="narrow",
        family="view",
        arity=1,
        accepts=lambda metas: _one_float(metas) and metas[0].shape[-1] >= 2,
        infer=lambda metas, p: Meta(_slice_fits(metas, p).shape[:-1] + (p["length"],), metas[0].dtype),
        code=lambda a, p: f"{a[0]}.narrow(-1, {_num(p['start'])}, {_num(p['length'])})",
        params=SLICE_PARAMS,
        draw_params=_slice_params,
        view=True,
    )
)


def _select_infer(metas, p):
    shape = metas[0].shape
    if not 0 <= p["index"] < shape[1]:
        raise ValueError(f"index {p['index']} outside dim 1 of {shape}")
    return Meta(shape[:1] + shape[2:], metas[0].dtype)


# select along dim 1 (never the batch dim 0, which shape siblings resize)
register(
    OpDef(
        name="select",
        family="view",
        arity=1,
        accepts=_red_accepts,
        infer=_select_infer,
        code=lambda a, p: f"{a[0]}.select(1, {_num(p['index'])})",
        params={"index": IntRange(0, 2**20)},
        draw_params=lambda draw, metas: {"index": draw(st.integers(0, metas[0].shape[1] - 1))},
        view=True,
    )
)
register(
    OpDef(
        name="unsqueeze",
        family="view",
        arity=1,
        accepts=lambda metas: _one_float(metas) and len(metas[0].shape) < 7,
        infer=lambda metas, p: Meta(_unsqueezed(metas[0].shape, p["dim"]), metas[0].dtype),
        code=lambda a, p: f"{a[0]}.unsqueeze({_num(p['dim'])})",
        params={"dim": IntRange(-8, 7)},
        draw_params=lambda draw, metas: {"dim": draw(st.sampled_from((1, -1, 0)))},
        view=True,
    )
)


def _unsqueezed(shape, dim):
    rank = len(shape) + 1
    if not -rank <= dim < rank:
        raise ValueError(f"unsqueeze dim {dim} outside a result of {rank} dims")
    d = dim % rank
    return shape[:d] + (1,) + shape[d:]


def _split_infer(metas, p):
    last = metas[0].shape[-1]
    if last % p["parts"]:
        raise ValueError(f"a last dim of {last} does not split into {p['parts']} parts")
    return Meta(metas[0].shape[:-1] + (p["parts"], last // p["parts"]), metas[0].dtype)


SPLIT_PARTS = (2, 4, 1)
# view: the last dim split in `parts` (splitting a dim is a view whatever the strides)
register(
    OpDef(
        name="view_split",
        family="view",
        arity=1,
        accepts=lambda metas: _one_float(metas) and len(metas[0].shape) < 7,
        infer=_split_infer,
        code=lambda a, p: f"{a[0]}.view({a[0]}.shape[:-1] + ({_num(p['parts'])}, -1))",
        params={"parts": Choice(SPLIT_PARTS)},
        draw_params=lambda draw, metas: {"parts": draw(st.sampled_from([k for k in SPLIT_PARTS if metas[0].shape[-1] % k == 0]))},
        view=True,
    )
)
MUTATION_OPS: tuple[str, ...] = tuple(n for n, op in OPS.items() if op.mutates)
VIEW_OPS: tuple[str, ...] = tuple(n for n, op in OPS.items() if op.view)
