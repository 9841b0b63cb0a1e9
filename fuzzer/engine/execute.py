"""Running one case in the current process: eager twice, float64 reference, compiled; then oracles.

`execute_case` compiles through `divfuzz.fuzzer.engine.compile.compiled`, the one compile site, which
holds the config's Inductor overrides over the compiled forward and backward alike. It never
raises for a failure of the compiler under test: errors become a `Verdict` with an error status. What it raises is
divfuzz's own failure (building inputs, the fp64 reference, judging), which the worker reports
as internal, never as a finding. It runs inside a worker process (`divfuzz.fuzzer.engine.worker`), which turns
crashes and hangs into verdicts too.
Invariant: the result is a pure function of (spec, device, config), up to nondeterminism that
the double eager run detects.

The float64 reference (and the integer outputs' boundary distances) is computed after the
compile, and only when some output of compiled differs from eager's in a bit: where none does,
no oracle measure reads it (nothing differs, nothing is triaged), so eager's outputs stand in
for it and the verdict is the same (issue 25; `tests/test_verdict_identity.py`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from divfuzz.records.backends import capabilities_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import CompileCacheError
from divfuzz.fuzzer.engine.compile import compiled as compiled_under
from divfuzz.fuzzer.engine.compile_cache import came_from_cache_read
from divfuzz.fuzzer.engine.compile_phases import PhaseTimer, phase_span
from divfuzz.fuzzer.engine.error_site import error_site, exception_chain
from divfuzz.fuzzer.engine.explain import explain_case
from divfuzz.fuzzer.engine.graph_run import Named, boundary_distances, run_forward_backward
from divfuzz.generators.build import build_callable, build_reference, make_inputs, reference_inputs
from divfuzz.generators.input_siblings import same_graph
from divfuzz.generators.shape_siblings import same_graph_but_sizes
from divfuzz.generators.surgery import data_inputs
from divfuzz.generators.spec import MAX_SEED, GraphSpec
from divfuzz.oracles.boundary import MANTISSA_BITS
from divfuzz.oracles.conditioning import IntermediateNudge, perturb_inputs
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.ulp import bitwise_equal
from divfuzz.records.verdict import MAX_ERROR_MESSAGE_CHARS, OutputVerdict, Verdict
from divfuzz.records.outcomes import COMPILER_FAILURES, Status, ends_group, error_type_of, is_compile_error
from divfuzz.fuzzer.engine.own_backends import unsupported_op_of

__all__ = ["boundary_distances", "run_forward_backward", "execute_case", "execute_group"]  # the first two live in graph_run


class CaseClock:
    """Seconds per named span of one case (CUDA synchronized at each span's end), for its verdict's timings."""

    def __init__(self, device: str):
        self.device = device
        self.spans: dict[str, float] = {}

    @contextlib.contextmanager
    def span(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
            self.spans[name] = self.spans.get(name, 0.0) + time.perf_counter() - start

    def add_phases(self, span: str, phases: dict[str, float]) -> None:
        """A compile span's phases (`divfuzz.fuzzer.engine.compile_phases`), those that took time,
        as nested spans `<span>:<phase>`."""
        for phase, seconds in phases.items():
            if seconds > 0:
                name = phase_span(span, phase)
                self.spans[name] = self.spans.get(name, 0.0) + seconds


def execute_case(spec: GraphSpec, device: str, config: CompileConfig, *, profile: bool = False) -> Verdict:
    """Run one case and judge it (a group of one: `execute_group`). With `profile`, also time a
    second (warm) compiled run."""
    verdicts: list[Verdict] = []
    execute_group([spec], device, config, profile=profile, on_verdict=verdicts.append)
    return verdicts[0]


def execute_group(specs: list[GraphSpec] | tuple[GraphSpec, ...], device: str, config: CompileConfig, *,
                  profile: bool = False, on_verdict: Callable[[Verdict], None]) -> int:
    """Run `specs` (a drawn spec, then its input siblings: `divfuzz.generators.input_siblings`, one
    graph under several recipes) through one compile, handing each verdict to `on_verdict` as it
    is judged; return how many ran.

    The first spec is `execute_case` exactly. Each later one is prepared alone (its inputs, eager
    twice) and run through the first spec's compiled function, still inside its compile session
    (the config's Inductor overrides held), so it takes no compile: its verdict has no "compile"
    span, and its compiled outputs are the ones a compile of its own would give, since a compile
    depends on the inputs' shapes, dtypes and strides, never their values (`tests/test_input_siblings.py`
    checks it on real Inductor). Invariants: the group stops after a member that `ends_group`: the
    first spec when it did not reach a compiled result (eager failed or was nondeterministic, or
    the compiler failed: the siblings would meet the same compile), and any member whose compiled
    run failed (a CUDA fault can leave the process unusable); a sibling whose own eager fails gets
    that verdict and the group goes on. The first spec's tensors are freed before the siblings run.
    """
    first, *siblings = specs
    if any(not (same_graph(first, s) or same_graph_but_sizes(first, s)) for s in siblings):
        raise ValueError("execute_group: every spec after the first must be the same graph under another recipe, "
                         "or (for a dynamic spec) with its dynamic dims resized")
    case = prepare_case(first, device)
    if isinstance(case, Verdict):
        on_verdict(case)
        return 1
    ran = 1
    resizing = [s for s in siblings if not same_graph(first, s)]
    with compile_session(first, case.device_type, config, case.inputs, case.cots, case.clock, profile=profile) as (
            compiled, failed, compiled_fn):
        if failed is not None:  # the compiler under test failed on the first spec: its verdict ends the group
            on_verdict(failed)
            return ran
        on_verdict(judged_verdict(case, compiled))
        # The first member's tensors go (a sibling needs the memory a case of its own would have),
        # unless shape siblings follow: then its outputs are kept, to run its inputs again after them.
        kept = (case, [(n, t.clone()) for n, t in compiled]) if resizing else None
        del case, compiled
        for sibling in siblings:
            ran += 1
            verdict = _run_sibling(sibling, device, config, compiled_fn, resized=sibling in resizing)
            if kept is not None and sibling is resizing[-1] and not ends_group(verdict.status, first=False):
                verdict = _after_the_sizes(verdict, kept, compiled_fn)
                kept = None
            on_verdict(verdict)
            if ends_group(verdict.status, first=False):
                break
    return ran


def _run_sibling(spec: GraphSpec, device: str, config: CompileConfig, compiled_fn, *, resized: bool = False) -> Verdict:
    """A sibling's verdict: prepared alone, its compiled outputs from the group's compiled function
    (span "compiled_run"); a failure of that run is the compiler's, as in `run_compiled`. For a
    shape sibling (`resized`), a compile the run added is recorded (`Verdict.recompile`): one
    dynamic compile was to serve every size of the dims it resizes."""
    case = prepare_case(spec, device)
    if isinstance(case, Verdict):
        return case
    before = compiled_graphs()
    try:
        with case.clock.span("compiled_run"):
            compiled, _ = run_forward_backward(spec, compiled_fn, case.inputs, case.cots)
    except Exception as e:
        return failure_verdict(spec, config, e, case.clock)
    verdict = judged_verdict(case, compiled)
    added = compiled_graphs() - before
    if resized and added > 0:
        sizes = ", ".join(f"{t.name} {list(t.shape)}" for t in spec.inputs if t.name in {d.name for d in data_inputs(spec)})
        how = f"dims {list(spec.dynamic_dims)} marked dynamic" if spec.dynamic == "marked" else "dynamic=True"
        verdict = replace(verdict, status=Status.DIVERGED,
                          recompile=f"{sizes} ({how}): {added} more graph{'s' if added > 1 else ''} compiled")
    return verdict


def compiled_graphs() -> int:
    """How many graphs Dynamo has compiled in this process (its own counter)."""
    # lazy: heavy: Dynamo is loaded by the compile this follows; nothing else here needs it
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


AFTER_PREFIX = "after:"


def _after_the_sizes(verdict: Verdict, kept: tuple, compiled_fn) -> Verdict:
    """`verdict` (the last shape sibling's) with the group's first spec run again through the
    compiled function after the other sizes ran: each of its outputs whose bits changed from that
    spec's own compiled run is judged against its eager and fp64 outputs as `after:<output>` (a
    result that depends on which size ran first), and makes the verdict diverge."""
    case, first = kept
    try:
        again, _ = run_forward_backward(case.spec, compiled_fn, case.inputs, case.cots)
    except Exception:  # the sizes' own runs succeeded: a failure here is the run again's, judged as a change
        again = []
    firsts = dict(first)
    changed = {name for name, t in again if name in firsts and not bitwise_equal(firsts[name], t)}
    changed |= {name for name in firsts if name not in dict(again)}
    if not changed:
        return verdict
    eager = [(n, t) for n, t in case.eager if n in changed]
    with single_thread(case.device_type):
        judged = judge_outputs(eager, [(n, t) for n, t in again if n in changed], case.reference)
    after = tuple(replace(o, name=AFTER_PREFIX + o.name) for o in judged)
    return replace(verdict, status=Status.DIVERGED, outputs=verdict.outputs + after)


def judged_verdict(case: "PreparedCase", compiled: Named) -> Verdict:
    """The case's verdict: its outputs judged (`judge_case`), and for a bug candidate the
    mechanism that explains it, when an experiment finds one (`divfuzz.fuzzer.engine.explain`)."""
    outputs = judge_case(case, compiled)
    explanation = explain_case(case, compiled, outputs)
    return verdict_of(outputs, timings=tuple(case.clock.spans.items()), explanation=explanation)


def judge_case(case: "PreparedCase", compiled: Named) -> tuple[OutputVerdict, ...]:
    """`judge_outputs` of eager vs `compiled`, the fp64 reference run only when some output
    differs in a bit: where none does, no measure reads fp64 (nothing differs, nothing is
    triaged), so eager's outputs stand in for it and the boundary distances are not needed."""
    with case.clock.span("oracles"):
        same = same_bits(case.eager, compiled)
    if same:
        with case.clock.span("oracles"):
            return judge_outputs(case.eager, compiled, case.eager)
    reference, bounds = case.reference, case.bounds
    with case.clock.span("oracles"), single_thread(case.device_type):
        return judge_outputs(case.eager, compiled, reference, bounds,
                             perturbed_reference=lambda draw: perturbed_reference(case, draw),
                             inner_reference=lambda draw: perturbed_reference(case, draw, inputs_too=False), inputs=case.inputs,
                             working_dtype=coarsest_float_dtype(case.spec))


def coarsest_float_dtype(spec: GraphSpec) -> str | None:
    """The float dtype of fewest mantissa bits among the spec's inputs, nodes and autocast region:
    the precision eager is held to (`divfuzz.oracles.compare.compare_float`'s `working_dtype`)."""
    floats = [d for d in {t.dtype for t in spec.inputs} | {n.dtype for n in spec.nodes} | {spec.autocast or ""} if d in MANTISSA_BITS]
    return min(floats, key=lambda d: MANTISSA_BITS[d]) if floats else None


def perturbed_reference(case: "PreparedCase", draw: int, *, inputs_too: bool = True) -> Named:
    """The fp64 reference on the case's inputs and intermediates moved by one rounding step
    (`divfuzz.oracles.conditioning`), with the same output gradients: what the judge's
    conditioning check compares against (bug candidates only). Without `inputs_too`, the
    intermediates alone move (the judge's inner draws)."""
    spec = case.spec
    nudge = IntermediateNudge({n.name: tuple(n.inputs) for n in spec.nodes},
                              {t.name: t.dtype for t in spec.inputs} | {n.name: n.dtype for n in spec.nodes}, draw)
    with case.clock.span("conditioning"):
        moved = reference_inputs(perturb_inputs(case.inputs, draw) if inputs_too else case.inputs)
        reference, _ = run_forward_backward(
            spec, build_reference(spec, hook=nudge, device_type=case.device_type), moved, [c.double() if c is not None else None for c in case.cots]
        )
    return reference


def same_bits(eager: Named, compiled: Named) -> bool:
    """Every eager output has a compiled one of its name with the same shape, dtype and bits
    (`divfuzz.oracles.ulp.bitwise_equal`: NaN payloads and signs of zero included)."""
    comp = dict(compiled)
    return all(name in comp and bitwise_equal(e, comp[name]) for name, e in eager)


@dataclass
class PreparedCase:
    """A case up to its compile: inputs, eager's outputs (run twice, bitwise equal), the output
    gradients drawn; the fp64 reference and the integer outputs' boundary distances are run on
    first use (`reference`, `bounds`), under the "reference" span."""

    device_type: str
    clock: CaseClock
    inputs: list
    eager: Named
    cots: list
    spec: GraphSpec
    eager_env: dict
    _reference: tuple[Named, dict] | None = None

    def _reference_and_bounds(self) -> tuple[Named, dict]:
        if self._reference is None:
            with self.clock.span("reference"):
                ref_in = reference_inputs(self.inputs)
                reference, _ = run_forward_backward(
                    self.spec, build_reference(self.spec, device_type=self.device_type), ref_in, [c.double() if c is not None else None for c in self.cots]
                )
                self._reference = (reference, boundary_distances(self.spec, self.eager_env))
        return self._reference

    @property
    def reference(self) -> Named:
        return self._reference_and_bounds()[0]

    @property
    def bounds(self) -> dict:
        return self._reference_and_bounds()[1]


def prepare_case(spec: GraphSpec, device: str) -> PreparedCase | Verdict:
    """Everything but the compile; a Verdict instead when eager fails or is nondeterministic."""
    clock = CaseClock(device)
    device_type = torch.device(device).type
    check_fits(spec, device)
    with clock.span("build"):
        inputs = make_inputs(spec, device)
        eager_fn = build_callable(spec, device_type)
        env: dict[str, Any] = {}
        probe_fn = build_callable(spec, device_type, keep=env)
    try:
        with clock.span("eager"):
            eager, cots = run_forward_backward(spec, probe_fn, inputs)
            eager2, _ = run_forward_backward(spec, eager_fn, inputs, cots)
    except Exception as e:  # a graph that fails eagerly is a divfuzz generator bug
        return Verdict(Status.EAGER_ERROR, error_type=error_type_of(e), error_message=str(e)[:MAX_ERROR_MESSAGE_CHARS])
    with clock.span("oracles"):
        deterministic = all(bitwise_equal(a, b) for (_, a), (_, b) in zip(eager, eager2))
    if not deterministic:
        return Verdict(Status.NONDETERMINISTIC, timings=tuple(clock.spans.items()))
    return PreparedCase(device_type, clock, inputs, eager, cots, spec, env)


def run_compiled(spec: GraphSpec, device_type: str, config: CompileConfig, inputs, cots, clock: CaseClock, *,
                 profile: bool = False, span: str = "compile") -> tuple[Named | None, Verdict | None]:
    """The graph compiled under `config` and run on `inputs`: (outputs, None), or (None, the error
    verdict) when the compiler under test fails (`compile_session`, closed at once)."""
    with compile_session(spec, device_type, config, inputs, cots, clock, profile=profile, span=span) as (compiled, failed, _):
        return compiled, failed


@contextlib.contextmanager
def compile_session(spec: GraphSpec, device_type: str, config: CompileConfig, inputs, cots, clock: CaseClock, *,
                    profile: bool = False, span: str = "compile"):
    """Yield (outputs, None, the compiled function) of the graph compiled under `config` and run on
    `inputs`, with the compile session (`compiled`: its Inductor overrides and removed
    decompositions) held for the block, so that the compiled function can run again on other
    inputs; or (None, the error verdict, None) when the compiler under test fails. The compile
    and the first run are timed under `span` (its backward under `<span>_backward`, its phases by
    torch's own timers under `<span>:<phase>`); with `profile`, a second run under
    "compiled_run". The session holds no reference to the run's inputs or outputs while the
    block runs."""
    with contextlib.ExitStack() as session:

        def compile_and_run():
            timer = PhaseTimer()  # torch's own timers of the compile's phases, read when the span ends
            try:
                with clock.span(span):
                    compiled_fn = session.enter_context(compiled_under(build_callable(spec, device_type), config))
                    if config.mode == "reduce-overhead":
                        warm_up_cuda_graphs(spec, compiled_fn, inputs)
                    compiled, _ = run_forward_backward(spec, compiled_fn, inputs, cots, backward_span=clock.span(f"{span}_backward"))
            finally:
                clock.add_phases(span, timer.phases())
            if profile:
                with clock.span("compiled_run"):
                    run_forward_backward(spec, compiled_fn, inputs, cots)
            return compiled, compiled_fn

        config = config.for_graph(spec.dynamic, spec.mode)  # what this graph compiles under: its spec's dynamic dims
        try:
            try:
                compiled, compiled_fn = compile_and_run()
            except Exception as e:
                if not came_from_cache_read(e):
                    raise
                # Raised while Inductor read its cache: the compile again without the caches says
                # whose error it is. The compiler's again: that verdict. Gone: the cache's (issue 40).
                session.close()
                session.enter_context(torch.compiler.config.patch(force_disable_caches=True))
                session.enter_context(warnings.catch_warnings())
                warnings.simplefilter("ignore")  # Dynamo warns that the caches are off: this compile means it
                compiled, compiled_fn = compile_and_run()
                inner = exception_chain(e)[-1]
                raise CompileCacheError(
                    f"the compile cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR') or '(Inductor default)'} is corrupt "
                    f"or was tampered with: delete that folder. Inductor raised {type(inner).__name__} while it read a "
                    f"cached graph, and the same graph compiles without the cache "
                    f"({' '.join(str(inner).split())[:120] or 'no message'})") from None
        except CompileCacheError:
            raise
        except Exception as e:
            held = [(None, failure_verdict(spec, config, e, clock), None)]
        else:
            held = [(compiled, None, compiled_fn)]
            del compiled
        inputs = cots = None  # the block may free them (`execute_group`): this frame keeps no tensor of the run
        yield held.pop()


# Runs of a CUDA-graphs compile (`mode="reduce-overhead"`) before the judged one, each on inputs of
# other values: the first warms up, the second records the graph, and the judged run replays it
# after its inputs changed, where a static buffer the replay does not refresh shows (a stale output).
CUDA_GRAPH_WARM_UPS = 2


def warm_up_cuda_graphs(spec: GraphSpec, compiled_fn, inputs) -> None:
    """`CUDA_GRAPH_WARM_UPS` runs of `compiled_fn` on the spec's inputs under other seeds, their
    outputs dropped: the case's own run is then a replay with fresh inputs."""
    device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else "cpu"
    for k in range(1, CUDA_GRAPH_WARM_UPS + 1):
        other = replace(spec, recipe=replace(spec.recipe, seed=(spec.recipe.seed + k) % MAX_SEED))
        run_forward_backward(spec, compiled_fn, make_inputs(other, device))


def graph_cells(spec: GraphSpec) -> list[tuple[str, str, bool]]:
    """Each node's (op, dtype of its first input, backward): what `divfuzz.records.backends` declares support for."""
    dtypes = {t.name: t.dtype for t in spec.inputs} | {n.name: n.dtype for n in spec.nodes}
    return [(n.op, dtypes.get(n.inputs[0], "?") if n.inputs else "?", spec.backward) for n in spec.nodes]


def failure_verdict(spec: GraphSpec, config: CompileConfig, e: BaseException, clock: CaseClock) -> Verdict:
    """A compiler failure as a verdict. A compile error in a graph holding a cell the backend
    declares unsupported (`divfuzz.records.backends`) is `UNSUPPORTED`, not a finding."""
    status = Status.COMPILE_ERROR if is_compile_error(e) else Status.RUNTIME_ERROR
    message = str(e)[:MAX_ERROR_MESSAGE_CHARS]
    cell = capabilities_of(config.backend).unsupported_cell(graph_cells(spec)) if status == Status.COMPILE_ERROR else None
    if spec.dynamic == "marked" and any(type(x).__name__ == "ConstraintViolationError" for x in exception_chain(e)):
        # Dynamo refuses a mark_dynamic on a dim the graph specialises (a pooling window over it,
        # say), and tells the user to use maybe_mark_dynamic: the marks were wrong, not the compiler
        status = Status.UNSUPPORTED
        message = f"the graph specialises a dim divfuzz marked dynamic (mark_dynamic's contract): {message}"[:MAX_ERROR_MESSAGE_CHARS]
    elif cell is not None:
        op, dtype, backward = cell
        status = Status.UNSUPPORTED
        message = f"{config.backend} declares {op} on {dtype}{' with backward' if backward else ''} unsupported: {message}"[:MAX_ERROR_MESSAGE_CHARS]
    elif status == Status.COMPILE_ERROR:
        op = unsupported_op_of(e)
        if op is not None:  # the second compiler says so itself, at compile time
            status = Status.UNSUPPORTED
            message = f"{config.backend} has no implementation of {op}: {message}"[:MAX_ERROR_MESSAGE_CHARS]
    return Verdict(status, error_type=error_type_of(e), error_message=message, timings=tuple(clock.spans.items()),
                   error_site=error_site(e) if status in COMPILER_FAILURES else None)


def check_fits(spec: GraphSpec, device: str) -> None:
    """Refuse, before allocating, a spec whose tensors cannot fit this machine: allocating them
    would get the worker OOM-killed, which reads as a compiler crash. Counted at 8 bytes per
    element of every input and node (the fp64 reference holds them all); specs that load through
    `load_spec` are far below this, so reaching it is divfuzz's failure, not the compiler's."""
    elements = spec.input_elements + sum(math.prod(n.shape) for n in spec.nodes)
    if device.startswith("cuda"):
        capacity = torch.cuda.get_device_properties(torch.device(device)).total_memory
    else:
        capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if elements * 8 > capacity:
        raise MemoryError(
            f"the spec's {elements:,} tensor elements need about {elements * 8 / 2**30:,.0f} GiB in float64, "
            f"more than the {capacity / 2**30:,.0f} GiB of {device}"
        )


@contextlib.contextmanager
def single_thread(device_type: str):
    """The oracles' many small CPU passes run faster on one thread than on a contended pool."""
    if device_type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
