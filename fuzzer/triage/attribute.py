"""Naming the compiler stage (and, where it can, the single decomposition or lowering) at fault.

`attribute_case(spec, worker=..., device=..., config=..., kind=...)` runs, each in a worker:
1. the stage ladder `aot_eager` -> `aot_eager_decomp_partition` -> the case's config (Inductor):
   the first rung that shows the finding is the stage;
2. probes inside Inductor: each numerics switch in `PROBES` that this torch has, set alone; the
   ones that remove the finding are recorded (`emulate_precision_casts` for fused bf16 math);
3. `torch._inductor.compiler_bisector` (in-process only, so it runs through `Worker.call` and
   `bisect_in_worker`) to name the subsystem and the single decomposition / lowering / pass. Its
   backend search starts past the ladder's rungs that showed no finding and ran (`seeded_bisect`):
   those backends were just run on the same spec and config, so the bisector would only compile
   them again to read the same answer.
The result is a frozen `Culprit` with a readable `summary` (`divfuzz.records.culprit.summarize`), the
bisector's result kept as fields (`BisectResult`). A backend that is not Inductor (a
user's or a planted one) is the culprit itself: the ladder still runs, the bisector does not.
Invariant: deterministic for a deterministic compiler; every rung, probe and bisector step runs
`execute_case`, which compiles through `divfuzz.fuzzer.engine.compile.compiled`, the one compile site.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import replace
from typing import Any, Mapping

from divfuzz.generators.spec import GraphSpec
from divfuzz.records.config import CompileConfig
from divfuzz.records.culprit import NOT_ATTRIBUTED, BisectResult, Culprit, summarize
from divfuzz.records.deadline import Deadline
from divfuzz.records.errors import TimeUp
from divfuzz.records.outcomes import ERROR_KINDS, PERF_KINDS, Status
from divfuzz.records.backends import INDUCTOR, LADDER_RUNGS, backend_of
from divfuzz.fuzzer.engine.worker import CaseRequest, WorkerTarget
from divfuzz.fuzzer.triage.phase_clock import PhaseTally
from divfuzz.oracles.findings import finding_of, shows_finding
from divfuzz.oracles.severity_policy import case_finding

LADDER = LADDER_RUNGS  # the stage ladder under Inductor (`divfuzz.records.backends`)

# The bisector starts under a deadline only while this many runs as slow as the spec's slowest
# rung or probe fit before it: it checks each backend, then each subsystem, then bisects one.
BISECT_STEPS = 6

# Inductor switches that change numerics, with the value that makes Inductor closer to eager.
# (key, value, devices it means something on)
PROBES: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("emulate_precision_casts", True, ("cpu", "cuda")),
    ("fallback_random", True, ("cpu", "cuda")),
    ("keep_addmm_fused_for_half_dtypes", False, ("cpu", "cuda")),
    ("pattern_matcher", False, ("cpu", "cuda")),
    ("cpp.simdlen", 0, ("cpu",)),
    ("eager_numerics.division_rounding", True, ("cuda",)),
    ("triton.codegen_upcast_to_fp32", False, ("cuda",)),
    ("split_reductions", False, ("cuda",)),
)

# Inductor switches that change scheduling, for the perf oracle's findings, each with the value
# that makes Inductor do less of what it might overdo (fuse across reduction orders, split,
# persist, fuse wide) or search more (autotuning). (key, value, devices it means something on)
PERF_PROBES: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("triton.mix_order_reduction", False, ("cuda",)),
    ("split_reductions", False, ("cpu", "cuda")),
    ("triton.persistent_reductions", False, ("cuda",)),
    ("triton.multi_kernel", 1, ("cuda",)),
    ("triton.cooperative_reductions", True, ("cuda",)),
    ("coordinate_descent_tuning", True, ("cuda",)),
    ("max_autotune_pointwise", True, ("cuda",)),
    ("max_fusion_size", 8, ("cpu", "cuda")),
    ("aggressive_fusion", True, ("cpu", "cuda")),
    ("loop_ordering_after_fusion", False, ("cpu", "cuda")),
    ("realize_opcount_threshold", 4, ("cpu", "cuda")),
    ("cpp.enable_tiling_heuristics", False, ("cpu",)),
)


def known_or_run(worker, request: CaseRequest, timeout_s: float, *, known: Mapping | None, on_verdict=None,
                 deadline: Deadline = Deadline.never()):
    """(verdict, ran): the verdict `known` holds for (request's spec digest, config), else the
    request run in `worker` (and handed to `on_verdict`). Shared by the attribution and the
    minimizer's predicate, so that no (spec, config) pair of one analysis runs twice.

    With a bounded `deadline` a run is stopped there when that comes before its own `timeout_s`:
    `TimeUp` is raised in place of a hang verdict (a run the deadline stopped gives no verdict,
    and none is recorded), as it is when the deadline has passed before the run would start. A
    worker that is not running is started first, and its start-up may end past the deadline (the
    run then does not start)."""
    verdict = known.get((request.spec.digest(), request.config)) if known is not None else None
    if verdict is not None:
        return verdict, False
    left = None
    if deadline.bounded:
        deadline.check(f"{request.config.describe()} ran")
        worker.ensure_started()  # a worker killed by an earlier cut restarts first: not on the run's time
        left = deadline.left()
        if left <= 0:
            raise TimeUp(f"the analysis's deadline passed while the worker for {request.config.describe()} started")
    cut_by_deadline = left is not None and left < timeout_s
    verdict = worker.run(request, left if cut_by_deadline else timeout_s)
    if cut_by_deadline and verdict.status is Status.HANG and verdict.error_type == "Timeout":
        raise TimeUp(f"the analysis's deadline stopped {request.config.describe()} after {left:.0f} s")
    if on_verdict is not None:
        on_verdict(request.spec, request.config, verdict)
    return verdict, True


def probe_table(kind: str) -> tuple[tuple[str, Any, tuple[str, ...]], ...]:
    """The switches that may explain a finding of `kind`: scheduling for perf, numerics otherwise."""
    return PERF_PROBES if kind in {k.value for k in PERF_KINDS} else PROBES


def _kind_of(outcome: str) -> str:
    """An outcome label's kind: perf labels carry their ratio after a space ("slower-fwd 1.42x")."""
    return outcome.split(" ", 1)[0]


# The documented precision switches: one that removes a finding makes it by-design (a knob's
# finding is never minimized in a campaign), so an analysis's first pass probes these alone.
PRECISION_SWITCHES = frozenset({"emulate_precision_casts"})


def guard_configs(culprit: Culprit, config: CompileConfig) -> tuple[CompileConfig, CompileConfig | None]:
    """(config that must still show the finding, config that must not) to keep this culprit.

    A decomposition or AOT culprit is checked on its own cheaper rung; an Inductor culprit
    that a switch removes is checked with and without that switch.
    """
    if culprit.stage in LADDER:
        return replace(config, backend=culprit.stage, inductor=()), None
    if culprit.stage == INDUCTOR and culprit.fixes:
        key = culprit.fixes[0]
        values = {k: v for k, v, _ in PROBES} | {k: v for k, v, _ in PERF_PROBES}
        return config, config.with_inductor(**{key: values[key]})
    return config, None


def available_probes(device: str, table=PROBES) -> list[tuple[str, Any]]:
    """The probes of `table` this torch's Inductor config has, for this device type."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch._inductor.config as ic

    device_type = device.split(":")[0]
    have = ic.get_config_copy()
    return [(k, v) for k, v, devices in table if device_type in devices and k in have and have[k] != v]


# The label's first word for a rung or probe whose finding is on another output than the one the
# bucket is about: `_kind_of` reads "another fp16-ulp" as no finding of the bucket's kind.
ANOTHER = "another"


def _outcome(verdict, kind: str, strict: bool, output: str | None = None) -> str:
    """The finding kind a rung or probe shows ("ok" for none, else the error status); a perf
    verdict's label adds the slowest phase's ratio, e.g. "slower-fwd 1.42x" or "ok 0.97x".
    With `output` (the output the bucket is about), the finding on that output; a rung whose
    findings are all on other outputs reads "another fp16-ulp" (`shows_finding`)."""
    finding = case_finding(verdict, strict=strict)
    label = finding.kind.value if finding is not None else ("ok" if verdict.status in (Status.OK, Status.DIVERGED) else verdict.status.value)
    if output is not None and finding is not None and verdict.status is Status.DIVERGED and not getattr(verdict, "perf", ()):
        own = finding_of(verdict, strict=strict, output=output)
        return own.kind.value if own.output == output else f"{ANOTHER} {label}"
    if getattr(verdict, "perf", ()):
        phase = finding.output if finding is not None else max(verdict.perf, key=lambda p: p.ratio).phase
        ratio = next(p.ratio for p in verdict.perf if p.phase == phase)
        return f"{label} {ratio:.2f}x"
    return label


def attribute_case(
    spec: GraphSpec,
    *,
    worker,
    device: str,
    config: CompileConfig,
    kind: str,
    strict: bool = False,
    timeout_s: float = 300.0,
    bisect: bool = True,
    on_verdict=None,
    oracle: str = "numeric",
    perf_margin: float | None = None,
    known: Mapping | None = None,
    first_fix_only: bool = False,
    deadline: Deadline = Deadline.never(),
    output: str | None = None,
    tally: PhaseTally | None = None,
    seeded_bisect: bool = True,
    knobs_only: bool = False,
) -> Culprit:
    """The culprit of a case that shows a finding of `kind` under `config`: the stage ladder, then
    (for Inductor) the probes, then (with `bisect`) the bisector's narrowing. A perf finding
    (`oracle="perf"`) is probed with the scheduling switches (`PERF_PROBES`) and never bisected:
    the bisector's many steps would each need a noisy timing.

    `known` maps (spec digest, config) to a verdict already seen for this spec (the minimizer's
    runs, an earlier attribution's): a rung or probe found there is not compiled again.
    `first_fix_only` stops the probes at the first switch that removes the finding: a culprit
    without the bisector is named by its first fix alone (`summarize`), so the summary and the
    guard configs (`guard_configs`) are the same, with the later switches' compiles spared.

    `deadline` bounds every run: the ladder's rungs, the probes and the
    bisector. A rung or probe starts only while one more run as slow as this spec's slowest so
    far (a verdict read from `known` counts once read) fits before it, and a run is stopped at the deadline
    (`TimeUp`, never a hang verdict); the bisector (several such runs) starts only while
    `BISECT_STEPS` of them fit, and is stopped at the deadline. What was not run says so
    (`NOT_ATTRIBUTED`): a ladder cut short names the case's own backend as the stage, with no
    claim past it, and runs no probe and no bisector.

    `output` is the output the bucket is about, as the case showed it under `config`: a rung,
    probe or bisector step shows the finding only where that output has a finding of `kind`
    (`shows_finding`), so a stage that changes only another output (a softmax's gradient rounded
    another way beside the gradient the bucket is about) is never the culprit. None (a perf
    finding, a compiler failure, or a verdict not known) judges by `kind` alone.

    `tally` gets the seconds of the ladder, the probes and the bisector (and the bisector's
    compiles; the caller counts the others through `on_verdict`). `seeded_bisect` starts the
    bisector's backend search past the ladder's clear rungs (`cleared_through`); False runs it
    from torch's first backend, as before (the benchmark's leg without the change).

    `knobs_only` (an analysis's first pass on its input, numerics only) climbs no ladder: the case's
    own config, then only the documented precision switches (`PRECISION_SWITCHES`), which are what
    makes a finding by-design before anything is minimized; the stage claimed is the config's
    backend, and the culprit's guard is the case's own config (or that switch's removal). The
    ladder and the other probes run on the minimized graph instead, which is smaller."""
    tally = tally if tally is not None else PhaseTally()
    digest = spec.digest()
    # Not seeded from `known`: the case's own Inductor run (a 137 s compile, once, on the H100)
    # says little of what the AOT rungs before it cost.
    slowest = [0.0]

    def fits(runs: int) -> bool:
        return deadline.fits(runs * slowest[0])

    def outcome(cfg: CompileConfig) -> str:
        t0 = time.monotonic()
        request = CaseRequest(spec, device, cfg, oracle=oracle, perf_margin=perf_margin)
        if (known is None or (digest, cfg) not in known) and not fits(1):
            raise TimeUp(f"no time left for {cfg.describe()}")
        verdict, ran = known_or_run(worker, request, timeout_s, known=known, on_verdict=on_verdict, deadline=deadline)
        # a verdict not run again still tells what a run of this spec costs
        slowest[0] = max(slowest[0], time.monotonic() - t0 if ran else verdict.span_seconds())
        return _outcome(verdict, kind, strict, output)

    # A perf finding climbs aot_eager only: the decomposed graph run eagerly is slow by nature
    # (many small kernels), so it says nothing about where compiled code lost time.
    ladder_rungs = backend_of(config.backend).ladder
    rungs = ladder_rungs[:1] if kind in {k.value for k in PERF_KINDS} else ladder_rungs
    with tally.phase("ladder"):
        ladder, stage, cut = _climb_ladder(outcome, config, kind, () if knobs_only else rungs)
    if not backend_of(config.backend).is_inductor:  # the backend is the culprit, the ladder cut or not
        return Culprit(stage=config.backend, summary=f"backend {config.backend}", ladder=ladder)
    if cut:
        culprit = Culprit(stage=stage, summary="", ladder=ladder,
                          bisect_note=f"{NOT_ATTRIBUTED}: the analysis's time ran out in the stage ladder")
        return replace(culprit, summary=summarize(culprit))
    probes: tuple[tuple[str, str], ...] = ()
    fixes: tuple[str, ...] = ()
    if _kind_of(ladder[-1][1]) == kind:
        with tally.phase("probes"):
            probes, fixes = _probe_switches(outcome, config, kind, device=device, stage=stage, first_fix_only=first_fix_only,
                                            only=PRECISION_SWITCHES if knobs_only else None)
    culprit = Culprit(stage=stage, summary="", fixes=fixes, ladder=ladder, probes=probes)
    if bisect and kind not in {k.value for k in PERF_KINDS}:
        if not fits(BISECT_STEPS):
            culprit = replace(culprit, bisect_note=f"{NOT_ATTRIBUTED}: the analysis's time ran out before the compiler bisector")
            return replace(culprit, summary=summarize(culprit))
        bisect_timeout = min(timeout_s * 4, deadline.left())
        with tally.phase("bisector"):
            return _narrow_by_bisector(culprit, worker, spec, device=device, config=config, kind=kind, strict=strict,
                                       timeout_s=bisect_timeout, cut_by_deadline=deadline.bounded, output=output,
                                       start_after=cleared_through(ladder, kind) if seeded_bisect else None, tally=tally)
    return replace(culprit, summary=summarize(culprit))


# Statuses under which the bisector calls a backend bad whatever the finding (`bisect_in_worker`'s
# `_BROKEN`), and those a rung may end in without a verdict on the numbers: a rung that ended so is
# never taken as cleared.
_NOT_CLEAR = frozenset(s.value for s in Status) - {Status.OK.value, Status.DIVERGED.value}


def cleared_through(ladder: tuple[tuple[str, str], ...], kind: str) -> str | None:
    """The last of the ladder's leading `LADDER` rungs that each ran and showed no finding of
    `kind` (their labels, `_outcome`): the bisector's backends up to it would read good again.
    None when the first rung showed the finding, broke or was not run. A backend before the first
    rung (torch's `eager`: Dynamo alone) is taken as clear with it: `aot_eager` runs the graph
    Dynamo captured, so a graph Dynamo broke shows there too."""
    last = None
    for (rung, label), expected in zip(ladder, LADDER):
        if rung != expected or _kind_of(label) == kind or _kind_of(label) in _NOT_CLEAR:
            break
        last = rung
    return last


def _climb_ladder(outcome, config: CompileConfig, kind: str,
                  rungs: tuple[str, ...] = LADDER) -> tuple[tuple[tuple[str, str], ...], str, bool]:
    """(ladder, stage, cut): each rung of `LADDER` up to the first that shows `kind`, then the
    case's own config (always run, last); the stage is that first rung, else the config's backend.
    A rung the deadline stopped (`TimeUp`) ends the climb: `cut`, with the rungs run so far and the
    config's backend as the stage (no claim past what ran)."""
    ladder: list[tuple[str, str]] = []
    stage = None
    try:
        for rung in rungs:
            got = outcome(CompileConfig(backend=rung, dynamic=config.dynamic))
            ladder.append((rung, got))
            if _kind_of(got) == kind:
                stage = rung
                break
        ladder.append((config.describe(), outcome(config)))
    except TimeUp:
        return tuple(ladder), config.backend, True
    if stage is None:
        stage = config.backend
    return tuple(ladder), stage, False


def _probe_switches(outcome, config: CompileConfig, kind: str, *, device: str, stage: str,
                    first_fix_only: bool = False, only: frozenset | None = None) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(probes, fixes): each Inductor switch set alone, and the ones that remove `kind`.
    Past the AOT rungs only emulate_precision_casts is probed (for the report); when the stage is
    Inductor itself every switch is (those in `only`, when given), up to the first fix when
    `first_fix_only` (numerics only: perf fixes are ranked by how fast each makes compiled, which
    needs them all)."""
    first_fix_only = first_fix_only and kind not in {k.value for k in PERF_KINDS}
    probes: list[tuple[str, str]] = []
    fixes: list[str] = []
    for key, value in available_probes(device, probe_table(kind)):
        if (stage != INDUCTOR and key != "emulate_precision_casts") or (only is not None and key not in only):
            continue
        try:
            got = outcome(config.with_inductor(**{key: value}))
        except TimeUp:  # the analysis's deadline: the probes run so far stand
            break
        probes.append((f"{key}={value!r}", got))
        if _kind_of(got) != kind:
            fixes.append(key)
            if first_fix_only:
                break
    if kind in {k.value for k in PERF_KINDS}:  # the switch that makes compiled fastest first
        ratio = {p.split("=", 1)[0]: float(o.rsplit(" ", 1)[-1].rstrip("x")) for p, o in probes if o.endswith("x")}
        fixes.sort(key=lambda k: ratio.get(k, float("inf")))
    return tuple(probes), tuple(fixes)


def _narrow_by_bisector(culprit: Culprit, worker, spec: GraphSpec, *, device: str, config: CompileConfig, kind: str,
                        strict: bool, timeout_s: float, cut_by_deadline: bool = False,
                        output: str | None = None, start_after: str | None = None,
                        tally: PhaseTally | None = None) -> Culprit:
    """`culprit` narrowed by `compiler_bisector` (run in the worker: it is in-process only, and
    stopped after `timeout_s`), or with a note saying why the bisector gave nothing; its summary
    rebuilt either way. With `cut_by_deadline`, a timeout is the analysis's deadline, not a hang.
    `start_after`: a ladder rung whose backends are known clear (`cleared_through`); the
    bisector's runs are counted in `tally`."""
    res = worker.call(
        WorkerTarget.BISECT,
        {"spec_json": spec.to_json(indent=None), "device": device, "config": config.to_dict(), "kind": kind, "strict": strict,
         "output": output, "start_after": start_after},
        timeout_s,
    )
    answer = res.value if res.error is None and isinstance(res.value, dict) else {}
    if tally is not None and isinstance(answer.get("runs"), int) and not isinstance(answer.get("runs"), bool):
        tally.compiled(answer["runs"])
    if answer.get("result"):
        return culprit.with_bisect(BisectResult.from_dict(answer["result"], where="the bisector's answer"))
    if res.error is not None and cut_by_deadline and res.error.startswith("Timeout"):
        culprit = replace(culprit, bisect_note=f"{NOT_ATTRIBUTED}: the analysis's time ran out while the compiler bisector ran")
    elif res.error is not None:
        culprit = replace(culprit, bisect_note=f"bisector failed: {res.error[:300]}")
    return replace(culprit, summary=summarize(culprit))


# ---------------------------------------------------------------------------------------------
# Runs inside a worker process (through Worker.call): the bisector is in-process only
# ---------------------------------------------------------------------------------------------


def bisect_in_worker(*, spec_json: str, device: str, config: dict, kind: str, strict: bool = False,
                     output: str | None = None, start_after: str | None = None) -> dict:
    """`CompilerBisector.do_bisect` over `execute_case`: good means "no finding of `kind`", or
    with `output`, none of `kind` on that output (`shows_finding`, as `attribute_case` judges).
    Returns {"result": the `BisectResult` as a dict, or None when every backend was good,
    "runs": the runs of the graph it made, "start": the backend it started from}.

    With `start_after` (a backend of the bisector's list that the stage ladder ran clear on this
    spec and config, `cleared_through`), the search starts at the backend after it: torch's own
    first step (`initialize_system`) is replaced for this call only, and the rest of the search
    is torch's. Where this torch's bisector has no such backend or step, it starts as torch does.

    The bisector replaces the backend of every `torch.compile` call while it runs, and
    `execute_case` calls torch.compile (and dynamo.reset) afresh each time, as it requires.
    """
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._inductor.compiler_bisector import BACKENDS, CompilerBisector

    from divfuzz.fuzzer.engine.execute import execute_case

    _BROKEN = {Status.COMPILE_ERROR, Status.RUNTIME_ERROR}
    spec = GraphSpec.from_json(spec_json)
    cfg = CompileConfig.from_dict(config)

    def good() -> bool:
        verdict = execute_case(spec, device, cfg)
        if verdict.status in _BROKEN and kind not in {k.value for k in ERROR_KINDS}:
            # A configuration that no longer compiles (say, batch norm without its decomposition
            # is not functional) says nothing about our divergence: never blame what it disabled.
            return False
        if output is not None:
            return not shows_finding(verdict, kind, output, strict=strict)
        finding = case_finding(verdict, strict=strict)
        return finding is None or finding.kind.value != kind

    runs = [0]

    def counted() -> bool:
        runs[0] += 1
        return good()

    start = _bisect_start(CompilerBisector, list(BACKENDS), start_after)
    original = CompilerBisector.__dict__.get("initialize_system")
    if start is not None:
        def start_there(cls) -> None:
            cls.update_bisect_status(start, "")

        CompilerBisector.initialize_system = classmethod(start_there)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = CompilerBisector.do_bisect(counted)
    finally:
        if start is not None:
            CompilerBisector.initialize_system = original
    return {"result": None if result is None else bisect_result_of(result).to_dict(), "runs": runs[0],
            "start": start}


def _bisect_start(bisector, names: list[str], start_after: str | None) -> str | None:
    """The backend after `start_after` in the bisector's list `names`, or None (start as torch does)."""
    if start_after not in names or names.index(start_after) + 1 >= len(names):
        return None
    if not isinstance(bisector.__dict__.get("initialize_system"), classmethod) or not hasattr(bisector, "update_bisect_status"):
        return None
    return names[names.index(start_after) + 1]


def bisect_result_of(result) -> BisectResult:
    """torch's `BisectionResult` as a torch-free record, copied field by field (never its repr)."""
    return BisectResult(
        backend=str(result.backend),
        subsystem=result.subsystem,
        bisect_number=result.bisect_number,
        debug_info=None if result.debug_info is None else str(result.debug_info),
    )
