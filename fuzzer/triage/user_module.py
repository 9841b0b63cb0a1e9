"""`divfuzz minimize --module file.py:NAME`: a user's own model, captured, judged, reduced, attributed.

`NAME()` returns `(model_or_function, example_inputs)`. Loading the file runs the user's own code
(that is what they asked for); spec files are never executed. Everything here runs inside a
worker process (`Worker.call` -> `minimize_module_in_worker`), so a compiler crash ends the
worker, not the CLI.

Steps: `module_capture` judges the whole model (eager vs compiled vs fp64), captures the graphs
Dynamo hands the compiler and lowers each one that introduces the divergence to aten with `make_fx`
(autocast becomes explicit casts); then, for each, walk the stage
ladder eager -> aot_eager -> aot_eager_decomp_partition -> inductor and, for every rung whose output
differs from the rung before it (a separate root cause each), reduce the graph with torch's
`fx_minifier` using "this rung still differs from the one before" as the predicate, alternated
with `fx_bypass` (which removes nodes from the middle of a chain) under the time budget, and name the
culprit with `compiler_bisector`. Each root cause gets a folder with `repro.py`, the inputs as raw
bytes (`inputs.bin`) described by `inputs.json` (dtype and shape: no pickle, nothing to execute),
and `culprit.json`. `--budget` is a deadline for all of it (`divfuzz.fuzzer.triage.phase_clock`): each
phase checks it before a step, and what it cuts is said, never silently dropped.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from divfuzz.oracles.cast_elision import dropped_cast_elements
from divfuzz.oracles.named_elements import nearest_alternative, rule_elements, same_values
from divfuzz.generators.build import LAST_DIM_ORDERS
from divfuzz.oracles.mechanisms import CONDITIONED_SUSPECT_RULES, EXPLAINABLE_RULES
from divfuzz.fuzzer.finding.judgement import judge, worth_reducing
from divfuzz.oracles.severity_policy import explaining_mechanism, verdict_lines_of
from divfuzz.reports.issue_folder import ISSUE_MARKDOWN, ISSUE_SCRIPT, known_lines
from divfuzz.reports.issue_markdown import render_issue_markdown
from divfuzz.reports.module_issue import module_subject, render_module_issue_script
from divfuzz.reports.module_repro import RUNGS, render_module_repro
from divfuzz.fuzzer.engine.compile import compiled
from divfuzz.fuzzer.engine.environment import environment_versions
from divfuzz.fuzzer.triage.attribute import bisect_result_of
from divfuzz.fuzzer.triage.arises import where_it_arises
from divfuzz.fuzzer.triage.capture import capture_user_case, lower_to_aten, write_capture
from divfuzz.fuzzer.triage.fx_bypass import bypass_reduce, count_ops
from divfuzz.fuzzer.triage.fx_reorder import order_free_nodes, run_reordered
from divfuzz.fuzzer.triage.phase_clock import PhaseClock
from divfuzz.oracles.boundary import distance_to_grid_ulps, selection_distance_ulps, undefined_cast
from divfuzz.oracles.conditioning import perturb_inputs
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.signed_zero_selection import detail as selection_detail, is_selector, selected_zeros
from divfuzz.records.backends import INDUCTOR
from divfuzz.records.config import CompileConfig
from divfuzz.records.reference_rules import (BINARY, COMPARE, EXPLICIT_CAST_METHODS, MUL_DIV, round_scalar,
                                             rounds_before_comparison, scalar_dtype)
from divfuzz.records.culprit import Culprit, NOT_ATTRIBUTED, summarize
from divfuzz.records.deadline import Deadline, StopReason
from divfuzz.records.errors import ConfigError, TimeUp
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Explanation
from divfuzz.fuzzer.triage.module_ref import parse_module_ref



def load_user_module(ref: str):
    """`path/to/file.py:NAME` -> NAME() (the user's own code runs here, by their request)."""
    file, name = parse_module_ref(ref)
    path = str(file)
    spec = importlib.util.spec_from_file_location(f"divfuzz_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise ConfigError(f"--module {ref!r}: {path} has no {name}")
    return getattr(module, name)()


def _flat(out):
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _rung_config(rung: str):
    """A ladder rung as a compile config (`dynamic=None`: torch.compile's own default)."""
    return CompileConfig(backend=rung, dynamic=None)


def _run(gm, inputs, rung: str, decompositions: tuple[str, ...] = ()):
    """`gm`'s flat outputs at `rung`, compiled afresh with `decompositions` removed."""

    with torch.no_grad():
        if rung == "eager":
            return _flat(gm(*inputs))
        with compiled(gm, _rung_config(rung), decompositions=decompositions) as fn:
            return _flat(fn(*inputs))


def _to_float64(value):
    """A dtype argument or a floating tensor in float64; anything else unchanged."""
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_float64(v) for v in value)
    return value


# Aten ops that take a Python scalar beside a tensor, by how eager treats the scalar
# (`divfuzz.records.reference_rules`): comparisons, other binary ops, mul and div.
_SCALAR_KINDS = {
    **{name: COMPARE for name in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{name: BINARY for name in ("add", "sub", "rsub", "remainder", "fmod", "maximum", "minimum")},
    **{name: MUL_DIV for name in ("mul", "div")},
}
_CASTS = frozenset({"_to_copy", "to", "convert_element_type", "_convert_element_type"})


def explicit_casts(gm) -> frozenset[str]:
    """The names of the cast nodes of a lowered graph that the user's code wrote (`x.half()`,
    `x.to(torch.bfloat16)`): their Dynamo node (`source_fn_stack`, kept by `lower_to_aten`) is a
    cast method; autocast's casts come from the op they feed. Empty when the graph kept no such
    record (the make_fx fallback): every cast is then taken for autocast's."""
    names = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or _op_name(node) not in _CASTS:
            continue
        stack = node.meta.get("source_fn_stack") or ()
        target = stack[-1][1] if stack else None
        if (isinstance(target, str) and target in EXPLICIT_CAST_METHODS) or target is torch.Tensor.to:
            names.add(node.name)
    return frozenset(names)


def _round_through(x, dtype):
    """An explicit cast in the fp64 reference: rounded to the model's dtype, then back to float64."""
    return x.to(dtype).to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _cast_dtype(node):
    for value in (*node.args[1:], *node.kwargs.values()):
        if isinstance(value, torch.dtype):
            return value
    return None


def _real_dtypes(gm, inputs) -> dict:
    """The dtype of each node's value in the real graph, from one run of it (no grad)."""
    dtypes: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if isinstance(value, torch.Tensor):
                dtypes[n.name] = value.dtype
            return value

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return dtypes


def reference_graph(gm, *, inputs=None, device_type: str = "cpu", keep_casts: bool = True):
    """The fp64 reference of a captured aten graph, by the one reference semantics
    (`divfuzz.records.reference_rules`), as `divfuzz.generators.build.build_reference` builds it for
    specs: every floating dtype argument and constant mapped to float64 and autocast's casts
    dropped, but the user's own casts kept (`explicit_casts`: rounded to their dtype and back)
    and, given the graph's `inputs`, a Python scalar rounded to the dtype eager computes it in with
    its tensor on `device_type` (`divfuzz.records.reference_rules.scalar_dtype`). `keep_casts=False` drops the user's
    casts' rounding too: what the model computes without them (`divfuzz.oracles.cast_elision`)."""
    keep = explicit_casts(gm) if keep_casts else frozenset()
    dtypes = _real_dtypes(gm, inputs) if inputs is not None else {}
    ref = copy.deepcopy(gm)
    for node in list(ref.graph.nodes):
        if node.op == "call_function":
            kind = _SCALAR_KINDS.get(_op_name(node))
            tensor = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            low = dtypes.get(tensor.name) if tensor is not None else None
            target = scalar_dtype(kind, str(low).removeprefix("torch."), device_type) if kind and low is not None else None
            if target is not None:
                node.args = tuple(round_scalar(a, target) if isinstance(a, float) else a for a in node.args)
            if keep_casts and _op_name(node) in _COMPARISONS:
                node.args = tuple(_rounded_operand(ref, node, a, dtypes) for a in node.args)
            cast_to = _cast_dtype(node) if node.name in keep else None
            node.args = _to_float64(node.args)
            node.kwargs = {k: _to_float64(v) for k, v in node.kwargs.items()}
            if cast_to is not None and cast_to.is_floating_point and cast_to != torch.float64:
                with ref.graph.inserting_after(node):
                    rounded = ref.graph.call_function(_round_through, (node, cast_to))
                node.replace_all_uses_with(rounded, delete_user_cb=lambda user: user is not rounded)
        elif node.op == "get_attr":
            value = getattr(ref, node.target, None)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                setattr(ref, node.target, torch.nn.Parameter(value.detach().double(), requires_grad=False) if isinstance(value, torch.nn.Parameter) else value.detach().double())
    ref.recompile()
    return ref


_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _rounded_operand(ref, node, arg, dtypes: dict):
    """A comparison's operand in the reference: rounded to its bfloat16/float16 dtype first, as
    eager holds the values it compares (`divfuzz.records.reference_rules.rounds_before_comparison`)."""
    low = dtypes.get(arg.name) if isinstance(arg, torch.fx.Node) else None
    if low is None or not rounds_before_comparison(str(low).removeprefix("torch.")):
        return arg
    with ref.graph.inserting_before(node):
        return ref.graph.call_function(_round_through, (arg, low))


def _reference_outputs(gm, inputs, *, keep_casts: bool = True):
    """The fp64 outputs of `gm` on `inputs` (floating inputs widened), or None if it cannot run;
    scalars are rounded as eager rounds them on the inputs' device."""
    device_type = next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")
    try:
        with torch.no_grad():
            return _flat(reference_graph(gm, inputs=inputs, device_type=device_type, keep_casts=keep_casts)(
                *[_to_float64(x) for x in inputs]))
    except Exception:  # an op without a float64 kernel: judged with no reference (divfuzz.oracles.judge)
        return None


_ROUNDING = {"floor": 0.0, "ceil": 0.0, "trunc": 0.0, "round": 0.5}
_PASS_THROUGH = {"clamp", "clamp_min", "clamp_max", "add", "sub", "neg", "_to_copy", "convert_element_type"}


def _op_name(node) -> str:
    target = getattr(node.target, "__name__", str(node.target))
    return target.split(".")[0]


def _int_boundaries(gm, inputs) -> dict:
    """For each integer output made by casting a float: its pre-image distance from a rounding
    boundary (NaN where the cast is undefined), from eager's own intermediate values.

    The pre-image is the input of the rounding op (floor/ceil/trunc/round) found by walking back
    through clamps, shifts and casts; without one, the cast itself truncates its float input.
    """

    values: dict = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n] = result
            return result

    try:
        with torch.no_grad():
            Keep(gm).run(*inputs)
    except Exception:
        return {}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")

    leaves = [n for n in pytree.tree_leaves(out_node.args[0]) if isinstance(n, torch.fx.Node)]
    maps = {}
    for i, node in enumerate(leaves):
        value = values.get(node)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            rounded = _rounding_distance(node, values)
            if rounded is not None and rounded.shape == value.shape:
                maps[i] = rounded
            continue
        if not isinstance(value, torch.Tensor) or value.dtype == torch.bool:
            continue
        selected = _selection_distance(node, values)
        if selected is not None:
            if selected.shape == value.shape:
                maps[i] = selected
            continue
        cast_in, cur = None, node
        pre, offset = None, 0.0
        while isinstance(cur, torch.fx.Node) and cur.op == "call_function" and _op_name(cur) in _PASS_THROUGH | set(_ROUNDING):
            src = cur.args[0] if cur.args else None
            if not isinstance(src, torch.fx.Node):
                break
            src_value = values.get(src)
            if cast_in is None and isinstance(src_value, torch.Tensor) and src_value.is_floating_point():
                cast_in = src_value
            if _op_name(cur) in _ROUNDING:
                pre, offset = src_value, _ROUNDING[_op_name(cur)]
                break
            cur = src
        if cast_in is None:
            continue
        if pre is None:
            pre = cast_in
        if pre.shape != value.shape:
            continue
        dist = distance_to_grid_ulps(pre, offset=offset)
        maps[i] = torch.where(undefined_cast(cast_in, value.dtype), torch.full_like(dist, float("nan")), dist)
    return maps


# Arg-reductions by name: which end they select. `max`/`min` with a dim give (values, indices).
_ARG_REDUCTIONS = {"argmax": True, "argmin": False}
_VALUE_AND_INDEX = {"max": True, "min": False}


def _rounding_distance(node, values: dict):
    """For a float output made by a rounding op (floor, ceil, trunc, round to an integer) of a
    value the graph computed: each element's distance from where it jumps, from eager's own input
    to the op (the campaign's rounding ops declare the same pre-image); else None."""
    if node.op not in ("call_function", "call_method") or _op_name(node) not in _ROUNDING or not node.args:
        return None
    if node.kwargs.get("decimals") or len(node.args) > 1:
        return None
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.op == "placeholder":
        return None  # a graph input is the same exact data on both sides: no upstream rounding to blame
    pre = values.get(source)
    if not isinstance(pre, torch.Tensor) or not pre.is_floating_point():
        return None
    return distance_to_grid_ulps(pre, offset=_ROUNDING[_op_name(node)])


def _selection_distance(node, values: dict):
    """For an index output of an arg-reduction (argmax/argmin, or the indices of max/min along a
    dim): each index's distance from a tie among the candidates, from eager's own input
    (`divfuzz.oracles.boundary.selection_distance_ulps`); else None. A changed index where the
    winner stood clear selects another value: the same rule as the campaign's arg-reductions."""
    largest = None
    if node.op == "call_function" and _op_name(node) == "getitem" and len(node.args) == 2 and node.args[1] == 1:
        src = node.args[0]
        if isinstance(src, torch.fx.Node) and src.op in ("call_function", "call_method") and _op_name(src) in _VALUE_AND_INDEX:
            node, largest = src, _VALUE_AND_INDEX[_op_name(src)]
    elif node.op in ("call_function", "call_method") and _op_name(node) in _ARG_REDUCTIONS:
        largest = _ARG_REDUCTIONS[_op_name(node)]
    if largest is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    x = values.get(node.args[0])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or not (dim is None or isinstance(dim, int)) \
            or not isinstance(keepdim, bool) or x.dim() == 0:
        return None
    return selection_distance_ulps(x, dim, largest=largest, keepdim=keepdim)


def _verdict(gm, inputs, a, b, ref=None, bounds=None):
    """Outputs `a` (the rung before) vs `b` (the rung under test), each against the fp64 reference
    of the same graph, judged by the one output judge (`divfuzz.oracles.judge`, conditioning included): a
    `Verdict` that `divfuzz.oracles.severity_policy.severity_of` judges like any other. Without an fp64 run of the
    graph (an op with no float64 kernel), outputs are judged with no reference, never against eager."""
    ref = _reference_outputs(gm, inputs) if ref is None else ref
    bounds = _int_boundaries(gm, inputs) if bounds is None else bounds

    def named(values):
        return [(f"output {i}", t) for i, t in enumerate(values)] if values is not None else None

    def perturbed(draw: int):
        return named(_reference_outputs(gm, perturb_inputs(list(inputs), draw))) or []

    outputs = judge_outputs(named(a), named(b), named(ref), {f"output {i}": d for i, d in bounds.items()},
                            perturbed_reference=perturbed if ref is not None else None, inputs=list(inputs))
    verdict = _with_reduction_order(verdict_of(outputs), gm, inputs, named(a), named(b), named(ref), bounds)
    if verdict.explanation is None:
        verdict = _with_subnormal_flush(verdict, gm, inputs, named(a), named(b))
    return verdict if verdict.explanation is not None else _with_signed_zero_selection(verdict, gm, inputs, named(a), named(b))


def _with_signed_zero_selection(verdict, gm, inputs, a, b):
    """`verdict` with the `signed-zero-selection` explanation when its finding is a zero of the other
    sign (`zero-sign-wrong`) at an output that a value-selecting aten op makes directly, and every
    such zero is one where that op's operands (eager's values on `gm`) offer a zero of each sign
    (`divfuzz.oracles.signed_zero_selection`), as the campaign's experiment finds it; else `verdict`."""
    reason = judge(verdict).reason
    if reason is None or reason.rule != "zero-sign-wrong" or not reason.output.startswith("output ") or a is None or b is None:
        return verdict
    i = int(reason.output.removeprefix("output "))
    returned = pytree.tree_leaves(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    if i >= min(len(a), len(b), len(returned)) or not isinstance(returned[i], torch.fx.Node) \
            or returned[i].op != "call_function" or not is_selector(_op_name(returned[i])):
        return verdict
    node = returned[i]
    try:
        values = _values_of(gm, inputs)
    except Exception:  # a graph the interpreter cannot run: no explanation
        return verdict
    operands = [values.get(x.name) for x in node.args if isinstance(x, torch.fx.Node)]
    before, got = a[i][1], b[i][1]
    if got.shape != before.shape:
        return verdict
    n_named, n_at = selected_zeros(_op_name(node), operands, before, got)
    if n_named == 0 or n_at < n_named:
        return verdict
    return replace(verdict, explanation=Explanation(
        "signed-zero-selection", reason.output, selection_detail(n_named, reason.output, _op_name(node)),
        (("zero_sign_wrong", float(n_named)), ("offered_both", float(n_at))), _device_type(inputs)))


def _with_reduction_order(verdict, gm, inputs, a, b, ref, bounds):
    """`verdict` with the `reduction-order` explanation when it is a bug candidate, the graph holds
    an order-free op (`divfuzz.fuzzer.triage.fx_reorder`), and the graph run eagerly with those ops
    in other orders gives, element by element nearest `b`'s (the rung under test), values that
    leave no bug: `b`'s answer is one eager's kernels give in another order. Else `verdict`."""
    reason = judge(verdict).reason
    if reason is None or reason.severity is not Severity.BUG or reason.rule not in EXPLAINABLE_RULES \
            or not order_free_nodes(gm):
        return verdict
    try:
        orders = [[(f"output {i}", t) for i, t in enumerate(_flat(run_reordered(gm, list(inputs), order)))]
                  for order in LAST_DIM_ORDERS]
    except Exception:  # an op the rewrite does not fit (a shape it did not expect): no explanation
        return verdict
    mixed, moved = nearest_alternative(a, orders, b)
    if moved == 0:
        return verdict
    again = judge(verdict_of(judge_outputs(mixed, b, ref, {f"output {i}": d for i, d in bounds.items()}))).reason
    if again is not None and again.severity is Severity.BUG:
        return verdict
    now = "the rungs then agree" if again is None else f"what is left is {again.severity.value} ({again.rule})"
    ops = ", ".join(dict.fromkeys(str(n.target).removeprefix("aten.") for n in order_free_nodes(gm)))
    return replace(verdict, explanation=Explanation(
        "reduction-order", reason.output,
        f"{reason.output} depends on {ops}; run eagerly with their reduced dims in other orders "
        f"({', '.join(LAST_DIM_ORDERS)}), the graph gives the compiled values on {moved} elements, and {now}",
        (("elements", float(moved)), ("orders", float(len(LAST_DIM_ORDERS))))))


# Below this magnitude a float32 value is subnormal; bfloat16 shares float32's exponent range,
# and float16 is computed in float32 (opmath), where its subnormals are normal.
_SUBNORMAL_BELOW = torch.finfo(torch.float32).tiny


def _flushed(value):
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.bfloat16):
        return torch.where((value != 0) & (value.abs() < _SUBNORMAL_BELOW), value * 0, value)
    return value


def _with_subnormal_flush(verdict, gm, inputs, a, b):
    """`verdict` with the `subnormal-flush` explanation when it is a bug candidate and `gm` run eagerly with every float32/bfloat16
    subnormal (each input and each op's result) flushed to signed zero gives `b`'s values (the rung
    under test) on every one of the bug's elements (`rule_elements` of `a`, the rung before, and
    `b`: a wrong value beside a flush stays a bug), as the campaign's experiment finds it (`divfuzz.fuzzer.engine.explain`): compiled CUDA
    kernels flush by default (PR 185878). The severity is the table's: a flushed float value is
    the default, an integer or NaN/Inf it decides stays suspect. Else `verdict`."""
    reason = judge(verdict).reason
    if reason is None or reason.severity is not Severity.BUG or reason.rule not in EXPLAINABLE_RULES \
            or not reason.output.startswith("output ") or a is None or b is None:
        return verdict

    class Flushing(torch.fx.Interpreter):
        def run_node(self, n):
            return pytree.tree_map(_flushed, super().run_node(n))

    i = int(reason.output.removeprefix("output "))
    if i >= min(len(a), len(b)):
        return verdict
    try:
        with torch.no_grad():
            flushed = _flat(Flushing(gm).run(*[_flushed(x) for x in inputs]))
    except Exception:  # a graph the interpreter cannot run: no explanation
        return verdict
    before, got = a[i][1], b[i][1]
    if i >= len(flushed) or not isinstance(flushed[i], torch.Tensor) or flushed[i].shape != got.shape:
        return verdict
    named = rule_elements(reason.rule, before, got.to(before.device))
    again = flushed[i].to(before.device)
    matches = same_values(again, got.to(before.device)) if got.is_floating_point() else again == got.to(before.device)
    n_named, n_flushed = int(named.sum()), int((named & matches).sum())
    if n_named == 0 or n_flushed < n_named:
        return verdict
    return replace(verdict, explanation=Explanation(
        "subnormal-flush", reason.output,
        f"all {n_named} differing elements of {reason.output} equal what the graph computes eagerly with "
        "every float32 subnormal flushed to zero: the compiled kernels flush subnormals, CUDA's default",
        (("differing", float(n_named)), ("flushed", float(n_flushed))), _device_type(inputs)))


def _with_dropped_cast(verdict, gm, inputs, a, b, kept):
    """`verdict` with the `explicit-cast-elided` explanation when the graph holds a user's cast to
    a lower precision and the bug's elements of `b` (the rung under test) equal what the graph
    computes without those casts' rounding (`divfuzz.oracles.cast_elision`); else `verdict`.
    `kept` is the fp64 reference the verdict was judged against (the casts' rounding kept)."""
    reason = judge(verdict).reason
    candidate = reason is not None and ((reason.severity is Severity.BUG and reason.rule in EXPLAINABLE_RULES)
                                        or reason.rule in CONDITIONED_SUSPECT_RULES)
    if not candidate or not reason.output.startswith("output ") or not explicit_casts(gm):
        return verdict
    i = int(reason.output.removeprefix("output "))
    loose = _reference_outputs(gm, inputs, keep_casts=False)
    if kept is None or loose is None or i >= min(len(a), len(b), len(kept), len(loose)):
        return verdict
    n_named, n_close = dropped_cast_elements(reason.rule, a[i], b[i], kept[i], loose[i])
    if n_named == 0 or n_close < 0.5 * n_named:
        return verdict
    return replace(verdict, explanation=Explanation(
        "explicit-cast-elided", reason.output,
        f"{n_close} of the {n_named} differing elements of {reason.output} equal what the graph computes without the "
        "rounding of the model's own casts: the rung under test dropped it", (("differing", float(n_named)), ("without_casts", float(n_close))),
        _device_type(inputs)))


# Aten ops whose result is a discrete decision of their floating inputs: comparisons (their
# boolean selects, counts or masks downstream) and roundings to an integer.
_DECIDING = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "floor", "ceil", "round", "trunc", "sign", "signbit",
                       "isinf", "isnan", "isfinite"})
