"""Capture a user's model the way the compiler under test sees it: through Dynamo.

`NAME()` returns `(model, args)` or `(model, args, kwargs)`; args and kwargs may nest tensors in
lists, tuples and dicts (token ids included). This module
- runs the whole model eagerly, compiled (Inductor) and in float64, optionally as a training step
  (forward, loss, backward; gradients are outputs), and judges its own pytree-flattened outputs;
- records every graph Dynamo hands to the compiler (after graph breaks and guards) with a copy of
  its example inputs, through `torch._dynamo.backends.debugging.ExplainWithBackend` wrapped around
  a recording backend, with where each graph came from (`nn_module_stack`, `stack_trace`);
- finds the graphs that introduce the divergence by compiling one captured graph at a time and
  leaving the others eager (a backend that chooses per graph); every graph that makes the model
  differ alone is a reduction target, and when none does alone, every graph is (the caller ranks
  them by their own verdict's severity);
- lowers each target to aten with `make_fx` (a Dynamo graph has no data-dependent control flow
  left), as a joint forward+backward graph for `--train`, so the rest of `module_minimize` ladders,
  reduces and attributes it as before. `make_fx` of the whole model stays as the fallback when
  Dynamo hands the compiler no graph at all; that fallback lowers the forward only, and says so.

Invariants: every captured graph's inputs are tensors (plain Python values are specialised by
Dynamo into the graph, `dynamic=False`), so the repro carries them as raw bytes and needs only
torch; anything else is a `ConfigError` naming the input. What counts as a divergence is not decided
here: the whole model's outputs become a `Verdict` and the caller's predicate (`divfuzz.oracles.severity_policy.
worth_reducing`, `suspect` or worse) decides, so one policy judges every path. The module is
torch-free at import: each function that needs torch imports it (`# lazy: torch-free module`),
which `tests/test_module_hygiene.py` checks in a fresh interpreter, as for every module so tagged.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from divfuzz.fuzzer.triage.phase_clock import PhaseClock
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.oracles.severity_policy import reference_doubtful, verdict_lines_of
from divfuzz.records.backends import INDUCTOR
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError


@dataclass
class CapturedGraph:
    """One graph Dynamo handed to the compiler, with cloned example inputs (leaf tensors that keep
    the original's `requires_grad`) and where in the model it came from."""

    index: int
    gm: Any
    inputs: list
    module: str  # common nn.Module path of its ops ("" for the top level)
    source: str  # first user source line of its ops, "file.py:LINE in fn"
    ops: int
    break_reason: str | None  # why Dynamo ended this graph, when it was a graph break

    def describe(self) -> str:
        where = self.module or "top level"
        return f"graph {self.index + 1}: {self.ops} ops from {where} ({self.source})"


@dataclass
class ReductionTarget:
    """One aten graph to ladder and reduce, with where it came from and why it was chosen."""

    graph: int | None  # 1-based number of the captured graph; None for the make_fx fallback
    gm: Any
    inputs: list
    why: str


@dataclass
class CaseCapture:
    """What `capture_user_case` found: the whole-model verdict, the graphs, and the one to reduce."""

    verdict_lines: list[str]
    whole_model_differs: bool  # the policy rates the model's own divergence `suspect` or worse
    graphs: list[CapturedGraph]
    graph_breaks: int
    break_reasons: list[str]
    culprits: list[int]  # indices of the graphs that make the model differ on their own
    targets: list[ReductionTarget] = field(default_factory=list)  # the aten graphs to reduce ([]: nothing differs)
    rank_by_own_verdict: bool = False  # no graph differs alone: the caller orders `targets` by their own severity
    judged: str = "whole model"  # what the reduced graphs hold ("forward only" when make_fx fell back under --train)
    capture_method: str = "dynamo"
    notes: list[str] = field(default_factory=list)
    severity: dict | None = None  # the whole model's severity and its reason (None: no divergence)
    # Each graph judged by itself whose divergence a mechanism explains below suspect:
    # {"graph", "severity", "rule", "mechanism"} (`divfuzz.fuzzer.triage.user_module._judge_targets`)
    explained_graphs: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "capture": self.capture_method,
            "graphs": [
                {"index": g.index + 1, "ops": g.ops, "module": g.module, "source": g.source, "break_reason": g.break_reason}
                for g in self.graphs
            ],
            "graph_breaks": self.graph_breaks,
            "break_reasons": self.break_reasons,
            "whole_model_differs": self.whole_model_differs,
            "severity": self.severity,
            "culprit_graphs": [i + 1 for i in self.culprits],
            "reduced_graphs": [t.graph for t in self.targets],
            "rank_by_own_verdict": self.rank_by_own_verdict,
            "judged": self.judged,
            "notes": self.notes,
            "explained_graphs": self.explained_graphs,
        }


