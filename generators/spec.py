"""The IR: a graph of ops as frozen, JSON-round-trippable data.

Invariants:
- A spec holds no torch objects; dtypes are strings ("float32", "bfloat16", "uint8", ...).
- `GraphSpec.from_json(spec.to_json()) == spec` for every valid spec.
- Loading never executes code: JSON is parsed, checked against the schema, and every op name
  is checked against the registry by `validate_spec` (in `divfuzz.generators.validate`).
- Any JSON text, however hostile (nested 100k deep, a 10k-digit integer, NaN), either loads or
  raises a `SpecError` naming the source; error messages quote values cut to a short length.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from divfuzz.generators.layouts import CONTIGUOUS, LAYOUTS
from divfuzz.records.dtypes import ALL_DTYPES, AUTOCAST_DTYPES, FLOAT_DTYPES, INT_DTYPES  # noqa: F401  (the IR's names)
from divfuzz.records.errors import SpecError
from divfuzz.records.numbers import number_problem

# Version 2 added an input's layout (and the graph's compile dimensions, below); a spec that uses
# none of them is written as version 1, byte for byte as before, so its digest is unchanged.
SCHEMA_VERSION = 2

# Seeds are fed to torch.Generator.manual_seed (and seed + 7919 for cotangents): an unsigned
# 32-bit range is plenty for drawing and keeps every derived seed valid.
MAX_SEED = 2**32

# How a graph input's values are made. "data" follows the case's InputRecipe; the others are
# parameter initialisations (fan-in scaled weights, norm weights near one, biases near zero).
INIT_KINDS = ("data", "fan_in", "near_one", "near_zero")

RECIPE_KINDS = (
    "normal",
    "large_mean",
    "near_constant",
    "near_pow2",
    "near_bf16_midpoint",
    "log_uniform",
    "mixed_sign",
    "decimal_grid",
    "ties",
    "signed_zeros",
    "inf_divisors",
    "subnormal",
    "near_fp16_midpoint",
    "near_half_integer",
    "near_overflow",
)


@dataclass(frozen=True)
class TensorSpec:
    """A graph input: a data tensor or a parameter (weight, bias). `layout` is how its values sit
    in memory (`divfuzz.generators.layouts.LAYOUTS`: strides, storage offset, overlap)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    requires_grad: bool = False
    init: str = "data"
    layout: str = CONTIGUOUS