_NARROW = (torch.bfloat16, torch.float16)


def _values_of(gm, inputs) -> dict:
    """Every node's value in one run of `gm` on `inputs` (no grad), by node name."""
    values: dict = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            values[n.name] = value
            return value

    with torch.no_grad():
        Keep(gm).run(*inputs)
    return values


def _deciding_nodes(gm, inputs) -> list:
    """The nodes of `gm` that decide (`_DECIDING`) on a value eager computes in bfloat16/float16,
    or on one downstream of the model's explicit cast to them: where eager rounds what is decided
    on, and a fused kernel may not. A decision on a graph input sees the same data on both sides."""
    dtypes = _real_dtypes(gm, inputs)
    casts = explicit_casts(gm)
    narrowed: set = set()  # nodes downstream of an explicit narrowing cast
    for node in gm.graph.nodes:
        inputs_of = [a for a in node.all_input_nodes]
        if node.name in casts and dtypes.get(node.name) in _NARROW or any(a.name in narrowed for a in inputs_of):
            narrowed.add(node.name)
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or _op_name(node) not in _DECIDING or not node.args:
            continue
        operands = [a for a in node.all_input_nodes if a.op != "placeholder"]
        if any(dtypes.get(a.name) in _NARROW or a.name in narrowed for a in operands):
            found.append(node)
    return found