# ---------------------------------------------------------------- the user's case


def normalize_case(case, ref: str):
    """`(model, args)` or `(model, args, kwargs)` -> (model, args tuple, kwargs dict).

    A single tensor for args is one argument. Raises ConfigError when the shape of the case is
    wrong or when no tensor at all reaches the model (there would be nothing to compare)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    import torch.utils._pytree as pytree

    if not isinstance(case, (tuple, list)) or len(case) not in (2, 3):
        raise ConfigError(f"--module {ref}: expected NAME() to return (model, args) or (model, args, kwargs) but got {type(case).__name__}" + (f" of {len(case)}" if isinstance(case, (tuple, list)) else ""))
    model, args, kwargs = case[0], case[1], (case[2] if len(case) == 3 else {})
    if not callable(model):
        raise ConfigError(f"--module {ref}: the model {type(model).__name__} is not callable")
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ConfigError(f"--module {ref}: expected kwargs to be a dict with str keys but got {type(kwargs).__name__}")
    leaves = pytree.tree_leaves((args, kwargs))
    if not any(isinstance(x, torch.Tensor) for x in leaves):
        kinds = sorted({type(x).__name__ for x in leaves}) or ["nothing"]
        raise ConfigError(f"--module {ref}: the example inputs hold no tensor (only {', '.join(kinds)}): nothing to compare")
    return model, args, kwargs


def flatten_outputs(out, prefix: str = "output") -> list[tuple[str, Any]]:
    """(path, tensor) for every tensor in a model's output: tensors, tuples, lists, dicts
    (Hugging Face `ModelOutput` is an ordered dict), dataclasses. Other leaves are ignored."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    if isinstance(out, torch.Tensor):
        return [(prefix, out)]
    if isinstance(out, dict):
        return [p for k, v in out.items() for p in flatten_outputs(v, f"{prefix}[{k!r}]")]
    if isinstance(out, (tuple, list)):
        return [p for i, v in enumerate(out) for p in flatten_outputs(v, f"{prefix}[{i}]")]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return [p for f in dataclasses.fields(out) for p in flatten_outputs(getattr(out, f.name), f"{prefix}.{f.name}")]
    return []