@dataclass(frozen=True)
class Node:
    """One op application. `inputs` names graph inputs or earlier nodes; `params` are JSON scalars."""

    name: str
    op: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] = ()
    dtype: str = "float32"
    shape: tuple[int, ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class InputRecipe:
    """How data inputs are drawn: a named distribution and a seed (values are a pure function of both)."""

    kind: str = "normal"
    seed: int = 0


@dataclass(frozen=True)
class GraphSpec:
    """A whole case graph. `autocast` is None or a low-precision dtype that wraps the forward."""

    inputs: tuple[TensorSpec, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    recipe: InputRecipe = field(default_factory=InputRecipe)
    autocast: str | None = None
    backward: bool = False
    # How the graph compiles for shapes (`DYNAMIC_KINDS`): "" as the campaign's config says,
    # "marked" with `torch._dynamo.mark_dynamic` on `dynamic_dims` of every data input (the inputs
    # no node holds as a weight), "all" with `dynamic=True`. Shape siblings
    # (`divfuzz.generators.shape_siblings`) resize those dims through one compile.
    dynamic: str = ""
    dynamic_dims: tuple[int, ...] = ()
    # The `torch.compile` mode the graph compiles under (`MODES`), "" for the campaign config's.
    mode: str = ""

    # ---- derived views -------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        """(shape, dtype) of a graph input or node output."""
        for t in self.inputs:
            if t.name == name:
                return t.shape, t.dtype
        n = self.node(name)
        return n.shape, n.dtype

    @property
    def input_elements(self) -> int:
        """Elements of all graph inputs (data and weights): the size a minimizer lowers."""
        return sum(math.prod(t.shape) for t in self.inputs)

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)

    def op_signature(self) -> str:
        """Ops of the graph in order, deduplicated: a readable, stable summary."""
        seen: list[str] = []
        for op in self.op_names:
            if op not in seen:
                seen.append(op)
        return "+".join(seen) if seen else "(empty)"

    def with_recipe(self, recipe: InputRecipe) -> GraphSpec:
        return replace(self, recipe=recipe)

    # ---- JSON ----------------------------------------------------------------------------
    @property
    def uses_version_2(self) -> bool:
        """Whether the spec holds a field schema version 1 lacks (then it is written as version 2)."""
        return any(t.layout != CONTIGUOUS for t in self.inputs) or bool(self.dynamic) or bool(self.mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION if self.uses_version_2 else 1,
            "inputs": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "requires_grad": t.requires_grad,
                    "init": t.init,
                } | ({"layout": t.layout} if t.layout != CONTIGUOUS else {})
                for t in self.inputs
            ],
            "nodes": [
                {
                    "name": n.name,
                    "op": n.op,
                    "inputs": list(n.inputs),
                    "params": {k: v for k, v in n.params},
                    "dtype": n.dtype,
                    "shape": list(n.shape),
                }
                for n in self.nodes
            ],
            "outputs": list(self.outputs),
            "recipe": {"kind": self.recipe.kind, "seed": self.recipe.seed},
            "autocast": self.autocast,
            "backward": self.backward,
        } | ({"dynamic": self.dynamic, "dynamic_dims": list(self.dynamic_dims)} if self.dynamic else {}) | (
            {"mode": self.mode} if self.mode else {})

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def digest(self) -> str:
        """A short content hash: equal specs have equal digests."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str, *, source: str = "spec") -> GraphSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
        except RecursionError:
            raise SpecError(f"{source}: JSON nested too deeply to be a spec") from None
        except ValueError as e:  # e.g. an integer literal longer than Python's int-conversion limit
            raise SpecError(f"{source}: not a usable JSON document ({str(e)[:120]})") from None
        try:
            return cls.from_dict(data, source=source)
        except RecursionError:
            raise SpecError(f"{source}: JSON nested too deeply to be a spec") from None

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "spec") -> GraphSpec:
        """A spec from parsed JSON, checked field by field: a SpecError names the first bad field
        and its value (`validate_spec` then checks that the graph itself is valid)."""
        r = _Reader(source)
        r.expect(isinstance(data, dict), "top level", "an object", data)
        _check_schema_version(data.get("schema_version"), r)
        inputs = tuple(_read_input(r, t, f"inputs[{i}]") for i, t in enumerate(r.list(data, "inputs")))
        nodes = tuple(_read_node(r, n, f"nodes[{i}]") for i, n in enumerate(r.list(data, "nodes")))
        outputs = r.list(data, "outputs")
        r.expect(all(isinstance(o, str) for o in outputs), "outputs", "a list of names", outputs)
        autocast = data.get("autocast")
        r.expect(autocast is None or autocast in AUTOCAST_DTYPES, "autocast", _AUTOCAST_CHOICES, autocast)
        return cls(
            inputs=inputs,
            nodes=nodes,
            outputs=tuple(outputs),
            recipe=_read_recipe(r, data.get("recipe", {"kind": "normal", "seed": 0})),
            autocast=autocast,
            backward=r.flag(data, "backward", "backward"),
            dynamic=r.choice(data.get("dynamic", ""), DYNAMIC_KINDS, "dynamic"),
            dynamic_dims=r.dims(data, "dynamic_dims"),
            mode=r.choice(data.get("mode", ""), MODES, "mode"),
        )


def reachable(outputs: tuple[str, ...], nodes: tuple[Node, ...]) -> set[str]:
    """The names (nodes and graph inputs) that `outputs` reach through `nodes`' inputs, outputs included."""
    by_name = {n.name: n for n in nodes}
    live: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name not in live:
            live.add(name)
            stack.extend(by_name[name].inputs if name in by_name else ())
    return live


# How a graph compiles for shapes (`GraphSpec.dynamic`).
DYNAMIC_KINDS = ("", "marked", "all")
# The `torch.compile` modes a graph may compile under (`GraphSpec.mode`): templates and epilogue
# fusion without CUDA graphs, and CUDA graphs (a replayed graph's static buffers).
MODES = ("", "max-autotune-no-cudagraphs", "reduce-overhead")

_AUTOCAST_CHOICES = "null, " + " or ".join(repr(d) for d in AUTOCAST_DTYPES)


