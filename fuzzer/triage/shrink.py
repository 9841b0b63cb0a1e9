"""Shrinking a diverging case to the smallest spec that still fails the same way.

`minimize_spec(spec, predicate, budget_s=..., output=...)` first keeps only what the finding's
output needs (`keep_finding_output`: the other outputs, the ops they alone need and, unless the
finding is a gradient, the backward go; for a gradient, the other inputs' gradients too), then runs
named passes (drop nodes by delta debugging,
cut a node into a fresh input, bypass a node, drop outputs, drop backward/autocast/casts,
simplify params, simplify the input recipe, shrink rows, shrink dims, simplify index patterns
that are trivially constant) until a whole round makes no progress or the budget is spent. The predicate is "still lands in the same finding kind (and
the same culprit when given)"; `case_predicate` builds it on a `Worker`, so every candidate runs
in a subprocess and a crash or hang in the compiler is only a failed candidate.

Invariants:
- the input must fail the predicate (checked first, like torch's fx_minifier): else MinimizeError;
- the first step is taken only where the pruned graph still fails the predicate (the same finding,
  rule and severity: `case_predicate` judges every candidate through `judge`); where it does not,
  the rounds start from the whole input and `MinimizeResult.focus` says why;
- every candidate passes `validate_spec` before the predicate sees it: each pass chooses an
  edit and `divfuzz.generators.surgery` makes it (re-typing every node through `divfuzz.generators.node_typing`);
- deterministic: the same spec and the same predicate answers give the same result; answers
  are cached by spec digest, so no candidate is run twice.
"""

from __future__ import annotations

import re

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping

from divfuzz.generators.layouts import CONTIGUOUS
from divfuzz.generators.ops import INDEX_PATTERN_SIMPLICITY, index_values
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec, InputRecipe
from divfuzz.generators.surgery import (
    bypass_node,
    cut_to_input,
    data_inputs,
    fresh_name,
    pruned_to_output,
    rebuild_spec,
    remove_nodes,
    same_shape_inputs,
    with_params,
)
from divfuzz.records.deadline import Deadline, StopReason
from divfuzz.records.dtypes import is_float
from divfuzz.records.errors import MinimizeError, TimeUp
from divfuzz.fuzzer.engine.worker import CaseRequest
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.fuzzer.triage.attribute import known_or_run
from divfuzz.oracles.findings import shows_finding
from divfuzz.records.severity import Severity

Predicate = Callable[[GraphSpec], bool]
DEFAULT_EPS = 1e-5



@dataclass(frozen=True)
class MinimizeResult:
    """The minimal spec and a record of how it was reached."""

    spec: GraphSpec
    ops_before: int
    ops_after: int
    elements_before: int
    elements_after: int
    passes: tuple[tuple[str, int], ...]  # (pass name, accepted candidates), in the order first taken
    predicate_calls: int  # candidates actually run (each is one compiled case)
    wall_s: float
    # Why it stopped (`records.deadline.StopReason`, the one vocabulary of every phase): finished
    # (no pass accepts another candidate) or time's up (its budget ran out first).
    stopped: StopReason
    focus: str = ""  # what the first step (keep_finding_output) kept, or why it kept the whole graph

    @property
    def budget_exhausted(self) -> bool:
        return self.stopped is StopReason.TIME_UP

    def to_dict(self) -> dict:
        return {
            "spec": self.spec.to_dict(),
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "elements_before": self.elements_before,
            "elements_after": self.elements_after,
            "passes": [list(p) for p in self.passes],
            "predicate_calls": self.predicate_calls,
            "wall_s": round(self.wall_s, 2),
            "budget_exhausted": self.budget_exhausted,  # the stored field (analysis.json, the store's rows)
            "stopped": self.stopped.value,
        } | ({"focus": self.focus} if self.focus else {})

    def describe(self) -> str:
        taken = ", ".join(f"{name} x{n}" for name, n in self.passes) or "none"
        return (
            f"minimized {self.ops_before} -> {self.ops_after} ops, {self.elements_before} -> "
            f"{self.elements_after} input elements in {self.wall_s:.0f} s, {self.predicate_calls} compiles "
            f"(passes: {taken}){'; budget exhausted' if self.budget_exhausted else ''}"
        ) + (f"; {self.focus}" if self.focus else "")