def prepare_model(model, args, kwargs, device: str, dtype: str | None):
    """The user's model and inputs on `device` (floating ones in `dtype` when given), the model in inference mode."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    import torch.utils._pytree as pytree

    target = getattr(torch, dtype) if dtype else None

    def move(x):
        if not isinstance(x, torch.Tensor):
            return x
        x = x.to(device)
        return x.to(target) if target is not None and x.is_floating_point() else x

    args, kwargs = pytree.tree_map(move, (args, kwargs))
    if isinstance(model, torch.nn.Module):
        model = model.to(device).train(False)  # inference-mode layers (nn.Module.eval): no dropout
        if target is not None:
            model = model.to(target)
    return model, args, kwargs


# ---------------------------------------------------------------- running the whole model


class ModelStep:
    """How to run one step of the user's model: autocast, train (loss + backward) or not."""

    def __init__(self, model, args, kwargs, *, device: str, autocast: str | None, train: bool):
        self.model, self.args, self.kwargs = model, args, kwargs
        self.device, self.autocast, self.train = device, autocast, train

    def forward_fn(self, model, autocast: bool = True):
        # lazy: torch-free module: it loads torch only when this runs
        import torch

        def forward(*args, **kwargs):
            if self.autocast and autocast:
                with torch.autocast(torch.device(self.device).type, dtype=getattr(torch, self.autocast)):
                    return model(*args, **kwargs)
            return model(*args, **kwargs)

        return forward

    def tensors(self) -> list:
        """The model's tensors: its arguments' and keyword arguments' tensors, then its parameters
        and buffers (none for a plain function)."""
        # lazy: torch-free module: it loads torch only when this runs
        import torch

        own = [*self.model.parameters(), *self.model.buffers()] if isinstance(self.model, torch.nn.Module) else []
        leaves = torch.utils._pytree.tree_leaves((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, torch.Tensor)] + own

    def run(self, backend: str | Callable | None = None, *, float64: bool = False) -> list[tuple[str, Any]]:
        """One step on a fresh copy of the model and inputs; returns (name, tensor) outputs, with
        parameter and input gradients appended under `--train`. `backend` None runs eagerly; a
        name compiles with that registered backend, a callable with that in-process backend
        (the recorder, the one-graph chooser), always static (`dynamic=False`) and through
        `divfuzz.fuzzer.engine.compile.compiled`, which holds for the backward too."""
        # lazy: torch-free module: it loads torch only when this runs
        import torch
        import torch.utils._pytree as pytree

        from divfuzz.fuzzer.engine.compile import compiled

        model = copy.deepcopy(self.model) if isinstance(self.model, torch.nn.Module) else self.model

        def fresh(x):
            if not isinstance(x, torch.Tensor):
                return x
            x = x.detach().clone()
            if float64 and x.is_floating_point():
                x = x.double()
            return x.requires_grad_(self.train and x.is_floating_point())

        args, kwargs = pytree.tree_map(fresh, (self.args, self.kwargs))
        if float64 and isinstance(model, torch.nn.Module):
            model = model.double()
        forward = self.forward_fn(model, autocast=not float64)
        if backend is None:
            return self._step(model, forward, args, kwargs)
        named = backend if isinstance(backend, str) else INDUCTOR  # the name is unused with backend_fn
        with compiled(forward, CompileConfig(backend=named, dynamic=False),
                      backend_fn=None if isinstance(backend, str) else backend) as compiled_forward:
            return self._step(model, compiled_forward, args, kwargs)

    def _step(self, model, forward, args, kwargs) -> list[tuple[str, Any]]:
        """Run `forward` once: outputs, and under `--train` the loss, a backward and the gradients."""
        # lazy: torch-free module: it loads torch only when this runs
        import torch
        import torch.utils._pytree as pytree

        if not self.train:
            with torch.no_grad():
                return [(n, t.detach()) for n, t in flatten_outputs(forward(*args, **kwargs))]
        out = forward(*args, **kwargs)
        outs = flatten_outputs(out)
        loss_fn = getattr(model, "loss_fn", None)
        if callable(loss_fn):
            loss = loss_fn(out)
        else:
            floats = [t.float().sum() for _, t in outs if t.is_floating_point() and t.requires_grad]
            if not floats:
                raise ConfigError("--train: the model's outputs hold no float tensor that needs a gradient: no loss to take")
            loss = torch.stack(floats).sum()
        loss.backward()
        grads = []
        if isinstance(model, torch.nn.Module):
            grads += [(f"grad {n}", p.grad.detach()) for n, p in model.named_parameters() if p.grad is not None]
        leaves = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        grads += [(f"grad input {i}", x.grad.detach()) for i, x in enumerate(leaves) if x.grad is not None]
        return [(n, t.detach()) for n, t in outs] + [("loss", loss.detach())] + grads