def _with_rounding_decides(verdict, gm, inputs, a, b):
    """`verdict` with the `rounding-decides` explanation when it is a bug candidate (or a
    sensitive suspect) and its differing elements depend on decisions (`_deciding_nodes`) that go
    the other way once eager's low-precision values are replaced by the unrounded ones (the fp64
    reference without the model's casts' rounding): the rung under test decided before the
    rounding eager made. `a` is the rung before (eager's side), `b` the rung under test."""
    reason = judge(verdict).reason
    candidate = reason is not None and ((reason.severity is Severity.BUG and reason.rule in EXPLAINABLE_RULES)
                                        or reason.rule in CONDITIONED_SUSPECT_RULES)
    if not candidate or not reason.output.startswith("output "):
        return verdict
    try:
        deciders = _deciding_nodes(gm, inputs)
        if not deciders:
            return verdict
        eager_values = _values_of(gm, inputs)
        loose_gm = reference_graph(gm, inputs=inputs, device_type=_device_type(inputs), keep_casts=False)
        wide = [_to_float64(x) for x in inputs]
        loose_values = _values_of(loose_gm, wide)
        flipped = {}
        for node in deciders:
            rounded, exact = eager_values.get(node.name), loose_values.get(node.name)
            if not isinstance(rounded, torch.Tensor) or not isinstance(exact, torch.Tensor) or rounded.shape != exact.shape:
                continue
            moved = rounded.to(exact.device).to(exact.dtype) != exact
            if bool(moved.any()):
                flipped[node.name] = moved
        if not flipped:
            return verdict
        plain = _flat(loose_gm(*wide))

        class Perturb(torch.fx.Interpreter):
            def run_node(self, n):
                value = super().run_node(n)
                mask = flipped.get(n.name)
                if mask is None or not isinstance(value, torch.Tensor):
                    return value
                if value.dtype == torch.bool:
                    return value ^ mask
                if not value.is_floating_point():
                    return value + mask.to(value.dtype)
                return torch.where(mask, torch.full_like(value, float("nan")), value)

        with torch.no_grad():
            perturbed = _flat(Perturb(loose_gm).run(*wide))
    except Exception:  # a graph the reference cannot run: no explanation
        return verdict
    i = int(reason.output.removeprefix("output "))
    if i >= min(len(a), len(b), len(plain), len(perturbed)):
        return verdict
    named = rule_elements(reason.rule, a[i], b[i].to(a[i].device)).to(plain[i].device)
    depends = ~same_values(perturbed[i], plain[i])
    n_named, n_dep = int(named.sum()), int((named & depends).sum())
    if n_named == 0 or n_dep < 0.5 * n_named:
        return verdict
    what = ", ".join(f"{n} ({int(m.sum())} flipped)" for n, m in list(flipped.items())[:3])
    return replace(verdict, explanation=Explanation(
        "rounding-decides", reason.output,
        f"{n_dep} of the {n_named} differing elements of {reason.output} depend on decisions that eager's low-precision "
        f"rounding takes the other way from the unrounded values ({what}): the rung under test decided before that rounding",
        (("differing", float(n_named)), ("depending", float(n_dep)), ("decisions", float(len(flipped)))),
        _device_type(inputs)))