def spec_elements(spec: GraphSpec) -> int:
    """Elements of all graph inputs (data and weights): the size measure the minimizer lowers."""
    return spec.input_elements


# ---------------------------------------------------------------------------------------------
# Passes: each yields candidate specs, simplest first; the first that still fails is taken
# ---------------------------------------------------------------------------------------------


def pass_drop_nodes(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Delta debugging over nodes: chunks of halving size, each removed with its consumers rewired."""
    names = [n.name for n in spec.nodes]
    size = max(1, len(names) // 2)
    while True:
        for start in range(0, len(names), size):
            chunk = set(names[start : start + size])
            if len(chunk) < len(names):
                cand = remove_nodes(spec, chunk)
                if cand is not None:
                    yield cand
        if size == 1:
            return
        size = max(1, size // 2)


def pass_cut_to_input(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Replace a node by a fresh data input of its shape and dtype (what feeds it no longer matters)."""
    used = {t.name for t in spec.inputs} | {n.name for n in spec.nodes}
    for n in spec.nodes:
        if n.name in spec.outputs or not is_float(n.dtype):
            continue
        cand = cut_to_input(spec, n, fresh_name(used, "x"))
        if cand is not None:
            yield cand


def pass_bypass(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Replace a node by each of its same-shape data inputs (drop_nodes only tries the first)."""
    for n in spec.nodes:
        for alt in same_shape_inputs(spec, n)[1:]:
            cand = bypass_node(spec, n, alt)
            if cand is not None:
                yield cand


def pass_drop_outputs(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Keep one output at a time, then drop one at a time."""
    if len(spec.outputs) < 2:
        return
    for o in spec.outputs:
        cand = rebuild_spec(spec, outputs=(o,))
        if cand is not None:
            yield cand
    for o in spec.outputs:
        cand = rebuild_spec(spec, outputs=tuple(x for x in spec.outputs if x != o))
        if cand is not None:
            yield cand


def pass_drop_backward(spec: GraphSpec) -> Iterator[GraphSpec]:
    if spec.backward:
        cand = rebuild_spec(replace(spec, backward=False))
        if cand is not None:
            yield cand


def pass_drop_autocast(spec: GraphSpec) -> Iterator[GraphSpec]:
    """No autocast; then drop each cast node."""
    if spec.autocast:
        cand = rebuild_spec(spec, autocast=None)
        if cand is not None:
            yield cand
    for n in spec.nodes:
        if n.op == "cast":
            cand = remove_nodes(spec, {n.name})
            if cand is not None:
                yield cand


_PARAM_SIMPLER = (("affine", False), ("bias", False), ("eps", DEFAULT_EPS))


def pass_simplify_params(spec: GraphSpec) -> Iterator[GraphSpec]:
    """No affine, no bias, default eps: one param of one node at a time."""
    for i, n in enumerate(spec.nodes):
        kw = n.kwargs
        for key, simple in _PARAM_SIMPLER:
            if key in kw and kw[key] != simple:
                cand = with_params(spec, i, {**kw, key: simple})
                if cand is not None:
                    yield cand


def pass_contiguous_inputs(spec: GraphSpec) -> Iterator[GraphSpec]:
    """One laid-out input at a time made contiguous (kept only where the finding stays)."""
    for i, t in enumerate(spec.inputs):
        if t.layout != CONTIGUOUS:
            cand = rebuild_spec(replace(spec, inputs=spec.inputs[:i] + (replace(t, layout=CONTIGUOUS),) + spec.inputs[i + 1:]))
            if cand is not None:
                yield cand


def pass_drop_views(spec: GraphSpec) -> Iterator[GraphSpec]:
    """One view node at a time replaced by the value it views (what follows re-typed to its shape)."""
    for n in spec.nodes:
        if get_op(n.op).view:
            cand = bypass_node(spec, n, n.inputs[0])
            if cand is not None:
                yield cand


def pass_drop_compile_dimensions(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Compiled statically; then in the default mode."""
    if spec.dynamic:
        cand = rebuild_spec(replace(spec, dynamic="", dynamic_dims=()))
        if cand is not None:
            yield cand
    if spec.mode:
        cand = rebuild_spec(replace(spec, mode=""))
        if cand is not None:
            yield cand


def pass_simplify_recipe(spec: GraphSpec) -> Iterator[GraphSpec]:
    if spec.recipe.kind != "normal":
        yield replace(spec, recipe=InputRecipe("normal", spec.recipe.seed))
    if spec.recipe.seed != 0:
        yield replace(spec, recipe=InputRecipe(spec.recipe.kind, 0))


def _shrunk(d: int) -> list[int]:
    return [x for x in (1, d // 4, d // 2, (3 * d) // 4) if 1 <= x < d]


def _shrink_dim(spec: GraphSpec, axis_from_end: int | None, axis: int | None) -> Iterator[GraphSpec]:
    """Shrink one axis of every data input that has it (all data inputs share the axis)."""
    data = data_inputs(spec)
    if not data:
        return
    ref = data[0].shape
    idx = axis if axis is not None else len(ref) - 1 - axis_from_end
    if not 0 <= idx < len(ref):
        return
    for new in _shrunk(ref[idx]):
        shapes = {}
        for t in data:
            if len(t.shape) == len(ref) and t.shape[idx] == ref[idx]:
                shapes[t.name] = t.shape[:idx] + (new,) + t.shape[idx + 1 :]
        cand = rebuild_spec(spec, data_shapes=shapes)
        if cand is not None:
            yield cand


def pass_shrink_rows(spec: GraphSpec) -> Iterator[GraphSpec]:
    """The batch (first) dimension, most aggressive first."""
    yield from _shrink_dim(spec, None, 0)


def pass_shrink_dims(spec: GraphSpec) -> Iterator[GraphSpec]:
    """Every other dimension of the data inputs, then linear/matmul widths."""
    data = data_inputs(spec)
    rank = len(data[0].shape) if data else 0
    for axis in range(1, rank):
        yield from _shrink_dim(spec, None, axis)
    for i, n in enumerate(spec.nodes):
        width = n.kwargs.get("out_features")
        if isinstance(width, int):
            for new in _shrunk(width):
                cand = with_params(spec, i, {**n.kwargs, "out_features": new})
                if cand is not None:
                    yield cand


def _index_rank(node) -> int:
    """How far `node`'s index pattern is from the simplest (`INDEX_PATTERN_SIMPLICITY`); 0 without one."""
    pattern = node.kwargs.get("pattern")
    return INDEX_PATTERN_SIMPLICITY.index(pattern) if pattern in INDEX_PATTERN_SIMPLICITY else 0


def pass_simplify_index(spec: GraphSpec) -> Iterator[GraphSpec]:
    """An index op's pattern replaced by the simplest one that gives the same indices (a strided
    `(arange * 5 + 3) % 1` is all zeros: `constant`), one node at a time: the same values, and a
    script without an expression a maintainer would ask about."""
    for i, n in enumerate(spec.nodes):
        pattern = n.kwargs.get("pattern")
        if pattern not in INDEX_PATTERN_SIMPLICITY:
            continue
        shape = spec.meta(n.inputs[0])[0]
        values = index_values(n.op, n.kwargs, shape)
        if values is None:
            continue
        for simpler in INDEX_PATTERN_SIMPLICITY[: INDEX_PATTERN_SIMPLICITY.index(pattern)]:
            if index_values(n.op, {**n.kwargs, "pattern": simpler}, shape) == values:
                cand = with_params(spec, i, {**n.kwargs, "pattern": simpler})
                if cand is not None:
                    yield cand
                break


PASSES: tuple[tuple[str, Callable[[GraphSpec], Iterator[GraphSpec]]], ...] = (
    ("drop_backward", pass_drop_backward),
    ("drop_outputs", pass_drop_outputs),
    ("drop_nodes", pass_drop_nodes),
    ("cut_to_input", pass_cut_to_input),
    ("bypass_node", pass_bypass),
    ("drop_autocast_and_casts", pass_drop_autocast),
    ("drop_compile_dimensions", pass_drop_compile_dimensions),
    ("drop_views", pass_drop_views),
    ("contiguous_inputs", pass_contiguous_inputs),
    ("simplify_params", pass_simplify_params),
    ("simplify_recipe", pass_simplify_recipe),
    ("shrink_rows", pass_shrink_rows),
    ("shrink_dims", pass_shrink_dims),
    ("simplify_index", pass_simplify_index),
)


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


@dataclass
class _Budget:
    """The minimizer's deadline and its predicate's answers, cached by spec digest: a candidate
    is never run twice, and `calls` counts the ones that were run."""

    predicate: Predicate
    deadline: Deadline
    calls: int = 0
    cache: dict = field(default_factory=dict)

    def left(self) -> bool:
        return not self.deadline.expired()

    def fails(self, cand: GraphSpec) -> bool:
        key = cand.digest()
        if key not in self.cache:
            self.calls += 1
            self.cache[key] = bool(self.predicate(cand))
        return self.cache[key]


def minimize_spec(
    spec: GraphSpec,
    predicate: Predicate,
    *,
    budget_s: float = 120.0,
    passes=PASSES,
    log: Callable[[str], None] | None = None,
    output: str | None = None,
) -> MinimizeResult:
    """The smallest spec (by ops, then input elements) for which `predicate` still holds.

    Must be deterministic; checks first that `predicate(spec)` holds, else raises MinimizeError.
    With `output`, the output the finding is about (its severity reason's), the first step keeps
    only what that output needs (`keep_finding_output`). Then each round tries every pass; a pass
    takes the first candidate that still fails, restarts on the smaller spec, and the rounds
    repeat until one makes no progress or the budget ends.
    """
    t0 = time.monotonic()
    budget = _Budget(predicate, deadline=Deadline.after(budget_s, start=t0))
    if not budget.fails(spec):
        raise MinimizeError(
            f"the input case does not fail the predicate ({len(spec.nodes)} ops, {spec.op_signature()}): nothing to minimize"
        )
    log = log or (lambda s: None)
    start, focus = keep_finding_output(spec, output, budget)
    if start is not spec:
        log(f"keep_finding_output: {len(spec.nodes)} -> {len(start.nodes)} ops, {spec_elements(start)} elements")
    current, taken = _run_rounds(start, passes, budget, log)
    if start is not spec:
        taken = {FOCUS_PASS: 1, **taken}
    return MinimizeResult(
        spec=current,
        ops_before=len(spec.nodes),
        ops_after=len(current.nodes),
        elements_before=spec_elements(spec),
        elements_after=spec_elements(current),
        passes=tuple(taken.items()),
        predicate_calls=budget.calls,
        wall_s=time.monotonic() - t0,
        stopped=StopReason.FINISHED if budget.left() else StopReason.TIME_UP,
        focus=focus,
    )


FOCUS_PASS = "keep_finding_output"


def keep_finding_output(spec: GraphSpec, output: str | None, budget: _Budget) -> tuple[GraphSpec, str]:
    """The first step: `spec` pruned to what the finding's `output` needs
    (`divfuzz.generators.surgery.pruned_to_output`), the most pruned candidate that still fails the
    predicate, and words saying what was kept; `spec` itself and why where none keeps the finding
    (the rounds then start from the whole graph, as before this step); `spec` and "" where nothing
    is smaller or no output is named.

    Candidates, most pruned first: for a forward output, forward only, then with its backward; for
    a gradient, without the other inputs' gradients, then with them."""
    if output in (None, "", "-"):
        return spec, ""
    gradient = output.startswith("grad:")
    variants = ((True, False), (True, True)) if gradient else ((False, True), (True, True))
    candidates: list[GraphSpec] = []
    for keep_backward, other_gradients in variants:
        cand = pruned_to_output(spec, output, keep_backward=keep_backward, other_gradients=other_gradients)
        if cand is not None and _smaller(cand, spec) and cand not in candidates:
            candidates.append(cand)
    if not candidates:  # every op and output is what the finding's output needs
        return spec, ""
    for cand in candidates:
        if not budget.left():
            return spec, f"output {output}: the budget ran out before the graph pruned to it was judged"
        if budget.fails(cand):
            return cand, f"kept only what output {output} needs: {_pruned_words(spec, cand)}"
    smallest = candidates[0]
    return spec, (f"output {output}: the graph pruned to it ({len(smallest.nodes)} ops, {len(smallest.outputs)} "
                  f"outputs) lost the finding, so shrinking started from the whole graph")


def _pruned_words(before: GraphSpec, after: GraphSpec) -> str:
    """What pruning `before` to `after` dropped: ops, outputs, the backward, gradients."""
    words = f"{len(before.nodes)} -> {len(after.nodes)} ops, {len(before.outputs)} -> {len(after.outputs)} outputs"
    if before.backward and not after.backward:
        return words + ", backward dropped"
    gradients_before = sum(t.requires_grad for t in before.inputs)
    gradients_after = sum(t.requires_grad for t in after.inputs)
    return words + (f", {gradients_before} -> {gradients_after} gradients" if gradients_after < gradients_before else "")


def _run_rounds(spec: GraphSpec, passes, budget: _Budget, log: Callable[[str], None]) -> tuple[GraphSpec, dict[str, int]]:
    """Rounds of every pass until one makes no progress or the budget ends: (the smallest
    failing spec, accepted candidates per pass name, in the order first taken)."""
    current = spec
    taken: dict[str, int] = {}
    progress = True
    while progress and budget.left():
        progress = False
        for name, make in passes:
            # A pass restarts on each smaller spec it finds, until it finds none.
            while budget.left():
                cand = _first_smaller_failing(make(current), current, budget)
                if cand is None:
                    break
                log(f"{name}: {len(current.nodes)} -> {len(cand.nodes)} ops, {spec_elements(cand)} elements")
                current = cand
                taken[name] = taken.get(name, 0) + 1
                progress = True
    return current, taken


def _first_smaller_failing(candidates: Iterator[GraphSpec], current: GraphSpec, budget: _Budget) -> GraphSpec | None:
    """The first candidate smaller than `current` that still fails, or None (also when the budget ends)."""
    for cand in candidates:
        if not budget.left():
            return None
        if _smaller(cand, current) and budget.fails(cand):
            return cand
    return None


def _complexity(spec: GraphSpec) -> tuple:
    return (
        len(spec.nodes),
        len(spec.outputs),
        int(spec.backward),
        sum(t.requires_grad for t in spec.inputs),  # a gradient the finding is not about dropped is simpler
        int(spec.autocast is not None),
        sum(1 for n in spec.nodes for k, v in n.params if (k, v) in (("affine", True), ("bias", True))),
        spec_elements(spec),
        int(spec.recipe.kind != "normal"),
        int(spec.recipe.seed != 0),
        sum(1 for n in spec.nodes for k, v in n.params if k == "eps" and v != DEFAULT_EPS),
        sum(_index_rank(n) for n in spec.nodes),
        sum(t.layout != CONTIGUOUS for t in spec.inputs),  # an input made contiguous is simpler
        int(bool(spec.dynamic)) + int(bool(spec.mode)),
    )


def _smaller(cand: GraphSpec, current: GraphSpec) -> bool:
    """A total order that every accepted step lowers: the loop always ends."""
    return _complexity(cand) < _complexity(current)


# ---------------------------------------------------------------------------------------------
# The predicate: a case run in a Worker lands in the same finding kind
# ---------------------------------------------------------------------------------------------


_TYPES = re.compile(r"(\S+) \[[^\]]*\] eager, (\S+) \[[^\]]*\] compiled\Z")


def type_change(verdict: Verdict | None, output: str | None) -> str | None:
    """What kind of type change `output`'s mismatch is (`OutputVerdict.mismatch`): "dtype A -> B"
    (eager's, compiled's), "shape", or "missing"; None when it has no mismatch. A minimal graph
    keeps it: a float16 -> float32 change must not shrink into another output's int64 change."""
    o = next((o for o in (verdict.outputs if verdict is not None else ()) if o.name == output), None)
    if o is None or not getattr(o, "mismatch", None):
        return None
    m = _TYPES.match(o.mismatch)
    if m is None:
        return "missing"
    return f"dtype {m[1]} -> {m[2]}" if m[1] != m[2] else "shape"



def case_predicate(
    worker,
    *,
    device: str,
    config,
    kind: str,
    timeout_s: float = 120.0,
    strict: bool = False,
    must_pass_with=None,
    on_verdict: Callable | None = None,
    severity: str | None = None,
    oracle: str = "numeric",
    perf_margin: float | None = None,
    known: Mapping | None = None,
    site: str | None = None,
    deadline: Deadline = Deadline.never(),
    rule: str | None = None,
    mechanism: str | None = None,
    output: str | None = None,
    culprit_config=None,
    type_changed: str | None = None,
) -> Predicate:
    """`spec -> bool`: running `spec` under `config` in `worker` gives a finding of `kind`
    (and, when `severity` is given, one at least that severe: a bug must not shrink into noise;
    when `rule` is given, rated by that severity rule, and when `mechanism` is given, explained
    by that mechanism ("" for none): the minimal graph shows what its bucket's key says; when
    `output` is given, about that output, so the report, the spec and the repro name one output;
    when `site` is given, a compiler error raised at that site (`Finding.site`): a crash must not
    shrink into another crash; when `type_changed` is given, a type mismatch of that kind of change,
    `oracles.findings.type_change`: a float16 -> float32 output must not shrink into an int64 one). `config` is the case's own: what the bucket's replay and repro.py
    compile with, so the minimal spec reproduces the bucket's finding under it.

    `culprit_config` and `must_pass_with`, CompileConfigs, keep the culprit: the candidate must
    also show a finding of `kind` under `culprit_config` (a cheaper rung of the stage ladder,
    checked first), and none under `must_pass_with` (e.g. with the Inductor switch that removes
    the divergence); with `output` given, a finding of `kind` on that output (`shows_finding`), as
    attribution judges a rung: a rung that diverged only on another output would otherwise make
    the minimizer keep that output's ops.
    With `oracle="perf"` each candidate is timed (`divfuzz.fuzzer.engine.execute_perf`: a bounded number of
    pairs) and must stay slower by the margin, at the same severity (a slowdown must not shrink
    into the compiled wrapper's fixed cost). `known` maps (spec digest, config) to a verdict
    already seen (the input's, from the culprit's rough pass): that pair is not run again.
    `deadline` stops a candidate's run there (a hang would otherwise hold the
    analysis for a whole `timeout_s`): a candidate the deadline stopped does not hold, and
    nothing is recorded of it (`attribute.known_or_run`).
    """

    def same_kind(spec: GraphSpec, cfg, keep_severity: bool = False) -> bool:
        verdict, _ = known_or_run(worker, CaseRequest(spec, device, cfg, oracle=oracle, perf_margin=perf_margin), timeout_s,
                                  known=known, on_verdict=on_verdict, deadline=deadline)
        judged = judge(verdict, strict=strict)
        finding = judged.finding
        if finding is None or finding.kind.value != kind:
            return False
        if keep_severity and site is not None and finding.site != site:
            return False
        if not keep_severity:  # another stage or switch: a finding of the kind on the bucket's output
            return output in (None, "-") or bool(verdict.perf) or shows_finding(verdict, kind, output, strict=strict)
        reason = judged.reason
        if severity is not None and (reason is None or not reason.severity.at_least(Severity(severity))):
            return False
        if rule is not None and (reason is None or reason.rule != rule):
            return False
        if output is not None and (reason is None or reason.output != output):
            return False
        if type_changed is not None and type_change(verdict, output) != type_changed:
            return False  # a dtype change kept as that change, never shrunk into another
        return mechanism is None or judged.mechanism == mechanism

    def predicate(spec: GraphSpec) -> bool:
        try:
            if culprit_config is not None and culprit_config != config and not same_kind(spec, culprit_config):
                return False
            if not same_kind(spec, config, keep_severity=True):
                return False
            return must_pass_with is None or not same_kind(spec, must_pass_with)
        except TimeUp:  # either run cut: the candidate is not known to hold, so it does not
            return False

    return predicate