def _check_schema_version(version: Any, r: _Reader) -> None:
    r.expect(number_problem(version, integer=True) is None, "schema_version", "an integer", version)  # not `true`
    if version > SCHEMA_VERSION:
        raise SpecError(
            f"{r.source}: schema_version {version} is newer than this divfuzz understands "
            f"({SCHEMA_VERSION}); upgrade divfuzz to load it"
        )
    if version < 1:
        raise SpecError(f"{r.source}: schema_version {version} is not a valid version")


def _read_input(r: _Reader, t: Any, where: str) -> TensorSpec:
    return TensorSpec(
        name=r.string(t, "name", where),
        shape=r.shape(t, f"{where}.shape"),
        dtype=r.dtype(t, f"{where}.dtype"),
        requires_grad=r.flag(t, "requires_grad", f"{where}.requires_grad"),
        init=r.choice(t.get("init", "data"), INIT_KINDS, f"{where}.init"),
        layout=r.choice(t.get("layout", CONTIGUOUS), LAYOUTS, f"{where}.layout"),
    )


def _read_node(r: _Reader, n: Any, where: str) -> Node:
    r.expect(isinstance(n, dict), where, "an object", n)
    params = n.get("params", {})
    r.expect(isinstance(params, dict), f"{where}.params", "an object", params)
    for k, v in params.items():
        r.expect(v is None or isinstance(v, (bool, int, float, str)), f"{where}.params.{k}", "a JSON scalar", v)
    node_inputs = n.get("inputs")
    r.expect(
        isinstance(node_inputs, list) and all(isinstance(x, str) for x in node_inputs),
        f"{where}.inputs",
        "a list of names",
        node_inputs,
    )
    return Node(
        name=r.string(n, "name", where),
        op=r.string(n, "op", where),
        inputs=tuple(node_inputs),
        params=tuple(sorted(params.items())),
        dtype=r.dtype(n, f"{where}.dtype"),
        shape=r.shape(n, f"{where}.shape"),
    )


def _read_recipe(r: _Reader, recipe: Any) -> InputRecipe:
    r.expect(isinstance(recipe, dict), "recipe", "an object", recipe)
    seed = recipe.get("seed", 0)
    r.expect(
        isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < MAX_SEED,
        "recipe.seed",
        f"an integer from 0 to {MAX_SEED - 1}",
        seed,
    )
    return InputRecipe(kind=r.choice(recipe.get("kind", "normal"), RECIPE_KINDS, "recipe.kind"), seed=seed)


class _Reader:
    """Checks one field at a time and names the bad field and its value in the error."""

    def __init__(self, source: str):
        self.source = source

    def expect(self, ok: bool, where: str, what: str, value: Any) -> None:
        if not ok:
            raise SpecError(f"{self.source}: expected {what} for {where} but got {short_repr(value)}")

    def flag(self, obj: dict, key: str, where: str) -> bool:
        value = obj.get(key, False)
        self.expect(isinstance(value, bool), where, "true or false", value)
        return value

    def list(self, obj: dict, key: str) -> list:
        value = obj.get(key)
        self.expect(isinstance(value, list), key, "a list", value)
        return value

    def string(self, obj: Any, key: str, where: str) -> str:
        self.expect(isinstance(obj, dict), where, "an object", obj)
        value = obj.get(key)
        self.expect(isinstance(value, str) and value != "", f"{where}.{key}", "a non-empty string", value)
        return value

    def shape(self, obj: dict, where: str) -> tuple[int, ...]:
        value = obj.get(where.rsplit(".", 1)[-1])
        self.expect(
            isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value),
            where,
            "a list of non-negative integers",
            value,
        )
        return tuple(value)

    def dims(self, obj: dict, key: str) -> tuple[int, ...]:
        value = obj.get(key, [])
        self.expect(isinstance(value, list) and len(value) <= 8 and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 8 for d in value), key,
            "a list of at most 8 dims from 0 to 7", value)
        return tuple(value)

    def dtype(self, obj: dict, where: str) -> str:
        return self.choice(obj.get("dtype"), ALL_DTYPES, where)

    def choice(self, value: Any, allowed: tuple[str, ...], where: str) -> str:
        self.expect(isinstance(value, str) and value in allowed, where, "one of " + ", ".join(allowed), value)
        return value


def short_repr(value: Any, limit: int = 120) -> str:
    """`repr(value)` cut to `limit` characters: error messages stay one line for any input."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