def _device_type(inputs) -> str:
    return next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")


def _n_differ(a, b) -> int:
    """Elements that differ, NaN in both counting as equal (as `repro.py` counts them)."""
    diff = a != b
    if a.is_floating_point():
        diff &= ~(a.isnan() & b.isnan())
        diff |= (a == 0) & (b == 0) & (a.signbit() != b.signbit())
    return int(diff.sum())


def _bisect(gm, inputs, rung: str, ref, decompositions: tuple[str, ...] = (), deadline: Deadline = Deadline.never()):
    """Bisect the cause that appears at `rung`: earlier backends count as good. `ref` is the output
    of the rung before it (already computed by the caller); "bad" is what `divfuzz.oracles.severity_policy.worth_reducing` says.
    Returns the bisector's result as a `divfuzz.records.culprit.BisectResult`, or None. Each step compiles
    the (reduced) graph once; past `deadline` no step starts and `TimeUp` is raised from its `good`
    callback (the bisector has no time limit of its own; its cleanup runs as the exception leaves
    `do_bisect`)."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._inductor.compiler_bisector import CompilerBisector

    fp64, bounds = _reference_outputs(gm, inputs), _int_boundaries(gm, inputs)

    def good() -> bool:
        deadline.check("a compiler bisector step")
        backend = CompilerBisector.get_backend()
        if backend in RUNGS and RUNGS.index(backend) < RUNGS.index(rung):
            return True
        try:
            # The bisector picks the backend and the subsystems to disable inside torch.compile.
            with torch.no_grad(), compiled(gm, _rung_config(INDUCTOR), decompositions=decompositions) as fn:
                return not worth_reducing(_verdict(gm, inputs, ref, _flat(fn(*inputs)), fp64, bounds))
        except Exception:  # this configuration does not compile: it must not take the blame
            return False

    with contextlib.redirect_stdout(io.StringIO()):
        res = CompilerBisector.do_bisect(good)
    if res is None:
        return None
    return bisect_result_of(res)


def _culprit(rung: str, bisect):
    """The culprit of the cause that appears at `rung`, named by the bisector's fields when it
    gave a result; its summary comes from `divfuzz.records.culprit.summarize`, as a campaign's does."""
    bare = Culprit(stage=rung, summary="")
    return bare.with_bisect(bisect) if bisect is not None else replace(bare, summary=summarize(bare))




