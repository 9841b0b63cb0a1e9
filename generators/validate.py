"""Checking that a loaded spec is a graph the registry can build, and safe to print as code.

`validate_spec` raises `UnknownOpError` or `InvalidGraphError` naming the bad field; it never
runs torch. Every spec drawn by `divfuzz.generators.strategies` passes it (a property test checks).
A spec that passes it holds only:
- names that are plain ASCII identifiers, not keywords, builtins or names the generated
  `repro.py` uses (`RESERVED_NAMES`), and unique over inputs and nodes;
- params that match their op's declared schema exactly (no unknown or missing key, each value
  of its type and inside its range or choices);
- node dtypes and shapes equal to what `divfuzz.generators.node_typing` gives for its op, params, inputs
  and the spec's autocast (a linear under autocast gives the autocast dtype);
- input layouts that fit their shapes (`divfuzz.generators.layouts.layout_problem`);
- tensors of at most `MAX_TENSOR_ELEMENTS` elements, `MAX_TOTAL_ELEMENTS` in all, `MAX_DIMS` dims;
- at most `MAX_NODES` nodes, no chain of them deeper than `MAX_DEPTH`;
- nodes that all reach an output, and outputs that are distinct nodes;
- dynamic dims that every data input has (`GraphSpec.dynamic_dims`);
- in-place ops that run eagerly (`divfuzz.generators.aliasing.aliasing_problem`: copies in a
  backward graph, no write into overlapping memory or into the storage they read).
So code generation can print names as they are and params through `repr` or lookup tables.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from dataclasses import replace

from divfuzz.records.errors import InvalidGraphError, UnknownOpError
from divfuzz.records.numbers import checked_number
from divfuzz.generators.aliasing import aliasing_problem
from divfuzz.generators.layouts import layout_problem
from divfuzz.generators.node_typing import node_output
from divfuzz.generators.opdef import INFER_ERRORS, Meta
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import INIT_KINDS, RECIPE_KINDS, GraphSpec, reachable, short_repr
from divfuzz.records.dtypes import FLOAT_DTYPES

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_LENGTH = 64

# Comfortably above what the strategies draw (2**17 per data input, a linear of 4096 outputs
# on top) and what the corpus holds (2**20 for the gelu seeds), far below what exhausts memory.
MAX_TENSOR_ELEMENTS = 2**24
MAX_TOTAL_ELEMENTS = 2**26
MAX_DIMS = 8
# A graph's size in ops, set by what compiles within the case timeout (300 s by default): the
# costliest shape, two chains of alternating softmax and layer_norm with a backward, took on a
# 2-core CPU at load 3 (torch 2.13, `scripts/measure_op_cap.py`, 2026-12-02) 48.6 s at 16 nodes,
# 74.2 s at 64, 151.1 s at 128 and 323.1 s at 256: 256 spent the whole timeout compiling, and was
# filed as a "hang" (issue 56). 128 keeps half the timeout spare on a loaded box. The strategies
# draw at most 40 ops (`fuzz --max-ops`), 80 nodes with their cast guards, and the corpus holds 14.
MAX_NODES = 128
# The longest chain of nodes from an input to an output: above the 80 a drawn 40-op chain with its
# guards reaches (the time follows the node count, not the depth: a chain of 64 cost what 64 nodes do).
MAX_DEPTH = 96

# Graph values become locals of the generated `model()` and `make_inputs()`: a value named like
# a global those functions use, or like their fixed locals, would shadow it. These are the names
# repro.py and report.md bind at module level and the fixed locals of those two functions;
# tests/test_codegen_safety.py derives them from the rendered templates and checks they are all
# here (generators cannot import reports). The recipe functions copied in are added below.
REPRO_NAMES = frozenset(
    {
        # module level of repro.py and of report.md's code
        "torch", "F", "importlib", "os", "platform", "signal", "sys", "ordered_bits", "run", "compare", "type_changes",
        "main", "make_inputs", "model", "inputs", "eager", "compiled", "eager_out", "compiled_out", "cots", "mine", "theirs", "MUTATED_AT",
        "DEVICE", "DEVICE_TYPE", "REF_ON_CPU", "SEED", "BACKWARD", "BACKEND", "DYNAMIC", "MODE", "INDUCTOR_CONFIG",
        "TIMEOUT_S", "OUTPUTS", "INPUT_NAMES", "MUTATED", "MARKED", "COMPARED_COMPILE", "compile_settings",
        # repro.py's own judging: divfuzz's recorded verdict, the culprit's switch, what it measures itself
        "RECORDED", "SWITCH", "SUBSYSTEM", "THREADS", "OWN_FLOAT", "OWN_INT", "TAKEN_FLOAT", "TAKEN_INT", "judge", "recorded_measures", "summary",
        "json",
        # the fixed locals of model() and make_inputs(), where graph values live
        "D", "ref", "g", "device",
    }
)
# What `divfuzz.generators.runtime` binds in every generated script that carries it.
RUNTIME_NAMES = frozenset({"COTANGENT_SEED_OFFSET", "cotangents", "import_backend", "importlib", "key_compile_caches_by_cpu_isa",
                           "same_layout_copy"})
RESERVED_NAMES = (
    frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | REPRO_NAMES
    | frozenset(RECIPE_KINDS) | frozenset(INIT_KINDS) - {"data"} | RUNTIME_NAMES  # the recipes' function names
)


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a graph value, or None when it can."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        return "must be an ASCII identifier ([A-Za-z_][A-Za-z0-9_]*)"
    if len(name) > MAX_NAME_LENGTH:
        return f"is longer than {MAX_NAME_LENGTH} characters"
    if name in RESERVED_NAMES or (name.startswith("__") and name.endswith("__")):
        return "is a Python keyword or builtin, or a name the generated repro.py uses"
    return None


def _check_size(where: str, shape: tuple[int, ...]) -> int:
    if len(shape) > MAX_DIMS:
        raise InvalidGraphError(f"{where}: shape {short_repr(shape)} has more than {MAX_DIMS} dims")
    n = math.prod(shape)
    if n > MAX_TENSOR_ELEMENTS:
        raise InvalidGraphError(f"{where}: shape {short_repr(shape)} has {n} elements, over the cap of {MAX_TENSOR_ELEMENTS}")
    for d in shape:  # [2**70, 0] has 0 elements but no dim torch can allocate
        checked_number(d, f"{where}: a dim of shape {short_repr(shape)}", low=0, high=MAX_TENSOR_ELEMENTS, integer=True, error=InvalidGraphError)
    return n


def validate_spec(spec: GraphSpec, *, source: str = "spec") -> GraphSpec:
    """`spec` itself when it is a valid graph, else InvalidGraphError naming `source` and the node
    (a spec stored before the autocast fp32 typing comes back re-typed: see `_check_node`).

    Valid: safe unique names; floating inputs; every node's params inside its op's schema, its
    inputs defined before it and accepted by the op, its shape and dtype what the op infers (weights
    included); sizes under the caps; at least one output, each a distinct node; no dead nodes.
    """
    _check_graph_size(spec, source)
    metas: dict[str, Meta] = {}
    older: dict[str, Meta] = {}  # each value as the rule before the fp32 list typed it (see `_check_node`)
    total = 0
    for t in spec.inputs:
        _check_name(source, "input", t.name, metas)
        if t.dtype not in FLOAT_DTYPES:
            raise InvalidGraphError(f"{source}: input {t.name!r} has dtype {t.dtype!r}; graph inputs are floating ({', '.join(FLOAT_DTYPES)})")
        total += _check_size(f"{source}: input {t.name!r}", tuple(t.shape))
        problem = layout_problem(t.layout, tuple(t.shape))
        if problem:
            raise InvalidGraphError(f"{source}: input {t.name!r}: layout {short_repr(t.layout, 40)} {problem} (shape {tuple(t.shape)})")
        metas[t.name] = older[t.name] = Meta(tuple(t.shape), t.dtype)
    for n in spec.nodes:
        _check_name(source, "node", n.name, metas)
        meta = _check_node(spec, n, metas, older, f"{source}: node {n.name!r} ({n.op})")
        total += _check_size(f"{source}: node {n.name!r} ({n.op})", meta.shape)
        metas[n.name] = meta
    if total > MAX_TOTAL_ELEMENTS:
        raise InvalidGraphError(f"{source}: {total} elements over all inputs and nodes, over the cap of {MAX_TOTAL_ELEMENTS}")
    _check_outputs(spec, metas, source)
    problem = aliasing_problem(spec) or _dynamic_problem(spec)
    if problem:
        raise InvalidGraphError(f"{source}: {problem}")
    if any(n.dtype != metas[n.name].dtype for n in spec.nodes):
        return replace(spec, nodes=tuple(replace(n, dtype=metas[n.name].dtype) for n in spec.nodes))
    return spec


def _check_graph_size(spec: GraphSpec, source: str) -> None:
    """Refuse more than `MAX_NODES` nodes, or a chain deeper than `MAX_DEPTH`, before anything else
    is checked (an input named later is not yet known: it counts as depth 0 here, and is refused
    by `_check_node` after)."""
    if len(spec.nodes) > MAX_NODES:
        raise InvalidGraphError(f"{source}: field 'nodes' holds {len(spec.nodes)} nodes, over the cap of {MAX_NODES}")
    depth: dict[str, int] = {}
    for n in spec.nodes:
        depth[n.name] = 1 + max((depth.get(i, 0) for i in n.inputs), default=0)
        if depth[n.name] > MAX_DEPTH:
            raise InvalidGraphError(f"{source}: field 'nodes': node {short_repr(n.name, 80)} ends a chain of "
                                    f"{depth[n.name]} nodes, deeper than the cap of {MAX_DEPTH}")


def _check_name(source: str, kind: str, name: str, defined: dict[str, Meta]) -> None:
    problem = name_problem(name)
    if problem:
        raise InvalidGraphError(f"{source}: {kind} name {short_repr(name, 80)} {problem}")
    if name in defined:
        raise InvalidGraphError(f"{source}: {kind} name {name!r} is used twice")


def _check_node(spec: GraphSpec, n, metas: dict[str, Meta], older: dict[str, Meta], where: str) -> Meta:
    """The node's output meta, once its params, inputs, weights, shape and dtype all check out.

    Before the typing rule knew torch's autocast fp32 list and weight promotion, a stored autocast
    spec typed a loss or a hand-written norm after a linear (and what it feeds) by its op's
    `infer`. A node whose dtype is what that rule gave (`older` holds each value as it did) is
    read with the dtype torch gives: such stores still load, re-typed."""
    try:
        op = get_op(n.op)
    except UnknownOpError as e:  # named by its file and node, as every other refusal of a node is
        raise UnknownOpError(f"{where.removesuffix(f' ({n.op})')}: {e}") from None  # the op is in the message
    problems = op.param_problems(n.kwargs)
    if problems:
        raise InvalidGraphError(f"{where}: " + "; ".join(problems))
    missing = [i for i in n.inputs if i not in metas]
    if missing:
        raise InvalidGraphError(f"{where}: inputs {short_repr(missing)} are not defined before it")
    data_names = n.inputs[: op.arity]
    data = tuple(metas[i] for i in data_names)
    if len(data) != op.arity or not op.accepts(data):
        raise InvalidGraphError(f"{where}: does not accept inputs {[(m.shape, m.dtype) for m in data]}")
    held = n.inputs[op.arity :]
    try:
        expected = node_output(op, data, n.kwargs, spec.autocast, tuple(metas[name].dtype for name in held))
        weights = op.weights(data, n.kwargs)
    except INFER_ERRORS as e:
        raise InvalidGraphError(f"{where}: bad params {short_repr(n.kwargs)} ({e})") from None
    if len(n.inputs) != op.arity + len(weights):
        raise InvalidGraphError(
            f"{where}: expected {op.arity} data inputs and {len(weights)} weights, got {len(n.inputs)} inputs"
        )
    for w, name in zip(weights, held):
        if metas[name].shape != w.shape:
            raise InvalidGraphError(f"{where}: weight {name!r} has shape {metas[name].shape}, expected {w.shape}")
    if tuple(n.shape) != expected.shape:
        raise InvalidGraphError(f"{where}: shape {short_repr(tuple(n.shape))} but its inputs give {expected.shape}")
    before_fix = expected.dtype
    if spec.autocast:
        try:
            before_fix = node_output(op, tuple(older[i] for i in data_names), n.kwargs, spec.autocast, as_before_fp32=True).dtype
        except INFER_ERRORS:
            pass
    older[n.name] = Meta(expected.shape, before_fix)
    if n.dtype not in (expected.dtype, before_fix):
        raise InvalidGraphError(f"{where}: dtype {n.dtype!r} but its inputs give {expected.dtype!r}")
    return expected


def _check_outputs(spec: GraphSpec, metas: dict[str, Meta], source: str) -> None:
    """At least one output, each a distinct node, and every node reaches one (no dead code)."""
    if not spec.outputs:
        raise InvalidGraphError(f"{source}: a graph needs at least one output")
    nodes = {n.name: n for n in spec.nodes}
    for o in spec.outputs:
        if o not in nodes:
            what = "is a graph input, not a node" if o in metas else "is not a node"
            raise InvalidGraphError(f"{source}: output {short_repr(o, 80)} {what}")
    if len(set(spec.outputs)) != len(spec.outputs):
        raise InvalidGraphError(f"{source}: outputs {short_repr(list(spec.outputs))} name a node twice")
    live = reachable(spec.outputs, spec.nodes)
    dangling = [n.name for n in spec.nodes if n.name not in live]
    if dangling:
        raise InvalidGraphError(f"{source}: nodes {short_repr(dangling)} reach no output (dead code is not a case)")


def _dynamic_problem(spec: GraphSpec) -> str | None:
    """Why the spec's dynamic dims cannot be marked, or None: "marked" names at least one dim, each
    a dim of every data input; "" and "all" name none."""
    if spec.dynamic != "marked":
        return "field 'dynamic_dims' must be empty unless dynamic is 'marked'" if spec.dynamic_dims else None
    if not spec.dynamic_dims or len(set(spec.dynamic_dims)) != len(spec.dynamic_dims):
        return "dynamic 'marked' needs distinct dims in field 'dynamic_dims'"
    weights = {i for n in spec.nodes for i in n.inputs[get_op(n.op).arity:]}
    ranks = [len(t.shape) for t in spec.inputs if t.name not in weights]
    if any(d >= min(ranks, default=0) for d in spec.dynamic_dims):
        return f"dynamic_dims {list(spec.dynamic_dims)} outside the data inputs' {min(ranks, default=0)} dims"
    return None


def load_spec(text: str, *, source: str = "spec") -> GraphSpec:
    """Parse and validate a spec from JSON text: the one safe way to read a spec file."""
    return validate_spec(GraphSpec.from_json(text, source=source), source=source)
