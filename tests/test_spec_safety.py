"""Specs are valid by construction: every field a hostile file could set is checked at load.

Fast: nothing here compiles. Each test builds a small valid spec, breaks one field, and asserts
that `load_spec` refuses it with a SpecError that names the field (or the bad value).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from divfuzz.records.errors import InvalidGraphError, SpecError
from divfuzz.generators.registry import all_ops
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import MAX_TENSOR_ELEMENTS, MAX_TOTAL_ELEMENTS, load_spec, validate_spec

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "specs"


def base() -> dict:
    """x -> layer_norm (affine) -> gelu; a valid spec to break one field at a time."""
    return {
        "schema_version": 1,
        "inputs": [
            {"name": "x", "shape": [4, 8], "dtype": "float32", "requires_grad": False, "init": "data"},
            {"name": "v1_weight", "shape": [8], "dtype": "float32", "requires_grad": False, "init": "near_one"},
            {"name": "v1_bias", "shape": [8], "dtype": "float32", "requires_grad": False, "init": "near_zero"},
        ],
        "nodes": [
            {"name": "v1", "op": "layer_norm", "inputs": ["x", "v1_weight", "v1_bias"],
             "params": {"eps": 1e-5, "affine": True}, "dtype": "float32", "shape": [4, 8]},
            {"name": "v2", "op": "gelu", "inputs": ["v1"], "params": {}, "dtype": "float32", "shape": [4, 8]},
        ],
        "outputs": ["v2"],
        "recipe": {"kind": "normal", "seed": 0},
        "autocast": None,
        "backward": False,
    }


def refused(data: dict, *fragments: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(json.dumps(data), source="crafted.json")
    message = str(info.value)
    assert "crafted.json" in message
    for f in fragments:
        assert f in message, message
    assert len(message) < 600, "error messages stay short whatever the input"
    return message


def rename(data: dict, old: str, new: str) -> dict:
    """Rename a value everywhere it is mentioned (so only the name itself is wrong)."""
    data = copy.deepcopy(data)
    for t in data["inputs"]:
        t["name"] = new if t["name"] == old else t["name"]
    for n in data["nodes"]:
        n["name"] = new if n["name"] == old else n["name"]
        n["inputs"] = [new if i == old else i for i in n["inputs"]]
    data["outputs"] = [new if o == old else o for o in data["outputs"]]
    return data


def test_base_spec_and_every_committed_corpus_spec_validate():
    load_spec(json.dumps(base()))
    files = sorted(CORPUS.glob("*.json"))
    assert len(files) >= 20
    for path in files:
        load_spec(path.read_text(encoding="utf-8"), source=str(path))


@pytest.mark.parametrize("op", sorted(all_ops()))
def test_drawn_params_stay_inside_each_ops_schema(op):
    """`draw_params` only draws inside `OpDef.params`: every drawn spec validates."""
    schema = all_ops()[op].params

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(graph_specs(ops=(op,), min_ops=1, max_ops=3))
    def check(spec):
        for n in spec.nodes:  # the op's own nodes, and the cast guards the strategy puts before encodings
            assert set(n.kwargs) == set(schema if n.op == op else all_ops()[n.op].params)
            assert all_ops()[n.op].param_problems(n.kwargs) == []
        validate_spec(spec)
        assert load_spec(spec.to_json()) == spec

    check()


@pytest.mark.parametrize(
    "name",
    [
        "D.__dict__[__import__('os').system('touch pwned')]",
        "v1\n__import__('os').system('touch pwned')\nv1",
        "my value", "it's", "nul\x00", "1x", "v-1", "",
        "\u0445",  # Cyrillic kha, looks like the Latin x: a unicode confusable
        "x\u200b",  # a zero-width space after x
        "class", "match", "print", "__import__", "__name__", "torch", "F", "D", "ref", "g", "device",
        "model", "make_inputs", "normal", "fan_in", "DEVICE_TYPE", "sys", "os", "a" * 65,
    ],
)
def test_unsafe_or_reserved_names_are_refused(name):
    if name == "":
        refused(rename(base(), "v2", name), "non-empty string")
        return
    refused(rename(base(), "v2", name), "node name")
    refused(rename(base(), "x", name), "input name")


def test_duplicate_names_over_inputs_and_nodes_are_refused():
    refused(rename(base(), "v2", "x"), "'x' is used twice")
    data = base()
    data["inputs"][1]["name"] = "x"
    data["nodes"][0]["inputs"][1] = "x"
    refused(data, "'x' is used twice")


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("eps", float("nan"), "finite number"),
        ("eps", float("inf"), "finite number"),
        ("eps", 1e308, "from 0.0 to 1.0"),
        ("eps", "1e-5", "finite number"),
        ("eps", True, "finite number"),
        ("affine", 1, "true or false"),
        ("affine", "True) or __import__('os').system('x'", "true or false"),
        ("extra", 3, "unknown param 'extra'"),
    ],
)
def test_params_outside_the_ops_schema_are_refused(field, value, fragment):
    data = base()
    data["nodes"][0]["params"][field] = value
    refused(data, "v1", fragment)


def test_missing_param_is_refused():
    data = base()
    del data["nodes"][0]["params"]["eps"]
    refused(data, "missing param 'eps'")


def _single(op: str, params: dict, shape=(4, 8), out_shape=None, dtype="float32", weights=()) -> dict:
    data = base()
    data["inputs"] = data["inputs"][:1] + [
        {"name": w, "shape": list(s), "dtype": "float32", "requires_grad": False, "init": "fan_in"} for w, s in weights
    ]
    data["inputs"][0]["shape"] = list(shape)
    data["nodes"] = [{"name": "v1", "op": op, "inputs": ["x", *(w for w, _ in weights)], "params": params,
                      "dtype": dtype, "shape": list(out_shape or shape)}]
    data["outputs"] = ["v1"]
    return data


def test_string_groups_huge_out_features_and_bad_choices_are_refused():
    groups = "2, None, None); __import__('os').system('touch pwned'); (0"
    refused(_single("group_norm", {"groups": groups, "eps": 1e-5, "affine": False}), "param 'groups'")
    refused(_single("group_norm", {"groups": 3, "eps": 1e-5, "affine": False}, shape=(4, 8, 5)), "does not divide")
    refused(_single("linear", {"out_features": 10**9, "bias": False}, out_shape=(4, 10**9), weights=[("w", (10**9, 8))]),
            "input 'w'", "over the cap")
    refused(_single("linear", {"out_features": 5000, "bias": False}, out_shape=(4, 5000), weights=[("w", (5000, 8))]),
            "param 'out_features': expected an integer from 1 to 4096")
    refused(_single("linear", {"out_features": True, "bias": False}, out_shape=(4, 1), weights=[("w", (1, 8))]),
            "out_features")
    refused(_single("cast", {"to": "float32)); import os; ((float32"}), "param 'to'")
    refused(_single("sum", {"keepdim": "__import__('os')"}, out_shape=(4,)), "param 'keepdim'")
    refused(_single("div", {"divisor": 0.0, "mode": None}), "other than 0")
    refused(_single("div", {"divisor": 2.0, "mode": "floor')+__import__('os').system('x')+('"}), "param 'mode'")
    where = _single("where_cmp", {"cmp": "gt", "against": "scalar", "threshold": float("nan")})
    where["nodes"][0]["inputs"] = ["x", "x"]
    refused(where, "param 'threshold'")
    refused(_single("count_cmp", {"cmp": "ne", "threshold": 0.0}, out_shape=(4,), dtype="int64"), "param 'cmp'")
    refused(_single("quantize", {"scale": 0.1, "mode": "getattr", "to": "int8"}, dtype="int8"), "param 'mode'")


def test_node_dtype_must_match_what_its_op_infers():
    data = base()
    data["nodes"][1]["dtype"] = "bfloat16"
    refused(data, "dtype 'bfloat16' but its inputs give 'float32'")
    # Under autocast a linear gives the autocast dtype: that is what the corpus's autocast specs hold.
    data = _single("linear", {"out_features": 4, "bias": False}, out_shape=(4, 4), weights=[("w", (4, 8))])
    data["autocast"] = "bfloat16"
    refused(data, "dtype 'float32' but its inputs give 'bfloat16'")
    data["nodes"][0]["dtype"] = "bfloat16"
    load_spec(json.dumps(data))


def test_element_counts_dims_and_seeds_are_capped():
    data = base()
    for t in data["inputs"]:
        t["shape"] = [10**6, 10**6] if t["name"] == "x" else [10**6]
    for n in data["nodes"]:
        n["shape"] = [10**6, 10**6]
    refused(data, f"over the cap of {MAX_TENSOR_ELEMENTS}")
    refused(_single("gelu", {}, shape=(1,) * 9), "more than 8 dims")
    many = _single("add", {}, shape=(2**12, 2**12))
    many["inputs"].append(dict(many["inputs"][0], name="y"))
    many["nodes"][0]["inputs"] = ["x", "y"]
    chain = [dict(many["nodes"][0])]
    for i in range(2, 5):
        chain.append({"name": f"v{i}", "op": "add", "inputs": [f"v{i - 1}", "x"], "params": {}, "dtype": "float32",
                      "shape": [2**12, 2**12]})
    many["nodes"] = chain
    many["outputs"] = ["v4"]
    refused(many, f"over the cap of {MAX_TOTAL_ELEMENTS}")
    for seed in (2**80, -1, 2**32, True, 1.5):
        data = base()
        data["recipe"]["seed"] = seed
        refused(data, "recipe.seed")


def test_dangling_nodes_and_outputs_that_name_inputs_are_refused():
    data = base()
    data["outputs"] = ["v1"]
    refused(data, "['v2'] reach no output")
    data = base()
    data["outputs"] = ["v2", "x"]
    refused(data, "'x' is a graph input")
    data = base()
    data["outputs"] = ["v2", "v2"]
    refused(data, "name a node twice")


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        (("recipe", "kind"), ["normal"], "recipe.kind"),
        (("recipe", "kind"), "__import__", "recipe.kind"),
        (("inputs", 1, "init"), {"kind": "near_one"}, "inputs[1].init"),
        (("inputs", 0, "requires_grad"), "yes", "requires_grad"),
        (("inputs", 0, "dtype"), "uint8", "graph inputs are floating"),
        (("backward", ), 1, "backward"),
        (("autocast", ), "float32", "autocast"),
    ],
)
def test_fields_of_a_wrong_type_are_refused(path, value, fragment):
    data = base()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    refused(data, fragment)


def test_json_nested_100k_deep_and_huge_literals_give_a_spec_error():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(SpecError, match="nested too deeply"):
        load_spec(deep, source="deep.json")
    # Deep inside a field that is echoed in the message: the message stays short.
    data = base()
    data["recipe"] = json.loads("[" * 500 + "]" * 500)
    refused(data, "recipe")
    with pytest.raises(SpecError, match="not a usable JSON document"):
        load_spec('{"schema_version": 1' + "0" * 5000 + "}", source="digits.json")


def test_invalid_graph_errors_are_spec_errors():
    assert issubclass(InvalidGraphError, SpecError)