def _dense_layout(t) -> bool:
    """A layout `empty_strided` rebuilds from (shape, stride) alone: a permutation of dense strides."""
    return t.numel() == 0 or torch.empty_strided(t.shape, t.stride()).untyped_storage().nbytes() == t.numel() * 4


def _save_inputs(tensors, folder: Path) -> None:
    """Inputs as raw bytes (in logical order) plus a JSON description with each input's strides, so
    `repro.py`'s `load_inputs` rebuilds the captured layout (a channels-last input stays one)."""
    metas, blobs = [], []
    for t in tensors:
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        metas.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": len(raw),
                      "stride": list(t.stride()) if _dense_layout(t) else list(t.contiguous().stride())})
        blobs.append(raw)
    (folder / "inputs.bin").write_bytes(b"".join(blobs))
    (folder / "inputs.json").write_text(json.dumps(metas) + "\n")


class OutputMemo:
    """Each rung's outputs on a pinned graph, computed once per `--module` run.

    Judging a target graph, checking its ladder rungs, the reduction's target severity and
    fx_minifier's sanity check all run the same (big) graph at the same rungs; on a transformer's
    joint training graph each of those is a long Inductor compile. A graph is known by its code and
    the identity of its input tensors; the memo keeps pinned inputs alive, so no id is reused while
    it lives. Only pinned graphs are remembered: reduction candidates cost no memory."""

    def __init__(self):
        self._pinned: dict = {}
        self._outputs: dict = {}

    @staticmethod
    def _key(g, inps) -> tuple:
        return g.code, tuple(id(x) for x in inps)

    def pin(self, gm, inputs) -> None:
        self._pinned[self._key(gm, inputs)] = tuple(inputs)

    def run(self, g, inps, rung: str, removed: tuple[str, ...] = ()) -> list:
        key = self._key(g, inps)
        if key not in self._pinned:
            return _run(g, inps, rung, removed)
        full = (key, rung, () if rung == "eager" else tuple(removed))  # eager compiles nothing to remove
        if full not in self._outputs:
            self._outputs[full] = _run(g, inps, rung, removed)
        return self._outputs[full]


@dataclass(frozen=True, eq=False)
class RungDifference:
    """One root cause to reduce: `rung`'s outputs differ from `before`'s on the aten graph `gm` with
    `inputs`, while the `removed` decompositions (earlier causes, peeled) are away for every compile."""

    gm: Any
    inputs: tuple
    before: str
    rung: str
    removed: tuple[str, ...] = ()
    memo: OutputMemo | None = None

    def outputs(self, g, inps, rung: str) -> list:
        if self.memo is not None:
            return self.memo.run(g, inps, rung, self.removed)
        return _run(g, inps, rung, self.removed)

    def verdict(self, g, inps, before_outputs=None):
        """`before` vs `rung` on graph `g`, each judged against `g`'s fp64 reference
        (`before_outputs`: the `before` rung's outputs on `g`, when the caller already ran it)."""
        if before_outputs is None:
            before_outputs = self.outputs(g, inps, self.before)
        return _verdict(g, inps, before_outputs, self.outputs(g, inps, self.rung))


@dataclass(frozen=True)
class CauseFolders:
    """What every cause folder of one `--module` run shares: `out/NN-rung/` holds `repro.py`, the
    inputs as raw bytes and `culprit.json`; `ref` and `verdict_lines` head each repro's docstring;
    `clock` is the whole command's deadline and phase timer (`divfuzz.fuzzer.triage.phase_clock`)."""

    out: Path
    ref: str
    device: str
    verdict_lines: tuple[str, ...]
    clock: Any = None


@dataclass(frozen=True, eq=False)
class _Reduced:
    gm: Any
    inputs: tuple
    passes: tuple[str, ...]  # the reduction passes run, in order
    seconds: float = 0.0  # wall time of the reduction (bounded by its deadline, plus one query in flight)
    budget_s: float = 0.0  # the time it was given
    cut: str | None = None  # why the deadline stopped it before it converged (None: it converged)

    @property
    def stopped(self) -> StopReason:
        """Why the reduction stopped, in every phase's one vocabulary (`records.deadline.StopReason`)."""
        return StopReason.TIME_UP if self.cut else StopReason.FINISHED


# Of a graph's share of the budget, the reduction may use this fraction; the rest is kept for the
# compiler bisector and writing the folder (the bisector's steps compile the reduced graph, small).
REDUCE_SHARE = 0.75
# The bisector is not started unless the time left covers this many of its steps (each compiles
# the reduced graph; it takes a few backend steps plus a binary search over a subsystem's uses).
BISECT_MIN_STEPS = 5


def _reduce_and_name(diff: RungDifference, folders: CauseFolders, *, number: int, max_granularity, deadline: Deadline,
                     verdict=None) -> dict:
    """Shrink the graph to what still makes `diff.rung` differ from `diff.before`, write its folder,
    then name the culprit with the bisector (on the reduced graph) and write it again; returns the
    cause as `culprit.json` holds it. The reduction gets `REDUCE_SHARE` of the time to `deadline`,
    the bisector what is left; a run killed while bisecting still leaves the folder and repro."""
    clock = folders.clock
    reduce_by = deadline.share(REDUCE_SHARE * deadline.left())
    with clock.phase("reduce"):
        reduced = _shrink(diff, _keeps_severity(diff, verdict), max_granularity=max_granularity, deadline=reduce_by)
    if reduced.cut:
        clock.note_cut(reduced.cut)
    return _write_cause(diff, folders, number, reduced, deadline)


def _keeps_severity(diff: RungDifference, verdict=None):
    """The reduction predicate: a candidate graph still differs at the input's severity and rule.
    A bug must not shrink into noise, nor a gross float error into a different, fp32-only
    rounding difference. `verdict` is the input graph's own, when the caller has it.

    A rule is about one output, and integer and float outputs are judged by different rules
    (`_verdict`), so a candidate with no output of that kind cannot keep the rule: it is answered
    from the `before` rung's outputs alone, without compiling `diff.rung`. fx_minifier's truncations
    often cut a graph's integer encoding off (on seed 002's model: 20 of 57 queries, 42% of the
    reduction's time on a CPU)."""
    verdict = verdict if verdict is not None else diff.verdict(diff.gm, diff.inputs)
    target = judge(verdict).reason
    about = next((o for o in verdict.outputs if target is not None and o.name == target.output), None)
    wants_int = None if about is None else about.int_cmp is not None  # None: no output named, no shortcut

    def fails(g, inps) -> bool:
        try:
            before = diff.outputs(g, inps, diff.before)  # cheap beside compiling the rung
            if wants_int is not None and not any(t.is_floating_point() != wants_int for t in before):
                return False
            reason = judge(diff.verdict(g, inps, before)).reason
        except Exception:
            return False
        if reason is None or target is None:
            return False
        return reason.severity.at_least(target.severity) and reason.rule == target.rule

    return fails


