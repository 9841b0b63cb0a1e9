"""What an op is, as data plus functions: `OpDef`, its metadata and parameter schemas.

Each `OpDef` states once:
- which inputs it accepts (`accepts`), so the strategies only ever draw valid graphs;
- its output shape and dtype (`infer`);
- the parameters it takes (`params`: a declarative schema of types, choices and ranges that
  `validate_spec` enforces on every loaded spec), the values it draws for them (`draw_params`,
  always inside `params`: a property test checks) and the weight tensors it needs (`weights`);
- what it computes, once, as a Python expression (`code`): `divfuzz.generators.build` compiles it into
  the function that builds the real graph and its float64 reference, and `divfuzz.reports.repro` prints
  the same text into `repro.py`, so the graph divfuzz judges and the repro cannot drift apart;
- for an integer output, where it jumps (`boundary`): the code of the float pre-image it rounds
  or compares, printed by the same templates, and the grid or threshold as data.

Adding an op is one `register(OpDef(...))` call in `generators/ops.py`; `divfuzz.generators.registry`
looks ops up by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from divfuzz.generators.spec import short_repr
from divfuzz.records.dtypes import is_float as is_float_dtype
from divfuzz.records.numbers import number_problem

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Meta:
    """Shape and dtype of a value flowing through a graph."""

    shape: Shape
    dtype: str

    @property
    def is_float(self) -> bool:
        return is_float_dtype(self.dtype)


@dataclass(frozen=True)
class WeightSpec:
    """A parameter tensor an op needs: its role suffix, shape, init kind and whether it is a float weight."""

    suffix: str
    shape: Shape
    init: str
    trainable: bool = True  # False for buffers such as batch norm's running statistics


# ---- parameter schemas ----------------------------------------------------------------------
# One small frozen value per parameter. `check` returns None when a value is inside the schema,
# else what was expected, in words. Values are JSON scalars, so `True` must not pass as an int
# (Python's bool is an int subclass) and a float must be finite (Python's json reads NaN and
# Infinity).


@dataclass(frozen=True)
class Choice:
    """One of a fixed tuple of JSON scalars (compared by type as well as value: 1 is not True)."""

    values: tuple[Any, ...]

    def check(self, value: Any) -> str | None:
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class Flag:
    """A JSON boolean."""

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "true or false"


@dataclass(frozen=True)
class IntRange:
    """An integer (not a bool) with lo <= value <= hi."""

    lo: int
    hi: int

    def check(self, value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and self.lo <= value <= self.hi:
            return None
        return f"an integer from {self.lo} to {self.hi}"


@dataclass(frozen=True)
class FloatRange:
    """A finite number (an integer is accepted, a bool is not) with lo <= value <= hi, and not 0
    when `nonzero` (a divisor)."""

    lo: float
    hi: float
    nonzero: bool = False

    def check(self, value: Any) -> str | None:
        ok = number_problem(value, low=self.lo, high=self.hi) is None and not (self.nonzero and value == 0)  # a 401-digit int too
        return None if ok else f"a finite number from {self.lo!r} to {self.hi!r}{' other than 0' if self.nonzero else ''}"


ParamSchema = Choice | Flag | IntRange | FloatRange


@dataclass(frozen=True)
class JumpRule:
    """Where an integer-valued op's output jumps, as code and data (no tensors).

    `pre_image` is a Python expression, over the op's first argument, of the float value the op
    rounds or compares: the same sub-expression its `code` template prints. The output jumps where
    the pre-image crosses k + `grid_offset` for an integer k (rounding), or crosses `threshold`
    (a comparison); exactly one of the two is set. `row_reduced`: each output element counts over
    the last dimension. `divfuzz.generators.build.rounding_boundaries` evaluates it into a `RoundingBoundary`.
    """

    pre_image: str
    grid_offset: float | None = None
    threshold: float | None = None
    row_reduced: bool = False
    # The pre-image says something only when the op's input is a value the graph computed: a
    # rounding op applied to a graph input sees the same exact data in eager and compiled, so a
    # flip there is never a last-bit difference upstream (a floor, a ceil, a round).
    computed_input_only: bool = False
    # The pre-image is a quotient the op computes in one step (a floor or trunc division): where
    # the exact quotient of eager's operands lies on the grid, eager's answer is that integer, and
    # an answer one step off is an approximate division (`divfuzz.records.mechanism_table`,
    # "approximate-division").
    quotient: bool = False


@dataclass(frozen=True)
class RoundingBoundary:
    """Where an integer-valued op's output jumps, as data for `divfuzz.oracles.boundary.distance_ulps`.

    `pre_image` is the float tensor the op rounds or compares, computed from eager's own input in
    the dtype eager computed it in (`dtype`). The output jumps where the pre-image crosses
    k + `grid_offset` for an integer k (rounding), or crosses `threshold` (a comparison); exactly
    one of the two is set. `row_reduced`: each output element counts over the last dimension, so a
    row is as close to a jump as its closest element.
    """

    pre_image: Any
    dtype: str
    grid_offset: float | None = None
    threshold: float | None = None
    row_reduced: bool = False


# An op's place in torch's autocast lists (aten/src/ATen/autocast_mode.cpp), which
# `divfuzz.generators.node_typing` reads: run in the autocast dtype, or in float32.
LOWER_PRECISION = "lower_precision_fp"
FP32 = "fp32"


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str  # "norm", "activation", "linear", "pointwise", "reduction", "cast", "encoding", "compare"
    arity: int  # number of data inputs (weights come after them)
    accepts: Callable[[tuple[Meta, ...]], bool]
    infer: Callable[[tuple[Meta, ...], dict[str, Any]], Meta]
    # code(arg_names, params) -> expression: the op's one definition, run by `divfuzz.generators.build`
    # and printed by `divfuzz.reports.repro`. Arg names are validated identifiers; params are printed only
    # through `repr` of a validated number or a lookup table, never as raw text. The expression
    # may use `torch`, `F` (torch.nn.functional) and `D(dtype)`, the dtype map (identity in the
    # real graph, float64 for floating dtypes in the reference).
    code: Callable[[list[str], dict[str, Any]], str]
    # Every parameter the op takes and what its values may be: exactly these keys, each inside its schema.
    params: Mapping[str, ParamSchema] = field(default_factory=dict)
    draw_params: Callable[[Callable, tuple[Meta, ...]], dict[str, Any]] = lambda draw, metas: {}
    weights: Callable[[tuple[Meta, ...], dict[str, Any]], tuple[WeightSpec, ...]] = lambda metas, p: ()
    # For ops with an integer output: `boundary(arg_names, params)` says where each output element
    # jumps, as a `JumpRule` whose pre-image is code (the oracle measures distances from eager's own
    # input value, see `divfuzz.generators.build.rounding_boundaries`).
    boundary: Callable[[list[str], dict[str, Any]], JumpRule] | None = None
    # For ops whose float output is selected by a comparison inside them (a `torch.where` on a
    # condition): the comparison, as a `JumpRule` with a threshold whose pre-image may read every
    # argument (a0, a1, ...). With `boundary`, what the explain experiments read as the decisions
    # a graph makes (`divfuzz.generators.build.decisions`): a rounding that moves one of them is
    # never elidable noise (`divfuzz.records.mechanism_table`, "rounding-decides").
    decision: Callable[[list[str], dict[str, Any]], JumpRule] | None = None
    differentiable: bool = True
    # Which of torch's autocast lists the op is on (LOWER_PRECISION, FP32, or None: neither).
    autocast_policy: str | None = None
    # Whether `code` mixes the weights into the result by type promotion (`x * weight + bias`), so
    # that float32 weights under autocast make the output float32 (`divfuzz.generators.node_typing`).
    promotes_weights: bool = False
    # The scalar params the op combines with its (bfloat16 or float16) tensor, each with its kind
    # of use (`divfuzz.records.reference_rules`: COMPARE, BINARY, MUL_DIV): where eager rounds such a
    # scalar to the tensor's dtype, the fp64 reference rounds it too (`build.reference_params`).
    eager_rounds_scalars: Mapping[str, str] = field(default_factory=dict)
    # An explicit cast: the param naming the dtype its output is rounded to. The fp64 reference
    # keeps that rounding (round to the dtype, then back to float64): a model's own casts are part
    # of what it computes, unlike autocast's, which the reference drops.
    rounds_to_param: str | None = None
    # How the op accumulates its first input along the last dim, in an order a compiler is free to
    # change (`ACCUMULATIONS`), or None. The range-edge
    # experiment (`divfuzz.fuzzer.engine.explain`) asks whether a partial result of some order
    # leaves the dtype's finite range.
    accumulates: str | None = None
    # Where the op's result is the same function of its args' last-dim elements taken in any
    # order, as a legal implementation may accumulate them (a sum, a mean, a variance, a norm's
    # statistics, a softmax's denominator), or None. The reduction-order experiment
    # (`divfuzz.fuzzer.engine.explain`) runs eager again with that dim permuted.
    order_free: "OrderFree | None" = None
    # An inclusive scan along the last dim with this combine ("add", "mul", "logaddexp"), or None:
    # a legal implementation may associate it in any order (a parallel prefix scan), which the
    # reduction-order experiment tries as a log-depth scan in the op's accumulation precision.
    scan: str | None = None
    # Aliasing (`divfuzz.generators.aliasing`): `mutates`, the op writes into its first data input
    # and its value is that input (an in-place op: `a0.add_(a1)`; unless its `clone` param is set,
    # then it writes into a copy, as users do before an in-place op on a leaf that requires grad);
    # `view`, its value is a view of its first data input (`a0.transpose(-2, -1)`), so that a later
    # in-place op on it writes into that input's storage.
    mutates: bool = False
    view: bool = False

    def param_problems(self, params: Mapping[str, Any]) -> list[str]:
        """What is wrong with `params` against this op's schema, one phrase per problem ([] when valid)."""
        problems = [f"unknown param {k!r} (takes: {', '.join(sorted(self.params)) or 'none'})" for k in params if k not in self.params]
        problems += [f"missing param {k!r}" for k in self.params if k not in params]
        for k, schema in self.params.items():
            if k in params:
                expected = schema.check(params[k])
                if expected is not None:
                    problems.append(f"param {k!r}: expected {expected} but got {short_repr(params[k], 80)}")
        return problems


@dataclass(frozen=True)
class OrderFree:
    """An op whose result does not depend on the order of its args' last-dim elements, only on
    pairing them: permuting the last dim of the args at `args` (the positions of those that run
    along the reduced dim: the data, a norm's affine weight and bias) gives the same result,
    permuted the same way when `keeps_dim` (a softmax, a norm) and unchanged when the op reduces
    that dim away (a sum, a variance). Invariant: mathematically exact for every input; only the
    floating-point evaluation order differs."""

    args: tuple[int, ...] = (0,)
    keeps_dim: bool = False
    # Only where the first arg has at least this many dims: a group norm's last dim is free only
    # past the channels (N, C, L...); over (N, C) it would regroup the channels.
    min_dims: int = 1


# What `OpDef.accumulates` may say: partial sums, partial sums of squares (an RMS norm), partial
# sums of squares about the mean (a variance, a layer norm: a sound algorithm never squares the
# raw values), partial products.
ACCUMULATIONS = ("sum", "sum_of_squares", "centered_sum_of_squares", "prod")


# What an op's `infer` or `weights` raises when its inputs and params do not fit together (a channel
# count its `groups` does not divide, a missing param): "not a valid node", never a divfuzz bug.
INFER_ERRORS = (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError)
