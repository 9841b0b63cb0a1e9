"""The op registry: what an op is, as data plus three functions.

Each `OpDef` states once:
- which inputs it accepts (`accepts`), so the strategies only ever draw valid graphs;
- its output shape and dtype (`infer`);
- the parameters it draws (`draw_params`) and the weight tensors it needs (`weights`);
- how it runs (`run`, given a `BuildContext` that maps dtypes, so the same code builds the
  real graph and its float64 reference);
- how it reads as Python (`code`), for `repro.py`. `tests/test_ops.py` checks that `run` and
  `code` compute bit-identical results for every op.

Adding an op is one `register(OpDef(...))` call in `generators/ops.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from generators.errors import UnknownOpError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Meta:
    """Shape and dtype of a value flowing through a graph."""

    shape: Shape
    dtype: str

    @property
    def is_float(self) -> bool:
        return self.dtype in ("float32", "bfloat16", "float16", "float64")


@dataclass(frozen=True)
class WeightSpec:
    """A parameter tensor an op needs: its role suffix, shape, init kind and whether it is a float weight."""

    suffix: str
    shape: Shape
    init: str
    trainable: bool = True  # False for buffers such as batch norm's running statistics


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str  # "norm", "activation", "linear", "pointwise", "reduction", "cast", "encoding", "compare"
    arity: int  # number of data inputs (weights come after them)
    accepts: Callable[[tuple[Meta, ...]], bool]
    infer: Callable[[tuple[Meta, ...], dict[str, Any]], Meta]
    run: Callable[..., Any]  # run(ctx, *tensors, **params) -> tensor
    code: Callable[[list[str], dict[str, Any]], str]  # code(arg_names, params) -> expression
    draw_params: Callable[[Callable, tuple[Meta, ...]], dict[str, Any]] = lambda draw, metas: {}
    weights: Callable[[tuple[Meta, ...], dict[str, Any]], tuple[WeightSpec, ...]] = lambda metas, p: ()
    # For ops with an integer output: `boundary_ulps(x, precast_dtype, **params)` is the distance
    # (in ULPs of the pre-cast dtype, float64, NaN for an undefined cast) of each output element's
    # pre-image from the nearest rounding boundary, computed from eager's own input value `x`.
    boundary_ulps: Callable[..., Any] | None = None
    differentiable: bool = True
    tags: frozenset[str] = field(default_factory=frozenset)


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is registered twice")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    import generators.ops  # noqa: F401  (fills the registry)

    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UnknownOpError(f"unknown op {name!r}; known ops: {known}") from None


def all_ops() -> dict[str, OpDef]:
    import generators.ops  # noqa: F401

    return dict(REGISTRY)