def _shrink(diff: RungDifference, fails, *, max_granularity, deadline: Deadline) -> _Reduced:
    """fx_minifier cuts nodes into inputs; bypassing removes nodes from the middle of a chain.
    Alternate the two until neither shrinks the graph, or until `deadline`: past it the graph that
    failed last (the smallest so far) is the result and `cut` says so. With no time at all the
    graph is not reduced."""
    start, given = time.monotonic(), deadline.left()
    if deadline.expired():
        return _Reduced(diff.gm, diff.inputs, (), 0.0, 0.0,
                        cut=f"not reduced: budget spent before the reduction ({diff.before} vs {diff.rung}); the repro holds the whole graph")
    small, small_inputs, cut = bounded_minify(diff.gm, diff.inputs, fails, deadline, max_granularity)
    passes = ["fx_minifier"]
    while not cut and not deadline.expired():
        size = count_ops(small)
        small, small_inputs, _ = bypass_reduce(small, small_inputs, fails, deadline)
        if count_ops(small) == size:
            break
        passes.append("bypass")
        small, small_inputs, cut = bounded_minify(small, small_inputs, fails, deadline, max_granularity)
        passes.append("fx_minifier")
    why = None
    if cut or deadline.expired():
        why = (f"reduction cut by the budget ({diff.before} vs {diff.rung}): {count_ops(diff.gm)} -> {count_ops(small)} ops, "
               "the smallest graph that still differed")
    return _Reduced(small, tuple(small_inputs), tuple(passes), time.monotonic() - start, given, cut=why)


def bounded_minify(gm, inputs, fails, deadline: Deadline, max_granularity=None) -> tuple[Any, list, bool]:
    """torch's fx_minifier, stopped at `deadline`: it has no time limit of its own, and on a large
    joint graph its delta debugging compiles for many minutes. Past the deadline the predicate
    raises `TimeUp`, which ends the minifier at once, and the graph that failed last (the
    minifier's best so far) is the result. The first query, the minifier's sanity check of its
    input, is always answered, so there is always a failing graph. Returns (graph, inputs, cut)."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._functorch.fx_minifier import minifier

    last: list = [gm, list(inputs)]
    asked = [0]

    def bounded(g, inps) -> bool:
        if asked[0]:
            deadline.check("fx_minifier's next query")
        asked[0] += 1
        if fails(g, inps):
            last[:] = [g, list(inps)]
            return True
        return False

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            small, small_inputs = minifier(gm, list(inputs), bounded, dump_state=lambda g, i: None, max_granularity=max_granularity)
    except TimeUp:
        return last[0], last[1], True
    return small, list(small_inputs), False


def _write_cause(diff: RungDifference, folders: CauseFolders, number: int, reduced: _Reduced, deadline: Deadline) -> dict:
    """Write `NN-rung/` (repro.py, inputs, culprit.json) for the reduced graph, then bisect it until
    `deadline` and write the culprit into it. The bisector does not start past the deadline, nor
    when what is left covers fewer than `BISECT_MIN_STEPS` of its steps (each costs about what
    running the reduced graph at both rungs just took), and it stops between steps at the
    deadline; then the culprit says "culprit not attributed" with why."""

    clock = folders.clock
    small, small_inputs = reduced.gm, reduced.inputs
    t0 = time.monotonic()
    with clock.phase("repro"), torch.no_grad():
        before_out = diff.outputs(small, small_inputs, diff.before)
        after_out = diff.outputs(small, small_inputs, diff.rung)
    step_s = time.monotonic() - t0  # about what one bisector step costs: it compiles this graph too
    note = f"{NOT_ATTRIBUTED}: the compiler bisector is still running (or was killed at the deadline plus grace)"
    cause = _write_folder(diff, folders, number, reduced, before_out, after_out, None, note)
    bisect, note, t0 = None, None, time.monotonic()
    left = deadline.left()
    if left <= 0:
        note = f"{NOT_ATTRIBUTED}: budget spent after reduction"
    elif left < BISECT_MIN_STEPS * step_s:
        # A graph the reduction could not shrink in time is still big: the bisector would be cut
        # after a step or two, having named nothing. Its time is better left unspent.
        note = (f"{NOT_ATTRIBUTED}: budget spent after reduction ({left:.0f} s left; one bisector step "
                f"compiles this {count_ops(small)}-op graph in about {step_s:.0f} s)")
    else:
        with clock.phase("bisect"):
            try:
                bisect = _bisect(small, list(small_inputs), diff.rung, before_out, diff.removed, deadline=deadline)
            except TimeUp:
                note = f"{NOT_ATTRIBUTED}: budget spent while the compiler bisector ran"
    if note:
        clock.note_cut(f"{cause['folder']}: {note}")
    cause = _write_folder(diff, folders, number, reduced, before_out, after_out, bisect, note)
    cause["bisect_s"] = round(time.monotonic() - t0, 1)
    with clock.phase("check_repro"):
        cause["reproduced"], cause["not_reproduced_why"] = _check_reproduces(Path(cause["folder"]), diff, deadline)
    if not cause["reproduced"]:
        clock.note_cut(f"{cause['folder']}: not reproduced: {cause['not_reproduced_why']}")
    (Path(cause["folder"]) / "culprit.json").write_text(json.dumps(cause, indent=2) + "\n")
    return cause


# The reproduction check runs the written repro.py; it may take this long past the --module deadline
# (a fresh interpreter and two compiles of the reduced graph), inside the CLI's grace.
REPRO_CHECK_MIN_S = 60.0


def _check_reproduces(folder: Path, diff: RungDifference, deadline: Deadline) -> tuple[bool, str | None]:
    """Run the cause's `repro.py` in a fresh interpreter: a cause is filed only if it exits 1 (it
    still differs there). Otherwise says why it did not: a cut budget, a crash, or an exit 0 with
    the likely reason (decompositions the ladder removed, which the script does not remove;
    outputs that differ run to run)."""
    timeout = max(REPRO_CHECK_MIN_S, deadline.left())
    try:
        proc = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"repro.py did not finish in {timeout:.0f} s (a cut budget)"
    crashed = "Traceback (most recent call last)" in proc.stderr  # Python exits 1 on an uncaught exception too
    if proc.returncode == 1 and not crashed:
        return True, None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no message"])[-1][:300]
        return False, f"repro.py exited {proc.returncode}: {tail}"
    if diff.removed:
        return False, (f"repro.py exits 0: the ladder found it with {', '.join(diff.removed)} removed from the "
                       "decompositions, which the standalone script keeps")
    return False, ("repro.py exits 0: the two rungs agree in a fresh process (outputs that depend on the run: "
                   "ties broken by kernel order, nondeterminism, or state the captured graph did not carry)")


def _write_folder(diff: RungDifference, folders: CauseFolders, number: int, reduced: _Reduced, before_out, after_out,
                  bisect, note: str | None) -> dict:
    """`NN-rung/`: the inputs as raw bytes, `repro.py` and `culprit.json` (the culprit named by
    `bisect`, or `note` saying why not). Returns the cause as `culprit.json` holds it."""
    before, rung, small, small_inputs = diff.before, diff.rung, reduced.gm, reduced.inputs
    culprit = _culprit(rung, bisect)
    if bisect is None and note:
        culprit = replace(culprit, bisect_note=note)
        culprit = replace(culprit, summary=summarize(culprit))
    summary = culprit.summary
    kept = _reference_outputs(small, small_inputs)
    verdict = _verdict(small, small_inputs, before_out, after_out, ref=kept)
    decided = _with_rounding_decides(verdict, small, small_inputs, before_out, after_out)
    verdict = decided if decided is not verdict else _with_dropped_cast(verdict, small, small_inputs, before_out, after_out, kept)
    reason = judge(verdict, switch=culprit.key().switch or None, subsystem=culprit.key().subsystem).reason
    folder = folders.out / f"{number:02d}-{rung}"
    folder.mkdir(parents=True, exist_ok=True)
    _save_inputs([t.detach().cpu() for t in small_inputs], folder)
    removed = f"Decompositions removed first (earlier causes): {', '.join(diff.removed)}" if diff.removed else ""
    notes = "\n".join([f"Culprit: {culprit.describe()}", f"compiler_bisector: {culprit.bisect_text() or 'no single subsystem'}",
                       removed, *([reduced.cut] if reduced.cut else []), *folders.verdict_lines])
    (folder / "repro.py").write_text(render_module_repro(f"{folders.ref}: {summary}", notes, small, before=before, rung=rung,
                                                         device=folders.device))
    _write_issue(folder, small, small_inputs, before=before, rung=rung, device=folders.device, reason=reason, verdict=verdict,
                 culprit=culprit.to_dict())
    shown = list(zip(before_out, after_out))
    cause = {
        "rung": rung,
        "compared_to": before,
        "summary": summary,
        "attributed": bisect is not None or note is None,
        "bisect": None if bisect is None else bisect.to_dict(),
        "culprit": culprit.to_dict(),
        "decomposition": culprit.detail if culprit.subsystem == "decomposition" else None,
        "with_decompositions_removed": list(diff.removed),
        "ops": count_ops(small),
        "ops_before": count_ops(diff.gm),
        "passes": list(reduced.passes),
        "reduce_s": round(reduced.seconds, 1),
        "reduce_budget_s": round(reduced.budget_s, 1),
        "reduction_cut": reduced.cut,
        "reduction_stopped": reduced.stopped.value,
        "outputs": [f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" for a, _ in shown],
        "differing": [_n_differ(a, b) for a, b in shown],
        "folder": str(folder),
        "severity": reason.to_dict() if reason else None,
    }
    (folder / "culprit.json").write_text(json.dumps(cause, indent=2) + "\n")
    return cause


def _write_issue(folder: Path, gm, inputs, *, before: str, rung: str, device: str, reason, verdict, culprit: dict) -> None:
    """A bug cause's issue.py and issue.md (`divfuzz.reports.module_issue`): the reduced graph in plain
    torch, and PyTorch's bug template around it. Nothing for a cause that is not a bug."""
    # the reference the cause was judged by: scalars rounded as eager rounds them with these inputs
    ref_gm = reference_graph(gm, inputs=inputs, device_type=torch.device(device).type)
    script = render_module_issue_script(gm, ref_gm, inputs, before=before, rung=rung, device=device,
                                        reason=reason, verdict=verdict)
    if script is None:
        return
    subject = module_subject(gm, inputs)
    versions = environment_versions(device)
    known = known_lines(_KnownProbe.of_graph(gm, inputs), reason, device=device, culprit=culprit.get("summary"),
                        mechanism=explaining_mechanism(verdict, reason), site=verdict.error_site or "",
                        torch_version=versions.get("torch"))
    (folder / ISSUE_SCRIPT).write_text(script.text)
    (folder / ISSUE_MARKDOWN).write_text(render_issue_markdown(
        subject, script, device=device, reason=reason, verdict=verdict, culprit=culprit,
        versions=versions, known=known, config_desc=f"{rung}, {before} as the baseline"))


