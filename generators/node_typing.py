"""The node-typing rule, written once: what dtype and shape a node outputs, and which weights it
takes in which dtype, given its op, params, data inputs and the spec's autocast.

The strategies draw with it (`new_node`), `divfuzz.generators.validate` holds every loaded spec to it, and
`divfuzz.generators.surgery` re-types every edited spec with it, so a drawn, a loaded and a minimized spec
cannot disagree about a node's dtype.

The rule, as torch's CPU autocast runs it (torch 2.13; `tests/test_node_typing.py` runs every
registered op under `torch.autocast("cpu")` on every input dtype and checks it):
- weights are made in the data's dtype, except under autocast, where they stay float32 as a
  model's parameters would (`weight_dtype`);
- outside autocast, and for ops on none of autocast's lists, a node outputs what its op's `infer`
  says;
- under autocast, an op on torch's lower-precision list (`OpDef.autocast_policy ==
  LOWER_PRECISION`: linear, matmul) outputs the autocast dtype, and one on its fp32 list (`FP32`:
  cross_entropy, mse_loss, margin_ranking_loss) outputs float32, whatever its inputs;
- an op whose code mixes its weights into its result by type promotion (`OpDef.promotes_weights`:
  the hand-written norms' `* weight + bias`) outputs the promoted dtype of its result and its
  weights, so float32 weights under autocast make it float32 (a fused kernel such as
  `F.layer_norm` keeps its input's dtype instead).

A spec holds one dtype per node, the CPU's. CUDA's autocast lists send more of the registered ops
to float32 (measured on an H100 with torch 2.11: exp, log, rsqrt, reciprocal, pow_scalar, softmax,
log_softmax, sum, cumsum, cumprod, layer_norm, group_norm, interpolate_nearest/_bilinear, and the
hand-written norms without affine), so there an autocast graph's values after a linear may be
wider than its spec says; the engine judges the tensors it gets, never the spec's dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from divfuzz.generators.opdef import FP32, LOWER_PRECISION, Meta, OpDef, WeightSpec
from divfuzz.generators.spec import Node, TensorSpec

def promote(*dtypes: str) -> str:
    """The dtype torch's type promotion gives floating tensors of `dtypes`: their common dtype,
    else float64 if one is, else float32 (bfloat16 with float16 is float32)."""
    if len(set(dtypes)) == 1:
        return dtypes[0]
    return "float64" if "float64" in dtypes else "float32"


def weight_dtype(data_dtype: str, autocast: str | None) -> str:
    """The dtype a node's new weights are made in: float32 under autocast, else its data's."""
    return "float32" if autocast else data_dtype


@dataclass(frozen=True)
class TypedWeight:
    """A weight a node takes (its op's `WeightSpec`) and the dtype it is made in."""

    weight: WeightSpec
    dtype: str

    def input(self, name: str, *, backward: bool) -> TensorSpec:
        """The graph input that holds this weight, named `name`."""
        w = self.weight
        return TensorSpec(name, tuple(w.shape), self.dtype, requires_grad=backward and w.trainable, init=w.init)


def node_weights(op: OpDef, data: tuple[Meta, ...], params: Mapping[str, Any], autocast: str | None) -> tuple[TypedWeight, ...]:
    """The weights a new node of `op` on `data` takes, each in `weight_dtype`. Raises one of
    `divfuzz.generators.opdef.INFER_ERRORS` when `params` do not fit `data`."""
    dtype = weight_dtype(data[0].dtype, autocast)
    return tuple(TypedWeight(w, dtype) for w in op.weights(data, dict(params)))


def node_output(op: OpDef, data: tuple[Meta, ...], params: Mapping[str, Any], autocast: str | None,
                weight_dtypes: tuple[str, ...] = (), *, as_before_fp32: bool = False) -> Meta:
    """What a node of `op` on `data` with `params` outputs under `autocast`, given the dtypes of
    the weights it holds. Raises one of `divfuzz.generators.opdef.INFER_ERRORS` when `params` do not fit.

    `as_before_fp32`: the rule by which specs were typed before it knew the fp32 list and weight
    promotion (only the lower-precision ops changed dtype), which `validate_spec` needs to read
    such stored specs; nothing else uses it."""
    inferred = op.infer(data, dict(params))
    if autocast and op.autocast_policy == LOWER_PRECISION:
        return Meta(inferred.shape, autocast)
    if as_before_fp32:
        return inferred
    if autocast and op.autocast_policy == FP32:
        return Meta(inferred.shape, "float32")
    if op.promotes_weights and weight_dtypes:
        return Meta(inferred.shape, promote(inferred.dtype, *weight_dtypes))
    return inferred


def new_node(op: OpDef, name: str, args: tuple[str, ...], data: tuple[Meta, ...], params: Mapping[str, Any], *,
             autocast: str | None, backward: bool) -> tuple[Node, tuple[TensorSpec, ...]]:
    """A node `name` of `op` on the data values `args` (of metas `data`), and the fresh weight
    inputs it takes (named `<name>_<suffix>`, in `weight_dtype`; trainable ones require grad
    when `backward`)."""
    weights = node_weights(op, data, params, autocast)
    out = node_output(op, data, params, autocast, tuple(w.dtype for w in weights))
    inputs = tuple(w.input(f"{name}_{w.weight.suffix}", backward=backward) for w in weights)
    node = Node(name=name, op=op.name, inputs=tuple(args) + tuple(t.name for t in inputs),
                params=tuple(sorted(params.items())), dtype=out.dtype, shape=out.shape)
    return node, inputs
