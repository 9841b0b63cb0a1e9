#!/usr/bin/env python
"""Write the shipped gate corpus (corpus/specs/*.json) from code, so that it can be regenerated.

Two kinds of spec:
- the seeds' cases (known divergences, at the sizes that show them);
- small "fan-out" graphs: each op applied straight to the graph inputs, so that a bf16/fp16 op
  is compared alone (no fused chain whose skipped roundings would make it diverge), one spec per
  (op family, dtype, forward|backward). Together they cover every registered op and dtype.
Usage: python scripts/make_corpus.py [corpus/specs]
"""

from __future__ import annotations

import sys
from pathlib import Path

from divfuzz.generators.node_typing import new_node
from divfuzz.generators.opdef import Meta
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.records.dtypes import DATA_DTYPES
from divfuzz.generators.validate import validate_spec


class _Graph:
    """A tiny builder: add inputs and op nodes, typed by `divfuzz.generators.node_typing`."""

    def __init__(self, autocast: str | None = None, backward: bool = False):
        self.inputs: list[TensorSpec] = []
        self.nodes: list[Node] = []
        self.meta: dict[str, Meta] = {}
        self.autocast = autocast
        self.backward = backward

    def input(self, name, shape, dtype):
        self.inputs.append(TensorSpec(name, tuple(shape), dtype, requires_grad=self.backward))
        self.meta[name] = Meta(tuple(shape), dtype)
        return name

    def op(self, op_name, *args, **params):
        metas = tuple(self.meta[a] for a in args)
        node, weights = new_node(get_op(op_name), f"v{len(self.nodes) + 1}", args, metas, params,
                                 autocast=self.autocast, backward=self.backward)
        self.inputs.extend(weights)
        self.nodes.append(node)
        self.meta[node.name] = Meta(node.shape, node.dtype)
        return node.name

    def spec(self, outputs, recipe=InputRecipe("normal", 0)) -> GraphSpec:
        return validate_spec(
            GraphSpec(tuple(self.inputs), tuple(self.nodes), tuple(outputs), recipe, self.autocast, self.backward)
        )


SHAPE = (8, 4, 24)  # rows, channels (group/batch norm), last dim


def seeds() -> dict[str, GraphSpec]:
    out = {}
    g = _Graph(autocast="bfloat16")
    x = g.input("x", (4096, 128), "float32")
    out["seed-layernorm-linear-autocast-bf16"] = g.spec(
        [g.op("linear", g.op("layer_norm", x, eps=1e-5, affine=True), out_features=64, bias=True)]
    )
    g = _Graph()
    x = g.input("x", (4096, 128), "bfloat16")
    p = g.op("linear", x, out_features=128, bias=True)
    q = g.op("linear", x, out_features=128, bias=True)
    out["seed-gate-bf16"] = g.spec([g.op("gate", p, q)])
    g = _Graph()
    x = g.input("x", (1024, 1024), "bfloat16")
    out["seed-gelu-erf-bf16"] = g.spec([g.op("gelu", x)])
    g = _Graph()
    x = g.input("x", (1024, 1024), "bfloat16")
    out["seed-gelu-tanh-bf16"] = g.spec([g.op("gelu_tanh", x)])
    g = _Graph()
    x = g.input("x", (4096, 128), "float32")
    h = g.op("gelu_manual", x)
    out["seed-e8m0-encode-uint8"] = g.spec([g.op("e8m0_encode", h, mode="ceil", to="uint8")], InputRecipe("near_pow2", 0))
    return out


def family_specs(dtype: str, backward: bool) -> dict[str, GraphSpec]:
    mode = "bwd" if backward else "fwd"
    # The separate forward-only specs are left out of the shipped corpus: backward specs compare
    # their forward outputs too, and each spec costs a compile on the gate's clock.
    out = {}

    g = _Graph(backward=backward)
    x = g.input("x", SHAPE, dtype)
    outs = [
        g.op("layer_norm", x, eps=1e-5, affine=True),
        g.op("layer_norm_manual", x, eps=1e-5, affine=True),
        g.op("rms_norm", x, eps=1e-6, affine=True),
        g.op("rms_norm_manual", x, eps=1e-6, affine=False),
        g.op("group_norm", x, groups=2, eps=1e-5, affine=True),
        g.op("batch_norm_eval", x, eps=1e-5),
        g.op("linear", x, out_features=8, bias=True),
        g.op("matmul", x, out_features=8),
    ]
    out[f"norm-linear-{dtype}-{mode}"] = g.spec(outs)

    g = _Graph(backward=backward)
    x = g.input("x", SHAPE, dtype)
    y = g.input("y", SHAPE, dtype)
    names = ("gelu", "gelu_tanh", "gelu_manual", "silu", "sigmoid", "relu", "elu", "tanh", "softmax", "log_softmax")
    outs = [g.op(n, x) for n in names] + [g.op("gate", x, y)]
    out[f"activation-{dtype}-{mode}"] = g.spec(outs)

    g = _Graph(backward=backward)
    x = g.input("x", SHAPE, dtype)
    y = g.input("y", SHAPE, dtype)
    other = "float32" if dtype != "float32" else "bfloat16"
    outs = [
        g.op("add", x, y),
        g.op("mul", x, y),
        g.op("log", g.op("abs", x)),
        g.op("exp", x),
        g.op("sign", x),
        g.op("add_eps", x, eps=1e-3),
        g.op("div", x, divisor=3.0, mode=None),
        g.op("div", x, divisor=0.3, mode="floor"),
        g.op("where_cmp", x, y, cmp="gt", against="tensor", threshold=0.0),
        g.op("sum", x, keepdim=False),
        g.op("mean", x, keepdim=True),
        g.op("amax", x, keepdim=False),
        g.op("cast", x, to=other),
    ]
    out[f"pointwise-reduction-{dtype}-{mode}"] = g.spec(outs)

    # Integer outputs have no gradient: the encodings get a forward-only spec.
    g = _Graph()
    x = g.input("x", SHAPE, dtype)
    outs = [
        g.op("e8m0_encode", x, mode="ceil", to="uint8"),
        g.op("e8m0_encode", x, mode="round", to="int8"),
        g.op("quantize", x, scale=0.05, mode="round", to="int8"),
        g.op("quantize", x, scale=0.1, mode="floor", to="uint8"),
        g.op("count_cmp", x, cmp="gt", threshold=0.5),
    ]
    out[f"encoding-{dtype}-fwd"] = g.spec(outs)
    return out


def autocast_specs() -> dict[str, GraphSpec]:
    out = {}
    for backward in (False, True):
        g = _Graph(autocast="bfloat16", backward=backward)
        x = g.input("x", (32, 64), "float32")
        h = g.op("layer_norm", x, eps=1e-5, affine=True)
        out[f"autocast-bf16-ln-linear-gelu-{'bwd' if backward else 'fwd'}"] = g.spec(
            [g.op("gelu", g.op("linear", h, out_features=24, bias=True))]
        )
    return out


def all_specs() -> dict[str, GraphSpec]:
    specs = seeds() | autocast_specs()
    for dtype in DATA_DTYPES:
        # A backward spec also compares its forward outputs: it covers both kinds of feature.
        specs |= family_specs(dtype, backward=True)
    return specs


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "corpus/specs")
    folder.mkdir(parents=True, exist_ok=True)
    for name, spec in sorted(all_specs().items()):
        (folder / f"{name}.json").write_text(spec.to_json() + "\n")
        print(f"{folder / name}.json")