@dataclass(frozen=True)
class _KnownProbe:
    """A reduced aten graph as the known-bug matcher reads a spec (`RootCausePattern.from_spec_dict`):
    its ops, its dtypes, and each op's own (`op_dtypes`: the op's result's and its operands' dtypes,
    from a run of the graph) where known."""

    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    op_dtypes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of_graph(cls, gm, inputs) -> "_KnownProbe":
        subject = module_subject(gm, inputs)
        real = _real_dtypes(gm, inputs)
        named = lambda d: str(d).removeprefix("torch.")  # noqa: E731
        per_op: dict[str, set[str]] = {}
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            op = str(getattr(node.target, "__name__", node.target)).split(".")[0]
            touched = {named(real[n.name]) for n in (node, *node.all_input_nodes) if n.name in real}
            per_op.setdefault(op, set()).update(touched)
        computed = {named(d) for d in real.values() if d.is_floating_point}
        return cls(subject.ops, tuple(sorted(set(subject.dtypes) | computed)),
                   tuple((op, tuple(sorted(d))) for op, d in per_op.items()))

    def to_dict(self) -> dict:
        # aten's names and the torch functions' the known-bugs file names ops by: native_layer_norm
        # is layer_norm, add_ is add, _softmax is softmax
        def aliases(op: str):
            return dict.fromkeys((op, op.removeprefix("native_"), op.strip("_")))

        inputs = [{"dtype": d} for d in self.dtypes]
        if not self.op_dtypes:
            return {"nodes": [{"op": alias} for op in self.ops for alias in aliases(op)], "inputs": inputs, "backward": False}
        # one node per (op, dtype) it touches, with no named inputs: its dtypes are its own
        nodes = [{"op": alias, "dtype": d} for op, ds in self.op_dtypes for alias in aliases(op) for d in ds]
        nodes += [{"op": alias, "dtype": self.dtypes[0]} for op in self.ops if op not in dict(self.op_dtypes)
                  for alias in aliases(op)] if self.dtypes else []
        return {"nodes": nodes, "inputs": inputs, "backward": False}


def minimize_module_in_worker(*, ref: str, device: str, out_dir: str, autocast: str | None = None, dtype: str | None = None, max_granularity: int | None = None, budget_s: float = 300.0, train: bool = False) -> dict:
    """The whole `--module` pipeline; returns a JSON-able summary (runs in a worker).

    Capture through Dynamo and judge the whole model (`divfuzz.fuzzer.triage.capture`); then ladder, reduce
    and attribute every captured graph that makes the model diverge when compiled alone (when none
    does alone: every graph that differs by itself, most severe first). One policy decides what is
    worth reducing, for the whole model and for every candidate graph: `divfuzz.oracles.severity_policy`.

    `budget_s` is a deadline for all of it, from the call (`divfuzz.fuzzer.triage.phase_clock.PhaseClock`):
    the whole-model judgement and the Dynamo capture always run; every later phase gets what is
    left (each graph an even share of it), skips or cuts what it cannot finish and says so in
    `cut_by_budget`. The seconds of each phase go to `phases.json` as they pass (so a run killed
    at the deadline plus the caller's grace still tells where it was) and into `capture.json`.
    Cause folders are numbered across graphs (`01-inductor/`, `02-inductor/`, ...), and each
    `culprit.json` names its graph.
    """
    out = Path(out_dir)
    clock = PhaseClock(budget_s, progress=out / "phases.json")
    with clock.phase("load"):
        case = load_user_module(ref)
    cap = capture_user_case(case, ref=ref, device=device, dtype=dtype, autocast=autocast, train=train,
                            worth_reducing=worth_reducing, clock=clock)
    verdict_lines = list(cap.verdict_lines)
    causes: list[dict] = []
    checks: list[dict] = []  # every ladder comparison made, for the record (ladder.json)
    if cap.targets:
        memo = OutputMemo()
        for target in cap.targets:
            memo.pin(target.gm, target.inputs)
        with clock.phase("judge_graphs"):
            targets = _judge_targets(cap, verdict_lines, memo=memo, clock=clock)
        write_capture(cap, out)
        folders = CauseFolders(out, ref, device, tuple(verdict_lines), clock)
        for k, target in enumerate(targets):
            share = clock.left() / (len(targets) - k)
            _ladder_one(target, folders, causes, checks, max_granularity=max_granularity,
                        deadline=clock.deadline.share(share), memo=memo)
        (out / "ladder.json").write_text(json.dumps(checks, indent=2) + "\n")
    if not causes and cap.severity is not None and cap.graphs:
        with clock.phase("arises"):
            arises = _where_below_suspect(cap, device=device, train=train, reason=cap.severity, deadline=clock.deadline)
        verdict_lines += arises
        cap.notes += arises
    verdict_lines += [f"budget: {line}" for line in clock.cut]
    timing = clock.to_dict()
    write_capture(cap, out, extra={"phases": timing})
    (out / "phases.json").write_text(json.dumps(timing, indent=2) + "\n")
    return {"verdict": verdict_lines, "severity": cap.severity, "causes": causes, "checks": checks,
            "capture": cap.summary(), "phases": timing}


