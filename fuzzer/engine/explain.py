"""Experiments that explain a bug candidate without a compiler defect, run over the same case.

A divergence has a mechanism before it has a verdict. When the judge rates a case a bug by a
rule a numeric mechanism can fake (`divfuzz.oracles.mechanisms.EXPLAINABLE_RULES`), `explain_case`
tries, in order, the experiments below on the case's own inputs, eager run and compiled outputs
(the compiled graph is not run again), and returns the first `Explanation` that accounts for
the finding; the severity policy then rates it by `divfuzz.oracles.mechanisms.MECHANISMS`.

- subnormal flush: eager is run again with every subnormal input and intermediate (forward
  values and the gradients flowing back through them) flushed to signed zero, and the fp64
  reference likewise; on the elements where compiled agrees with that flushed run (modulo
  subnormals) and not with eager, the flushed values stand in for eager's and the reference's
  (kernels differ in what they flush: on the H100 a ceil flushed while a remainder beside it did
  not); it explains the finding when, judged so, the bug is gone;
- range edge: most of the output's differing elements depend on an input value that is inf or
  NaN, or on a value that overflows its dtype in eager (inf where fp64 is finite), is inf in fp64
  itself, or sits within `RANGE_EDGE_FRACTION` of its dtype's largest finite value (measured by
  making those values NaN in a second fp64 run and seeing which output elements turn NaN), or
  on an accumulation (a sum, sum of squares or product along a dim) whose partial results leave
  the float range in some order of it (`divfuzz.oracles.accumulation_range`): a compiler may
  reassociate, and the order decides where inf, NaN or zero lands;
- ties: the differing output depends on a value-selecting op whose input holds ties (equal, or
  one rounding step apart) at the values it selects;
- reduction order: the differing output depends on an order-free op (a sum, a norm, a softmax,
  a linear's inner dim: `OpDef.order_free`) or a scan (`OpDef.scan`), and eager run again with
  that dim permuted (`LAST_DIM_ORDERS`) and its scans associated as a parallel prefix gives, element by element nearest compiled, values that leave no bug:
  compiled's answer is one that eager's own algorithm gives in another order;
- explicit cast elided (a defect, not an excuse): the graph casts to bfloat16 or float16 and the
  differing elements equal, within `FEW_ULPS`, the fp64 reference run without those casts'
  rounding: compiled dropped a rounding the model asks for. Tried last, so a finding another
  mechanism explains is never called this.

(Ill-conditioned intermediates are measured by the judge's conditioning draws, which move every
intermediate as well as the inputs: `divfuzz.fuzzer.engine.execute.perturbed_reference`.)
Invariants: an experiment never changes the case's own outputs or verdict, only adds an
explanation; each runs only for a bug candidate, so ordinary cases pay nothing, except the
explicit-cast one, which also runs for a suspect that only says the output is sensitive
(`CONDITIONED_SUSPECT_RULES`) where the graph holds a narrowing cast; a crash, a
compile error or a dtype or shape change is never explained (the policy's table says so).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from divfuzz.fuzzer.engine.graph_run import Named, run_forward_backward
from divfuzz.generators.build import (LAST_DIM_ORDERS, build_callable, build_reference, decision_values, deciding_rule,
                                      evaluate_template, reference_inputs, reference_params)
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.accumulation_range import leaves_range_mask
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.mechanisms import CONDITIONED_SUSPECT_RULES, EXPLAINABLE_RULES
from divfuzz.oracles.cast_elision import dropped_cast_elements
from divfuzz.oracles.named_elements import nearest_alternative, rule_elements, same_values
from divfuzz.oracles.severity_policy import RANGE_EDGE_FRACTION, severity_of
from divfuzz.oracles.signed_zero_selection import detail as selection_detail, selected_zeros
from divfuzz.records.severity import Severity, SeverityReason, rule_family
from divfuzz.records.verdict import Explanation, OutputVerdict

if TYPE_CHECKING:
    from divfuzz.fuzzer.engine.execute import PreparedCase

# Below this magnitude a float32 value is subnormal; bf16 shares float32's exponent range, and
# float16 values are computed in float32 (opmath), where theirs are normal.
_SUBNORMAL_BELOW = torch.finfo(torch.float32).tiny
# Ops that select values: which of several equal candidates they pick decides an index or where
# a gradient goes. By family, plus the reductions that select (amax's backward splits at ties).
_SELECTING_OPS = frozenset({"amax"})
_SELECTING_FAMILIES = frozenset({"selection"})
# ... "extreme" selectors compare only their best two candidates per row; the others (sort,
# topk, median) order every candidate.
_EXTREME_SELECTORS = frozenset({"max_dim", "min_dim", "amax", "amin", "argmax", "argmin", "cummax"})


def explain_case(case: "PreparedCase", compiled: Named, outputs: tuple[OutputVerdict, ...]) -> Explanation | None:
    """The first mechanism that explains the case's bug, or None (no bug candidate, a rule no
    mechanism explains, or nothing explained it)."""
    reason = severity_of(verdict_of(outputs))
    if reason is None:
        return None
    if reason.severity is Severity.BUG and reason.rule in EXPLAINABLE_RULES:
        experiments = (_subnormal_flush, _range_edge, _ties, _reduction_order, _approximate_division, _rounding_decides,
                       _explicit_cast_elided)
    elif reason.rule == "zero-sign-wrong":
        # suspect by its rule (the record is split on signed zeros); a selection between them is
        # the part the record settles (PR 186933)
        experiments = (_signed_zero_selection,)
    elif reason.rule in CONDITIONED_SUSPECT_RULES:
        # the ones that name a defect a sensitivity cannot excuse: an approximate division is one
        # step off where eager's exact quotient is an integer (an input at a floor division's jump
        # is as "ill-conditioned" as any, and eager still computes it exactly)
        experiments = (_approximate_division, _rounding_decides)
    else:
        return None
    with case.clock.span("explain"):
        for experiment in experiments:
            found = experiment(case, compiled, reason)
            if found is not None:
                return replace(found, device_type=case.device_type)
    return None


# ---- subnormal flush -------------------------------------------------------------------------


def _flush(x: torch.Tensor) -> torch.Tensor:
    """`x` with float32-subnormal values replaced by zero of their sign."""
    return torch.where((x != 0) & (x.abs() < _SUBNORMAL_BELOW), x * 0, x)


class _FlushBothWays(torch.autograd.Function):
    """Flush to zero in the forward and in the gradient that flows back through it, as a kernel
    compiled with flush-to-zero does on both passes."""

    @staticmethod
    def forward(ctx, x):
        return _flush(x)

    @staticmethod
    def backward(ctx, grad):
        return _flush(grad)


class _FlushCounter:
    """A value hook that flushes every non-float64 floating value and counts the values it changed."""

    def __init__(self, real_dtypes: dict[str, str]):
        self.real_dtypes = real_dtypes  # name -> the dtype the real graph computes it in
        self.flushed = 0

    def __call__(self, name: str, value):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or self.real_dtypes.get(name) == "float64":
            return value
        with torch.no_grad():
            self.flushed += int(((value != 0) & (value.abs() < _SUBNORMAL_BELOW)).sum())
        return _FlushBothWays.apply(value)


def _real_dtypes(spec: GraphSpec) -> dict[str, str]:
    return {t.name: t.dtype for t in spec.inputs} | {n.name: n.dtype for n in spec.nodes}


def _inner_subnormals(case: "PreparedCase", names: set[str]) -> dict[str, torch.Tensor]:
    """For each node in `names` whose op rounds or compares a value it computes inside (its
    `JumpRule` pre-image: a floor division's quotient), where that value, computed from eager's
    own inputs in float32 (the opmath of bfloat16, float16 and float32), is subnormal: a kernel
    that computes it flushes it to zero, and the op then rounds or compares zero."""
    spec = case.spec
    masks = {}
    for node in spec.nodes:
        if node.name not in names or deciding_rule(node) is None:
            continue
        args = [case.eager_env.get(i) for i in node.inputs]
        if not args or not all(isinstance(a, torch.Tensor) for a in args) or not args[0].is_floating_point() \
                or args[0].dtype == torch.float64:
            continue
        op = get_op(node.op)
        rule = (op.decision or op.boundary)([f"a{i}" for i in range(len(args))], reference_params(spec, node, case.device_type))
        with torch.no_grad():
            pre = _evaluate(rule.pre_image, [a.detach().float() if a.is_floating_point() else a.detach() for a in args])
        subnormal = (pre != 0) & (pre.abs() < _SUBNORMAL_BELOW)
        value = case.eager_env.get(node.name)
        if bool(subnormal.any()) and isinstance(value, torch.Tensor) and subnormal.shape == value.shape:
            masks[node.name] = subnormal
    return masks


def _evaluate(expression: str, args: list) -> torch.Tensor:
    """A pre-image template over a0, a1, ... evaluated on `args` in their own dtypes."""
    return evaluate_template("pre_image", expression, args)


def _subnormal_flush(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    spec = case.spec
    eager_hook = _FlushCounter(_real_dtypes(spec))
    eager_ftz, _ = run_forward_backward(spec, build_callable(spec, case.device_type, hook=eager_hook), case.inputs, case.cots)
    if eager_hook.flushed == 0 and not _any_subnormal(case.eager):
        # nothing subnormal among the values: only a value inside an op (a quotient) may be
        return _subnormal_dependence(case, compiled, reason) if case.device_type == "cuda" else None
    ref_hook = _FlushCounter(_real_dtypes(spec))
    reference_ftz, _ = run_forward_backward(spec, build_reference(spec, hook=ref_hook, device_type=case.device_type), reference_inputs(case.inputs),
                                            [c.double() if c is not None else None for c in case.cots])
    # Kernels differ in what they flush (an op whose instructions flush beside one computed without
    # flush-to-zero): each element is judged against the run, flushed or not, that compiled agrees with.
    eager_mix, reference_mix = _per_element_flush(case.eager, eager_ftz, compiled, case.reference, reference_ftz)
    again = severity_of(verdict_of(judge_outputs(eager_mix, compiled, reference_mix, case.bounds)))
    if again is not None and again.severity is Severity.BUG:
        return _subnormal_dependence(case, compiled, reason)
    now = "eager then agrees with compiled" if again is None else f"what is left is {again.severity.value} ({again.rule})"
    return Explanation("subnormal-flush", reason.output,
                       f"{eager_hook.flushed} subnormal values in eager's forward; with them and the gradients through "
                       f"them flushed to zero, {now}",
                       (("flushed", float(eager_hook.flushed)),))


def _subnormal_dependence(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """On a CUDA device, where Inductor's kernels flush subnormals by default: explained when most
    of the elements the rule names depend on a subnormal value of eager's (an input's or a
    node's: `depending_elements`, its subnormals made NaN or zero). A kernel flushes per
    instruction (an operand here, a result there), so eager with everything flushed need not
    give compiled's bits; that an element depends on a subnormal is what the default mode leaves
    undefined. The CPU's kernels keep subnormals: never explained there this way."""
    if case.device_type != "cuda":
        return None
    spec = case.spec
    masks = {}
    ancestors = _ancestors(spec, reason.output)
    for name in ancestors:
        value = case.eager_env.get(name)
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
            subnormal = (value != 0) & (value.detach().float().abs() < _SUBNORMAL_BELOW)
            if bool(subnormal.any()):
                masks[name] = subnormal
    inner = _inner_subnormals(case, ancestors)
    for name, mask in inner.items():
        masks[name] = masks[name] | mask if name in masks else mask
    if not masks:
        return None
    # A kernel's flush gives signed zero: an element the zeros change depends on the subnormals
    # even where NaN cannot show it (a comparison, a count, an integer output).
    n_diff, n_dep = depending_elements(case, compiled, reason, masks, fills=("nan", "signed-zero"))
    if n_diff == 0 or n_dep < 0.5 * n_diff:
        return None
    where = ", ".join(f"{name} (inside {spec.node(name).op})" if name in inner else name
                      for name in sorted(masks, key=_graph_order(spec))[:3])
    return Explanation("subnormal-flush", reason.output,
                       f"{n_dep} of the {n_diff} differing elements of {reason.output} depend on subnormal values of eager's "
                       f"({where}), which the compiled CUDA kernels may flush to zero per instruction",
                       (("differing", float(n_diff)), ("depending", float(n_dep)), ("inside_ops", float(len(inner)))))


def _per_element_flush(eager: Named, eager_ftz: Named, compiled: Named, reference: Named, reference_ftz: Named) -> tuple[Named, Named]:
    """Eager's and the reference's outputs with the flushed run's values taken on exactly the
    elements where compiled differs from eager and agrees with the flushed eager run (modulo
    subnormals): a flush explains those elements and nothing else."""
    flushed, got, ref_ftz = dict(eager_ftz), dict(compiled), dict(reference_ftz)
    eager_mix, reference_mix = [], []
    for (name, e), (_, r) in zip(eager, reference):
        ef, c, rf = flushed.get(name), got.get(name), ref_ftz.get(name)
        if not all(isinstance(t, torch.Tensor) and t.shape == e.shape for t in (ef, c, rf)) or not isinstance(r, torch.Tensor):
            eager_mix.append((name, e))
            reference_mix.append((name, r))
            continue
        c = c.to(e.device)
        if e.is_floating_point():
            take = same_values(_flush(ef.to(e.device)), _flush(c)) & ~same_values(e, c)
        else:
            take = (ef.to(e.device) == c) & (e != c)
        eager_mix.append((name, torch.where(take, ef.to(e.device), e)))
        reference_mix.append((name, torch.where(take.to(r.device), rf.to(r.device), r)))
    return eager_mix, reference_mix


def _any_subnormal(named: Named) -> bool:
    return any(t.is_floating_point() and bool(((t != 0) & (t.abs() < _SUBNORMAL_BELOW)).any()) for _, t in named)


# ---- range edge --------------------------------------------------------------------------------


def _ancestors(spec: GraphSpec, output: str) -> set[str]:
    """The inputs and nodes `output` depends on, itself included; for a gradient output
    ("grad:x"), every input and node (a gradient flows back through the whole graph)."""
    everything = {t.name for t in spec.inputs} | {n.name for n in spec.nodes}
    if output not in everything:
        return everything
    reads = {n.name: n.inputs for n in spec.nodes}
    seen, todo = set(), [output]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(reads.get(name, ()))
    return seen


def _edge_masks(case: "PreparedCase", names: set[str], reference_env: dict) -> dict[str, tuple[torch.Tensor, str]]:
    """For each input or node in `names` that holds range-edge values, the mask of those values
    and a sentence: an input's inf/NaN values or values at the edge of its dtype's range; a node's
    values that overflow in eager (inf where fp64 is finite), are inf or NaN in fp64 (inf - inf of
    the inputs' infinities), or lie at the edge."""
    spec = case.spec
    inputs = {t.name for t in spec.inputs}
    reads = {n.name: n.inputs for n in spec.nodes}
    masks = {}
    # Values that carry the range's edge downstream: an input's inf/NaN or edge values, a node's
    # overflow or edge values. An infinity fp64 itself computes from finite values with none of
    # these upstream is a pole (1 / -0.0 is -inf by definition), not the edge of the range.
    sourced: set[str] = set()
    for name in sorted(names, key=_graph_order(spec)):
        value, exact = case.eager_env.get(name), reference_env.get(name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or not isinstance(exact, torch.Tensor):
            if any(i in sourced for i in reads.get(name, ())):
                sourced.add(name)
            continue
        value, exact = value.detach(), exact.detach().to(value.device)
        if value.shape != exact.shape:
            continue
        at_edge = torch.isfinite(value) & (value.double().abs() >= RANGE_EDGE_FRACTION * torch.finfo(value.dtype).max)
        if name in inputs:
            mask = ~torch.isfinite(value) | at_edge
            what = f"input {name} holds {{n}} inf/NaN values or values at the edge of its dtype's range"
        else:
            upstream_edge = any(i in sourced for i in reads.get(name, ()))
            overflow = torch.isinf(value) & torch.isfinite(exact)
            mask = overflow | at_edge | (~torch.isfinite(exact) if upstream_edge else torch.zeros_like(at_edge))
            what = (f"{name} = {spec.node(name).op} holds {{n}} values that overflow its {str(value.dtype).removeprefix('torch.')} "
                    "in eager, are inf or NaN in fp64, or lie at the edge of its range")
            reordered = _reassociation_edge(spec, name, value.shape, reference_env)
            if reordered is not None and bool(reordered.any()):
                mask, plain_edge = mask | reordered.to(value.device), bool(mask.any())
                what = what if plain_edge else (f"{name} = {spec.node(name).op}: {{n}} of its values come from accumulations whose "
                                                "partial results leave float32's range in some order of the accumulation")
        if bool(mask.any()):
            masks[name] = (mask, what.format(n=int(mask.sum())))
        if bool(mask.any()) or any(i in sourced for i in reads.get(name, ())):
            sourced.add(name)
    return masks


def _reassociation_edge(spec: GraphSpec, name: str, shape: torch.Size, reference_env: dict) -> torch.Tensor | None:
    """Where node `name`'s output comes from an accumulation (`OpDef.accumulates`) whose partial
    results leave the float range in some order of it (`divfuzz.oracles.accumulation_range`),
    read from the fp64 value of the node's first input; None when it does not accumulate."""
    node = spec.node(name)
    accumulation = get_op(node.op).accumulates
    source = reference_env.get(node.inputs[0]) if node.inputs else None
    if accumulation is None or not isinstance(source, torch.Tensor) or not source.is_floating_point():
        return None
    return leaves_range_mask(source, accumulation, shape)


# What a marked value becomes in a dependence run (`depending_elements`), given its value and its
# mask: NaN, which every arithmetic op carries to what depends on it, forward and, as a factor of
# NaN, backward too (a gradient taken through a value at the range's edge is as undefined as the
# value: `torch.where` would instead cut the gradient there, and an input whose every path runs
# through such values would read as independent of them); or zero of the value's sign, which is
# what a kernel's flush-to-zero makes of a subnormal, and which also reaches through a comparison.
def _perturbed(v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`v` with its marked elements made other than they are, whatever its dtype: a boolean
    negated, an integer moved by one, a float made NaN (a decision taken the other way)."""
    if v.dtype == torch.bool:
        return v ^ mask
    if not v.is_floating_point():
        return v + mask.to(v.dtype)
    return _FILLS["nan"](v, mask)


_FILLS = {
    "nan": lambda v, mask: v * torch.where(mask, torch.full_like(v, float("nan")), torch.ones_like(v)),
    "signed-zero": lambda v, mask: torch.where(mask, v * 0, v),
    "perturb": _perturbed,
}


def depending_elements(case: "PreparedCase", compiled: Named, reason: SeverityReason,
                       masks: dict[str, torch.Tensor], *, fills: tuple[str, ...] = ("nan",)) -> tuple[int, int]:
    """(the elements of the reason's output that its rule names, how many of them depend on the
    values `masks` marks): for each of `fills` (`_FILLS`), the marked values of the inputs and
    nodes are replaced by it in another fp64 reference run (forward, and backward through it),
    and an element whose value that run changes depends on them. NaN alone cannot show a
    dependence through a comparison (NaN compares false, as the value may have), so an integer
    or boolean output needs a fill of real values. (0, 0) when the output cannot be compared."""
    spec = case.spec
    eager, got = dict(case.eager).get(reason.output), dict(compiled).get(reason.output)
    plain = dict(case.reference).get(reason.output)
    if eager is None or got is None or plain is None or eager.shape != got.shape:
        return 0, 0
    cots = [c.double() if c is not None else None for c in case.cots]
    depends = torch.zeros(eager.shape, dtype=torch.bool, device=eager.device)
    for fill in fills:
        def marked(name, value, fill=_FILLS[fill]):
            if name not in masks or not isinstance(value, torch.Tensor):
                return value
            return fill(value, masks[name].to(value.device))

        changed, _ = run_forward_backward(spec, build_reference(spec, hook=marked, device_type=case.device_type),
                                          reference_inputs(case.inputs), cots)
        reached = dict(changed).get(reason.output)
        if reached is None or reached.shape != eager.shape:
            return 0, 0
        depends |= ~same_values(reached.to(eager.device), plain.to(eager.device))
    differing = rule_elements(reason.rule, eager, got.to(eager.device))
    return int(differing.sum()), int((differing & depends).sum())


def _range_edge(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Explained when the output's differing elements (those the rule names: `divfuzz.oracles.named_elements.rule_elements`)
    depend on range-edge values: each such value is made NaN in a second fp64 reference run, and
    the differing elements that turn NaN there depend on one (a majority must). An integer output, where NaN cannot show, depends on
    one when its graph does."""
    spec = case.spec
    reference_env: dict = {}
    ref_inputs = reference_inputs(case.inputs)
    with torch.no_grad():
        build_reference(spec, keep=reference_env, device_type=case.device_type)(*[x.detach() for x in ref_inputs])
    masks = _edge_masks(case, _ancestors(spec, reason.output), reference_env)
    if not masks:
        return None
    eager, got = dict(case.eager).get(reason.output), dict(compiled).get(reason.output)
    if eager is None or got is None or eager.shape != got.shape:
        return None
    because = next(iter(masks.values()))[1]
    if not eager.is_floating_point():
        return Explanation("range-edge", reason.output, f"{reason.output} depends on range-edge values: {because}",
                           (("edge_values", float(sum(int(m.sum()) for m, _ in masks.values()))),))

    n_diff, n_dep = depending_elements(case, compiled, reason, {name: mask for name, (mask, _) in masks.items()})
    if n_diff == 0 or n_dep < 0.5 * n_diff:
        return None
    return Explanation("range-edge", reason.output,
                       f"{n_dep} of the {n_diff} differing elements of {reason.output} depend on range-edge values: {because}",
                       (("differing", float(n_diff)), ("depending", float(n_dep))))


# The lower precisions an explicit cast rounds to (a cast to float32 from them is exact).
_NARROWING = frozenset({"bfloat16", "float16"})


def _explicit_cast_elided(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Found when the graph holds an explicit cast to a lower precision and most of the elements
    the rule names equal what the model computes without the casts' rounding
    (`divfuzz.oracles.cast_elision`)."""
    spec = case.spec
    casts = [n for n in spec.nodes if get_op(n.op).rounds_to_param and n.kwargs.get(get_op(n.op).rounds_to_param) in _NARROWING]
    eager, got, kept = (dict(named).get(reason.output) for named in (case.eager, compiled, case.reference))
    if not casts or eager is None or got is None or kept is None:
        return None
    cots = [c.double() if c is not None else None for c in case.cots]
    without, _ = run_forward_backward(spec, build_reference(spec, device_type=case.device_type, explicit_casts=False),
                                      reference_inputs(case.inputs), cots)
    loose = dict(without).get(reason.output)
    if loose is None:
        return None
    n_named, n_close = dropped_cast_elements(reason.rule, eager, got, kept, loose)
    if n_named == 0 or n_close < 0.5 * n_named:
        return None
    what = ", ".join(f"{n.name} = cast to {n.kwargs[get_op(n.op).rounds_to_param]}" for n in casts[:3])
    return Explanation("explicit-cast-elided", reason.output,
                       f"{n_close} of the {n_named} differing elements of {reason.output} equal what the model computes "
                       f"without the rounding of its explicit casts ({what}): compiled dropped it",
                       (("differing", float(n_named)), ("without_casts", float(n_close))))


# ---- a rounding that decides ------------------------------------------------------------------


def _low_precision_feeds(spec: GraphSpec, name: str) -> bool:
    """Whether node `name` reads a value computed in bfloat16 or float16, or one downstream of an
    explicit cast to them: where eager rounds what the node compares, and a fused kernel may not."""
    node = spec.node(name)
    dtypes = _real_dtypes(spec)
    if any(dtypes.get(i) in _NARROWING for i in node.inputs):
        return True
    for upstream in _ancestors(spec, name) - {name}:
        if upstream in dtypes and upstream not in {t.name for t in spec.inputs}:
            up = spec.node(upstream)
            if get_op(up.op).rounds_to_param and up.kwargs.get(get_op(up.op).rounds_to_param) in _NARROWING:
                return True
    return False


def _rounding_decides(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Found when the differing elements depend on decisions of the graph (a comparison a
    `where` selects by, a count over a threshold, an integer a rounding op makes:
    `divfuzz.generators.build.decision_values`) that take the other side once eager's own
    low-precision values are replaced by what the model computes without rounding (the fp64
    reference with no casts' rounding): compiled compared before the rounding eager made. Only
    for decisions fed by bfloat16/float16 values or an explicit cast to them; a decision on a
    graph input sees the same data on both sides."""
    spec = case.spec
    deciders = [n for n in spec.nodes if n.name in _ancestors(spec, reason.output) and deciding_rule(n) is not None
                and _low_precision_feeds(spec, n.name)]
    if not deciders:
        return None
    loose_env: dict = {}
    with torch.no_grad():
        build_reference(spec, keep=loose_env, device_type=case.device_type, explicit_casts=False)(
            *[x.detach() for x in reference_inputs(case.inputs)])
    masks = {}
    for node in deciders:
        rounded = decision_values(spec, node, case.eager_env, device_type=case.device_type)
        exact = decision_values(spec, node, loose_env, device_type=case.device_type)
        value = case.eager_env.get(node.name)
        if rounded is None or exact is None or not isinstance(value, torch.Tensor) or rounded.shape != exact.shape:
            continue
        flipped = rounded.to(exact.device) != exact
        if flipped.shape != value.shape and flipped.shape[:-1] == value.shape:
            flipped = flipped.any(dim=-1)  # a count over the row: any element crossing moves it
        if flipped.shape == value.shape and bool(flipped.any()):
            masks[node.name] = flipped.to(value.device)
    if not masks:
        return None
    n_diff, n_dep = depending_elements(case, compiled, reason, masks, fills=("perturb",))
    if n_diff == 0 or n_dep < 0.5 * n_diff:
        return None
    what = ", ".join(f"{name} = {spec.node(name).op} ({int(mask.sum())} flipped)" for name, mask in list(masks.items())[:3])
    return Explanation("rounding-decides", reason.output,
                       f"{n_dep} of the {n_diff} differing elements of {reason.output} depend on decisions that eager's "
                       f"low-precision rounding takes the other way from the unrounded values ({what}): compiled decided "
                       "before that rounding",
                       (("differing", float(n_diff)), ("depending", float(n_dep)), ("decisions", float(len(masks)))))


def _approximate_division(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Found when the output is a floor or trunc division (`JumpRule.quotient`) and most of its
    wrong elements are one step off at an exact quotient: the quotient of eager's operands, in
    float64, is an integer (eager's answer), and compiled gives the next integer toward zero for a
    trunc or one below for a floor: the kernel divided approximately (182 / 7 as 25.99999)."""
    spec = case.spec
    if reason.output not in {n.name for n in spec.nodes}:
        return None
    node = spec.node(reason.output)
    op = get_op(node.op)
    rule = op.boundary([f"a{i}" for i in range(len(node.inputs))], reference_params(spec, node, case.device_type)) \
        if op.boundary is not None else None
    if rule is None or not rule.quotient:
        return None
    x = case.eager_env.get(node.inputs[0])
    eager, got = dict(case.eager).get(reason.output), dict(compiled).get(reason.output)
    if not isinstance(x, torch.Tensor) or eager is None or got is None or eager.shape != got.shape:
        return None
    with torch.no_grad():
        quotient = _evaluate(rule.pre_image, [x.detach().double()])
        got64, eager64 = got.detach().double().to(quotient.device), eager.detach().double().to(quotient.device)
        exact = torch.isfinite(quotient) & (quotient == torch.round(quotient))
        one_off = (got64 - quotient).abs() == 1
    named = rule_elements(reason.rule, eager, got.to(eager.device)).to(quotient.device)
    n_named, n_at = int(named.sum()), int((named & exact & one_off & (eager64 == quotient)).sum())
    if n_named == 0 or n_at < 0.5 * n_named:
        return None
    return Explanation("approximate-division", reason.output,
                       f"{n_at} of the {n_named} wrong elements of {reason.output} = {node.op} are one step off where the "
                       "exact quotient of eager's operands is an integer: an approximate division before the rounding",
                       (("wrong", float(n_named)), ("at_exact_quotient", float(n_at))))


def _signed_zero_selection(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Found when the output's op selects one of its operands' values (`signed_zero_selection`)
    and every zero of the other sign is one where its operands (eager's values) offer both signs."""
    spec = case.spec
    if reason.output not in {n.name for n in spec.nodes}:
        return None
    node = spec.node(reason.output)
    operands = [case.eager_env.get(i) for i in node.inputs]
    eager, got = dict(case.eager).get(reason.output), dict(compiled).get(reason.output)
    if eager is None or got is None or eager.shape != got.shape:
        return None
    n_named, n_at = selected_zeros(node.op, operands, eager, got)
    if n_named == 0 or n_at < n_named:
        return None
    return Explanation("signed-zero-selection", reason.output, selection_detail(n_named, reason.output, node.op),
                       (("zero_sign_wrong", float(n_named)), ("offered_both", float(n_at))))


def _graph_order(spec: GraphSpec):
    order = {t.name: i for i, t in enumerate(spec.inputs)} | {n.name: len(spec.inputs) + i for i, n in enumerate(spec.nodes)}
    return lambda name: order.get(name, len(order))


# ---- reduction order ---------------------------------------------------------------------------


def _reduction_order(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Found when the output depends on an order-free op (`OpDef.order_free`: a sum, a norm, a
    softmax) and eager, run again with that op's reduced dim taken in other orders
    (`LAST_DIM_ORDERS`), gives values from which, element by element, the one nearest compiled's
    leaves no bug: compiled's answer is one eager's own algorithm gives in another order of the
    same sum. The fp64 reference is not moved (it is exact to within the last bits for any order)."""
    spec = case.spec
    free = [n.name for n in spec.nodes if n.name in _ancestors(spec, reason.output)
            and (get_op(n.op).order_free is not None or get_op(n.op).scan is not None)]
    if not free:
        return None
    # A scan ignores the order (it is associated as a parallel prefix either way): one run does.
    permuted = any(get_op(spec.node(name).op).order_free is not None for name in free)
    used = LAST_DIM_ORDERS if permuted else LAST_DIM_ORDERS[:1]
    orders = [run_forward_backward(spec, build_callable(spec, case.device_type, order=order), case.inputs, case.cots)[0]
              for order in used]
    eager_mix, moved = nearest_alternative(case.eager, orders, compiled)
    if moved == 0:
        return None
    again = severity_of(verdict_of(judge_outputs(eager_mix, compiled, case.reference, case.bounds)))
    if again is not None and again.severity is Severity.BUG:
        return None
    now = "eager then agrees with compiled" if again is None else f"what is left is {again.severity.value} ({again.rule})"
    what = ", ".join(f"{name} = {spec.node(name).op}" for name in free[:3])
    return Explanation("reduction-order", reason.output,
                       f"{reason.output} depends on {what}; eager with the reduced dim in another order "
                       f"({', '.join(used)}; scans as a parallel prefix) gives compiled's values on {moved} elements, and {now}",
                       (("elements", float(moved)), ("orders", float(len(used)))))


# ---- ties --------------------------------------------------------------------------------------


def _ties(case: "PreparedCase", compiled: Named, reason: SeverityReason) -> Explanation | None:
    """Ties decide which element is selected, never the selected value: they explain a gradient
    (which tied element receives it) or an integer output (an index), never a float forward value,
    and never a NaN or an infinity: which tied element receives a finite gradient makes no NaN
    (issue 57: an all-NaN float16 gradient was a bug in one bucket and noise "by tie" in another)."""
    spec = case.spec
    eager = dict(case.eager).get(reason.output)
    if eager is None or (eager.is_floating_point() and not reason.output.startswith("grad:")):
        return None
    if rule_family(reason.rule) == "nan-inf":
        return None
    for name in sorted(_ancestors(spec, reason.output), key=_graph_order(spec)):
        if name in {t.name for t in spec.inputs}:
            continue
        node = spec.node(name)
        if node.op not in _SELECTING_OPS and get_op(node.op).family not in _SELECTING_FAMILIES:
            continue
        x = case.eager_env.get(node.inputs[0]) if node.inputs else None
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0 or x.shape[-1] < 2:
            continue
        rows = _rows_with_ties(x.detach(), extreme_only=node.op in _EXTREME_SELECTORS)
        if rows:
            return Explanation("tie", reason.output,
                               f"{reason.output} depends on {name} = {node.op}, whose input holds ties (equal or one "
                               f"rounding step apart) at the selected values in {rows} rows",
                               (("rows", float(rows)),))
    return None


def _rows_with_ties(x: torch.Tensor, *, extreme_only: bool) -> int:
    """Rows (along the last dim) where two candidates are equal or one rounding step of x's dtype
    apart: at the largest and the smallest value when `extreme_only`, anywhere otherwise."""
    ordered = torch.sort(x.float() if x.dtype in (torch.bfloat16, torch.float16) else x, dim=-1).values
    gaps = ordered.diff(dim=-1).abs()
    step = torch.finfo(x.dtype).eps * torch.maximum(ordered[..., 1:].abs(), ordered[..., :-1].abs())
    tied = (gaps <= step) | (gaps == 0)
    if extreme_only:
        tied = torch.stack([tied[..., 0], tied[..., -1]], dim=-1)
    return int(tied.any(dim=-1).sum())