def whole_model_verdict(eager: list, compiled: list, ref: list | None, inputs: list | None = None):
    """The model's own named outputs, eager vs compiled, each against fp64, by the one output judge
    (`divfuzz.oracles.judge`): a `Verdict` that `divfuzz.oracles.severity_policy` judges like a campaign's. Integer outputs
    have no pre-image here (unknown boundary distance); their fp64 verdict comes from the float64
    run when it has one. Outputs are matched by position (their names are the model's own).
    `inputs`, the model's tensors (`ModelStep.tensors`), let the rules that read the inputs
    measure them (whether a NaN it loses came from one)."""
    # lazy: torch-free module: it loads torch only when this runs
    from divfuzz.oracles.judge import judge_outputs, verdict_of

    names = [f"{i}:{name}" for i, (name, _) in enumerate(eager)]
    rename = lambda side: [(f"{i}:{name}", t) for i, (name, t) in enumerate(side)]  # noqa: E731
    refs = rename(ref) if ref is not None and len(ref) == len(eager) else None
    outputs = judge_outputs(rename(eager), rename(compiled), refs, inputs=inputs)
    shown = {n: n.split(":", 1)[1] for n in names}
    return verdict_of([dataclasses.replace(o, name=shown.get(o.name, o.name)) for o in outputs])


# ---------------------------------------------------------------- capturing through Dynamo


class _Recorder:
    """A Dynamo backend that keeps each graph with a copy of its example inputs and runs it eagerly."""

    def __init__(self):
        self.captured: list[tuple[Any, list]] = []

    def __call__(self, gm, example_inputs):
        # lazy: torch-free module: it loads torch only when this runs
        import torch

        def keep(x):
            if isinstance(x, torch.Tensor):
                return x.detach().clone().requires_grad_(x.requires_grad and x.is_floating_point())
            return x

        self.captured.append((gm, [keep(x) for x in example_inputs]))
        return gm.forward


class _CompileOne:
    """A Dynamo backend that hands graph number `chosen` to `backend` and runs every other graph
    eagerly (graphs come in the same order as at capture: same model, inputs and guards)."""

    def __init__(self, chosen: int, backend: str = INDUCTOR):
        self.chosen, self.backend, self.seen = chosen, backend, 0

    def __call__(self, gm, example_inputs):
        # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
        from torch._dynamo.backends.registry import lookup_backend

        index, self.seen = self.seen, self.seen + 1
        if index == self.chosen:
            return lookup_backend(self.backend)(gm, example_inputs)
        return gm.forward


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _origin(gm) -> tuple[str, str]:
    """(common nn.Module path, first source line) of a Dynamo graph's ops."""
    paths, source = [], ""
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        stack = n.meta.get("nn_module_stack") or {}
        path = [v[0] for v in stack.values()][-1] if stack else ""
        paths.append(_readable_module_path(path))
        if not source and n.meta.get("stack_trace"):
            frames = _FRAME.findall(n.meta["stack_trace"])
            if frames:
                file, line, fn = frames[-1]
                source = f"{Path(file).name}:{line} in {fn}"
    common = paths[0].split(".") if paths else []
    for p in paths[1:]:
        parts = p.split(".")
        k = 0
        while k < min(len(common), len(parts)) and common[k] == parts[k]:
            k += 1
        common = common[:k]
    return ".".join(x for x in common if x), source or "no source line recorded"


def _readable_module_path(path: str) -> str:
    """Dynamo's `L['self'].layers[0].mlp` / `L__self___layers_0_mlp` -> `layers.0.mlp`."""
    path = re.sub(r"^L\['[^']+'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\._modules\.", ".", path)
    return path.strip(".")