# How many captured graphs a divergence below suspect is located in (the first ones, in order).
ARISES_GRAPHS = 2


def _where_below_suspect(cap, *, device: str, train: bool, reason: dict, deadline: Deadline) -> list[str]:
    """For a model whose divergence reads below suspect (nothing is reduced, no folder written):
    where it arises in each of its first captured graphs (`divfuzz.fuzzer.triage.arises`) and the
    upstream issue it matches, one line each. A user who asks why the model differs gets the stage
    and the issue at any severity."""
    lines = []
    for graph in cap.graphs[:ARISES_GRAPHS]:
        if deadline.expired():
            break
        try:
            gm, inputs = lower_to_aten(graph, train=train)
            found = where_it_arises(gm, inputs, rungs=RUNGS, run=_run, deadline=deadline)
        except Exception as e:  # noqa: BLE001 - a graph the ladder cannot run names nothing, and says why
            lines.append(f"where it arises, graph {graph.index + 1}: not located ({type(e).__name__}: {str(e)[:120]})")
            continue
        if found.rung is None:
            continue
        line = f"where it arises, graph {graph.index + 1}: {found.describe()}"
        known = known_lines(_KnownProbe.of_graph(gm, inputs),
                            SeverityReason.from_dict(reason), device=device,
                            culprit=found.culprit.summary if found.culprit is not None else None,
                            torch_version=environment_versions(device).get("torch"), any_rule=True)
        lines.append(line + (f"; upstream: {known[0]}" if known else "; upstream: no known issue matches"))
    return lines


def _judge_targets(cap, verdict_lines: list[str], *, memo: OutputMemo | None = None, clock=None) -> list:
    """Each target graph judged by itself (eager vs inductor, against its own fp64 reference), its
    lines appended to `verdict_lines`. When no graph differs alone in the whole model
    (`cap.rank_by_own_verdict`), only graphs whose own verdict is worth reducing are kept, most
    severe first (stable: capture order breaks ties); `cap.targets` and its notes are updated.
    Past `clock`'s deadline no more graphs are judged: the ones already judged are kept (ranked),
    the others dropped with a note; when every target is kept anyway (not ranking) their
    judgement is only shown, and is skipped."""
    run = memo.run if memo is not None else _run
    judged = []
    for i, target in enumerate(cap.targets):
        if clock is not None and clock.expired():
            line = f"budget spent before judging graph {target.graph if target.graph is not None else 1} by itself"
            line += "" if not cap.rank_by_own_verdict else f": {len(cap.targets) - i} graph(s) not judged, not reduced"
            clock.note_cut(line)  # shown once, with the run's other cuts, as "budget: ..."
            break
        verdict = _verdict(target.gm, target.inputs, run(target.gm, target.inputs, "eager"), run(target.gm, target.inputs, INDUCTOR))
        name = "the captured graph" if target.graph is None else f"graph {target.graph}"
        verdict_lines += [f"{name}, eager vs inductor:"] + ["  " + line for line in verdict_lines_of(verdict)]
        reason = judge(verdict).reason
        judged.append((target, reason, worth_reducing(verdict)))
        if verdict.explanation is not None and reason is not None and not worth_reducing(verdict):
            cap.explained_graphs.append({"graph": target.graph if target.graph is not None else 1, "severity": reason.severity.value,
                                         "rule": reason.rule, "mechanism": verdict.explanation.mechanism})
    if not cap.rank_by_own_verdict:
        return list(cap.targets)
    kept = sorted(((t, r) for t, r, worth in judged if worth), key=lambda tr: tr[1].severity.rank)
    note = ("graphs to reduce, most severe first: " + ", ".join(f"{t.graph} ({r.severity.value})" for t, r in kept)
            if kept else "no captured graph differs at suspect or worse by itself: nothing to reduce")
    cap.notes.append(note)
    verdict_lines.append(note)
    cap.targets = [t for t, _ in kept]
    return cap.targets


def _ladder_one(target, folders: CauseFolders, causes: list[dict], checks: list[dict], *, max_granularity, deadline: Deadline,
                memo: OutputMemo | None = None) -> None:
    """Walk the ladder on one target graph until `deadline`: for every rung that differs from the
    one before it (peeling each decomposition named as a cause to see what else differs), reduce,
    attribute and write a cause folder. Appends to `causes` and `checks`. Each rung check compiles
    the whole target graph; past the deadline none starts, and the rung reached is noted."""
    clock = folders.clock
    gm, inputs = target.gm, target.inputs
    peeled: list[str] = []  # decompositions already named as a cause, removed to see what else differs
    for before, rung in zip(RUNGS, RUNGS[1:]):
        while True:
            if deadline.expired():
                line = (f"graph {target.graph if target.graph is not None else 1}: ladder stopped before {before} vs {rung}"
                        + (f" (with {', '.join(peeled)} removed)" if peeled else "") + ": budget spent")
                clock.note_cut(line)
                checks.append({"graph": target.graph, "compared": [before, rung], "removed": list(peeled), "outcome": "not run: budget spent"})
                return
            diff = RungDifference(gm, tuple(inputs), before, rung, tuple(peeled), memo)
            try:
                with clock.phase("ladder"):
                    verdict = diff.verdict(gm, inputs)
                differs = worth_reducing(verdict)
            except Exception as e:
                if not peeled:
                    raise
                # Some decompositions cannot go (e.g. batch norm's makes the graph functional):
                # keep it, and stop peeling at this rung.
                checks.append({"graph": target.graph, "compared": [before, rung], "removed": list(peeled),
                               "outcome": f"{type(e).__name__}: {str(e)[:300]}"})
                peeled.pop()
                break
            checks.append({"graph": target.graph, "compared": [before, rung], "removed": list(peeled),
                           "outcome": "differs" if differs else "equal"})
            if not differs:
                break
            cause = _reduce_and_name(diff, folders, number=len(causes) + 1, max_granularity=max_granularity,
                                     deadline=deadline, verdict=verdict)
            cause["graph"] = target.graph
            cause["graph_chosen_because"] = target.why
            Path(cause["folder"], "culprit.json").write_text(json.dumps(cause, indent=2) + "\n")
            causes.append(cause)
            op = cause.get("decomposition")
            if not op or op in peeled:
                break
            peeled.append(op)
