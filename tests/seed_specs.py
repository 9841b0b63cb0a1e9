"""The seed bug reports' cases, written as divfuzz specs (used by tests on CPU and GPU)."""

from __future__ import annotations

from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec


def layer_norm_linear(rows: int = 2048, dim: int = 128) -> GraphSpec:
    """Seed 000: LayerNorm(dim) -> Linear(dim, dim) under bf16 autocast."""
    return GraphSpec(
        inputs=(
            TensorSpec("x0", (rows, dim), "float32"),
            TensorSpec("v1_weight", (dim,), "float32", init="near_one"),
            TensorSpec("v1_bias", (dim,), "float32", init="near_zero"),
            TensorSpec("v2_weight", (dim, dim), "float32", init="fan_in"),
            TensorSpec("v2_bias", (dim,), "float32", init="near_zero"),
        ),
        nodes=(
            Node("v1", "layer_norm", ("x0", "v1_weight", "v1_bias"), (("affine", True), ("eps", 1e-5)), "float32", (rows, dim)),
            Node("v2", "linear", ("v1", "v2_weight", "v2_bias"), (("bias", True), ("out_features", dim)), "bfloat16", (rows, dim)),
        ),
        outputs=("v2",),
        autocast="bfloat16",
    )


def sigmoid_gate(rows: int = 4096, dim: int = 128) -> GraphSpec:
    """Seed 000's second cause: p(x) * sigmoid(g(x)) with bf16 linears."""
    lin = (("bias", True), ("out_features", dim))
    return GraphSpec(
        inputs=(
            TensorSpec("x0", (rows, dim), "bfloat16"),
            TensorSpec("v1_weight", (dim, dim), "bfloat16", init="fan_in"),
            TensorSpec("v1_bias", (dim,), "bfloat16", init="near_zero"),
            TensorSpec("v2_weight", (dim, dim), "bfloat16", init="fan_in"),
            TensorSpec("v2_bias", (dim,), "bfloat16", init="near_zero"),
        ),
        nodes=(
            Node("v1", "linear", ("x0", "v1_weight", "v1_bias"), lin, "bfloat16", (rows, dim)),
            Node("v2", "linear", ("x0", "v2_weight", "v2_bias"), lin, "bfloat16", (rows, dim)),
            Node("v3", "gate", ("v1", "v2"), (), "bfloat16", (rows, dim)),
        ),
        outputs=("v3",),
    )


def unary_bf16(op: str, rows: int = 1024, dim: int = 1024, recipe: str = "normal") -> GraphSpec:
    """One pointwise op on a bf16 tensor (gelu erf / tanh from the design's table)."""
    return GraphSpec(
        inputs=(TensorSpec("x0", (rows, dim), "bfloat16"),),
        nodes=(Node("v1", op, ("x0",), (), "bfloat16", (rows, dim)),),
        outputs=("v1",),
        recipe=InputRecipe(recipe, 0),
    )


def e8m0(rows: int = 256, dim: int = 256, recipe: str = "near_pow2") -> GraphSpec:
    """Seed 002's encoding: GELU (hand-written) -> log2 -> ceil -> clamp -> +127 -> uint8."""
    return GraphSpec(
        inputs=(TensorSpec("x0", (rows, dim), "float32"),),
        nodes=(
            Node("v1", "gelu_manual", ("x0",), (), "float32", (rows, dim)),
            Node("v2", "e8m0_encode", ("v1",), (("mode", "ceil"), ("to", "uint8")), "uint8", (rows, dim)),
        ),
        outputs=("v2",),
        recipe=InputRecipe(recipe, 0),
    )