def _count_ops(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def capture_graphs(run: ModelStep) -> tuple[list[CapturedGraph], int, list[str]]:
    """Every graph Dynamo hands the compiler during one eager-backed step of the model."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch
    from torch._dynamo.backends.debugging import ExplainWithBackend

    recorder = _Recorder()
    explain = ExplainWithBackend(recorder)
    run.run(backend=explain)
    torch._dynamo.reset()
    info = explain.output()
    reasons = [f"{r.reason} at {r.user_stack[-1].filename.rsplit('/', 1)[-1]}:{r.user_stack[-1].lineno}" if r.user_stack else str(r.reason) for r in info.break_reasons]
    graphs = []
    for i, (gm, inputs) in enumerate(recorder.captured):
        for j, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                raise ConfigError(
                    f"graph {i + 1} captured by Dynamo takes input {j} of type {type(x).__name__} ({x!r:.80}), "
                    "which a standalone repro cannot carry as raw bytes"
                )
        module, source = _origin(gm)
        reason = getattr(gm, "compile_subgraph_reason", None)
        graphs.append(CapturedGraph(i, gm, inputs, module, source, _count_ops(gm),
                                    str(reason.reason) if reason is not None and reason.graph_break else None))
    return graphs, info.graph_break_count, reasons


def lower_to_aten(graph: CapturedGraph, *, train: bool):
    """The captured graph as an aten graph for fx_minifier (autocast becomes explicit casts).

    Under `train` it is the joint graph: outputs, then the gradients of `sum(out.float().sum())`
    with respect to the inputs that require grad, traced by make_fx through autograd, so that
    backward kernels are compiled and reduced like any other op. Returns (gm, inputs)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch.fx.traceback as fx_traceback

    gm, inputs = graph.gm, graph.inputs
    # Run through an Interpreter with node meta preserved: each aten node keeps the Dynamo node
    # it came from (`source_fn_stack`), which tells the user's casts from autocast's
    # (`divfuzz.fuzzer.triage.user_module.explicit_casts`).
    run = lambda *xs: torch.fx.Interpreter(gm).run(*xs)  # noqa: E731
    if not train:
        with torch.no_grad(), fx_traceback.preserve_node_meta():
            lowered = make_fx(run)(*[x.detach() for x in inputs])
        return _lift_constants(lowered, [x.detach() for x in inputs])
    wants = [i for i, x in enumerate(inputs) if x.requires_grad]

    def joint(*xs):
        xs = [x.detach().requires_grad_(i in wants) for i, x in enumerate(xs)]
        outs = [t for _, t in flatten_outputs(run(*xs))]
        floats = [o.float().sum() for o in outs if o.is_floating_point() and o.requires_grad]
        if not floats or not wants:
            return tuple(outs)
        grads = torch.autograd.grad(torch.stack(floats).sum(), [xs[i] for i in wants], allow_unused=True)
        return (*outs, *[g for g in grads if g is not None])

    with fx_traceback.preserve_node_meta():
        lowered = make_fx(joint)(*[x.detach() for x in inputs])
    return _lift_constants(lowered, [x.detach() for x in inputs])


def _lift_constants(gm, inputs: list):
    """Tensor attributes (constants make_fx kept on the module) become trailing inputs, so the
    graph's code alone, printed into `repro.py`, runs with the inputs it is given."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    graph = gm.graph
    last = [n for n in graph.nodes if n.op == "placeholder"]
    inputs = list(inputs)
    for n in list(graph.nodes):
        if n.op != "get_attr":
            continue
        value = gm
        for part in n.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            continue
        anchor = last[-1] if last else next(iter(graph.nodes))
        with (graph.inserting_after(anchor) if last else graph.inserting_before(anchor)):
            p = graph.placeholder(f"const_{len(inputs)}")
        last.append(p)
        n.replace_all_uses_with(p)
        graph.erase_node(n)
        inputs.append(value.detach().clone())
    graph.lint()
    gm.recompile()
    return gm, inputs


# ---------------------------------------------------------------- the whole pipeline step


def capture_user_case(case, *, ref: str, device: str, dtype: str | None, autocast: str | None, train: bool,
                      worth_reducing: Callable[[Any], bool], clock=None) -> CaseCapture:
    """Judge the whole model, capture its graphs through Dynamo, find the graph that introduces
    the divergence and lower it to aten. `worth_reducing(verdict)` is the caller's policy for
    "a divergence worth a repro" (`divfuzz.oracles.severity_policy.worth_reducing`).

    `clock` (a `divfuzz.fuzzer.triage.phase_clock.PhaseClock`) times the phases `judge_model` (eager,
    compiled and fp64 runs), `capture` (Dynamo), `locate` (one graph compiled at a time) and
    `lower` (make_fx); the first two always run, `locate` stops at the clock's deadline (the
    graphs found so far are kept; with none found nothing is lowered, and `cap.notes` says so)."""
    clock = clock if clock is not None else PhaseClock(float("inf"))
    model, args, kwargs = normalize_case(case, ref)
    model, args, kwargs = prepare_model(model, args, kwargs, device, dtype)
    run = ModelStep(model, args, kwargs, device=device, autocast=autocast, train=train)
    with clock.phase("judge_model"):
        eager = run.run()
        if not eager:  # None, a string, a number: bad input, never "eager and compiled agree"

            raise ConfigError(f"the model returned no tensor (in {ref}): nothing to compare")
        compiled = run.run(INDUCTOR)
        try:
            ref64 = run.run(float64=True)
        except Exception:  # a model that does not run in float64 is judged without a reference
            ref64 = None
        verdict = whole_model_verdict(eager, compiled, ref64, run.tensors())
    lines = verdict_lines_of(verdict)
    whole = worth_reducing(verdict)
    reason = judge(verdict).reason

    with clock.phase("capture"):
        try:
            graphs, breaks, reasons = capture_graphs(run)
            method = "dynamo"
        except Exception as e:  # Dynamo itself failed on this model: make_fx below may still trace it
            graphs, breaks, reasons = [], 0, [f"Dynamo capture failed: {type(e).__name__}: {str(e)[:200]}"]
            method = "dynamo (failed)"
    cap = CaseCapture(lines, whole, graphs, breaks, reasons, [], capture_method=method,
                      severity=reason.to_dict() if reason else None)
    cap.verdict_lines.append(
        f"captured {len(graphs)} graph(s) through Dynamo, {breaks} graph break(s)"
        + ("" if not reasons else ": " + "; ".join(reasons[:5]))
    )
    cap.verdict_lines += ["  " + g.describe() for g in graphs]
    eager_further = reference_doubtful(verdict, reason)
    if not whole and not eager_further:
        cap.notes.append(f"the model's own outputs {'agree' if reason is None else 'differ only at ' + reason.severity.value + ' severity'}"
                         " between eager and compiled: no graph to reduce")
        return cap
    if not whole:
        # The whole model's fp64 run is the user's Python code in float64: it cannot round a scalar
        # where eager rounds it, so eager can look further from fp64 than compiled when eager is
        # the definition. Each graph is judged by itself, against the reference that follows eager's
        # type semantics (`divfuzz.records.reference_rules`), before that is believed.
        cap.rank_by_own_verdict = True
        cap.notes.append(f"the model's own outputs read {reason.severity.value} ({reason.rule}) with eager itself far from "
                         "the fp64 of the model's Python; each captured graph is judged by itself against the reference with "
                         "eager's type semantics (scalars rounded where eager rounds them, the model's casts kept)")
    if not graphs:
        cap.capture_method = "make_fx (fallback: Dynamo handed the compiler no graph)"
        with clock.phase("lower"):
            gm, inputs = _make_fx_whole(run)
        cap.targets.append(ReductionTarget(None, gm, inputs, cap.capture_method))
        cap.notes.append(cap.capture_method)
        if train:
            # make_fx of the whole step would need the parameters as inputs; the fallback lowers
            # the forward alone. Say so wherever the result is read, rather than leave a silent gap.
            cap.judged = "forward only"
            gap = ("--train: the whole model's gradients were judged above, but the make_fx fallback lowers the forward only: "
                   "the graph reduced below holds no backward, so a divergence only in the gradients is not reduced")
            cap.notes.append(gap)
            cap.verdict_lines.append(gap)
        return cap
    with clock.phase("locate"):
        chosen = graphs if cap.rank_by_own_verdict else _graphs_to_reduce(graphs, cap, run, eager, ref64, worth_reducing, clock)
    for graph in chosen:
        with clock.phase("lower"):
            gm, inputs = lower_to_aten(graph, train=train)
        why = ("the only captured graph" if len(graphs) == 1 else "judged by itself (no graph differs alone)"
               if cap.rank_by_own_verdict else "makes the model differ when compiled alone")
        cap.targets.append(ReductionTarget(graph.index + 1, gm, inputs, why))
        cap.verdict_lines.append(f"graph {graph.index + 1} of {len(graphs)} to reduce: {why}: {graph.module or 'top level'} ({graph.source})")
    if len(cap.culprits) == 1:
        cap.verdict_lines.append(f"graph {cap.culprits[0] + 1} of {len(graphs)} introduces the divergence")
    return cap


def _graphs_to_reduce(graphs: list, cap: CaseCapture, run: ModelStep, eager, ref64, worth_reducing, clock) -> list:
    """Every captured graph whose compiling alone (the others eager) makes the model diverge, in
    capture order (each noted in `cap.culprits`). When none does alone, every graph, and
    `cap.rank_by_own_verdict` tells the caller to judge each graph by itself and reduce them in
    order of that verdict's severity (the divergence needs several graphs compiled together).
    Each try is a whole-model run: past `clock`'s deadline no more are made; the culprits found so
    far are kept, and with none found no graph is chosen (a note says the budget was spent)."""
    if len(graphs) == 1:
        return graphs
    for g in graphs:
        if clock.expired():
            line = (f"budget spent while locating the graph that introduces the divergence: {g.index} of {len(graphs)} "
                    "graphs tried" + ("" if cap.culprits else "; none found, so nothing is reduced"))
            clock.note_cut(line)  # shown with the run's other cuts, as "budget: ..."
            cap.notes.append(line)
            return [graphs[i] for i in cap.culprits]
        with contextlib.suppress(Exception):  # one graph that cannot compile alone is not the culprit
            if worth_reducing(whole_model_verdict(eager, run.run(_CompileOne(g.index)), ref64, run.tensors())):
                cap.culprits.append(g.index)
    if cap.culprits:
        return [graphs[i] for i in cap.culprits]
    cap.rank_by_own_verdict = True
    note = ("no single captured graph makes the model differ on its own: each graph is judged by itself and "
            "those that differ are reduced in order of their own severity")
    cap.notes.append(note)
    cap.verdict_lines.append(note)
    return graphs


def _make_fx_whole(run: ModelStep):
    """The pre-Dynamo capture: make_fx of the whole forward, inputs flattened to positional tensors."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    import torch.utils._pytree as pytree
    from torch.fx.experimental.proxy_tensor import make_fx

    flat, spec = pytree.tree_flatten((run.args, run.kwargs))
    positions = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    forward = run.forward_fn(run.model)

    def fn(*tensors):
        values = list(flat)
        for i, t in zip(positions, tensors):
            values[i] = t
        a, k = pytree.tree_unflatten(values, spec)
        return tuple(t for _, t in flatten_outputs(forward(*a, **k)))

    inputs = [flat[i].detach() for i in positions]
    with torch.no_grad():
        gm = make_fx(fn)(*inputs)
    return _lift_constants(gm, inputs)


def write_capture(cap: CaseCapture, out: Path, extra: dict | None = None) -> None:
    """`capture.json`: `cap.summary()`, plus `extra` keys (the run's phase timings, once known)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "capture.json").write_text(json.dumps(cap.summary() | (extra or {}), indent=2) + "\n")
