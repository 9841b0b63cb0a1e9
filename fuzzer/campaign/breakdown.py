"""Where a campaign's time went, read from its own store (`divfuzz bench --breakdown STORE`).

Every worker slot's life, from the budget's start (the command's) to the run's end, is split into:
- start-up: sizing, the worker's start (importing torch, CUDA), the first spec drawn;
- in the worker, per case: the verdict's spans (build, eager, compile forward and backward, the
  fp64 reference, the warm run when profiled, oracles) and the round trip outside them; a
  compile's phases by torch's own timers (Dynamo, AOTAutograd, Inductor, the backend compile,
  autotuning: `divfuzz.fuzzer.engine.compile_phases`) are inside its compile span, shown per
  compiled graph apart;
- between cases: the driver's turn (Hypothesis draws the next spec, judging, the store, bucket
  folders, the GIL shared by every slot): the worker waits;
- after its last case: drawing stopped (the analyses, then shutdown); its worker minimizes or waits.
The store holds each case's slot, stamp, wall and spans; the run's timings file beside it
(`divfuzz-run<N>-timings.json`, written by `divfuzz.fuzzer.campaign.loop`) adds the budget's start,
when drawing stopped, the driver's tallies and each analysis, with its seconds and compiles per
phase (first pass, minimize, ladder, probes, bisector, other: they add up to its wall) and its
rule, summed by phase and by rule here. The store and the file are
untrusted data: every number read is checked, and a bad one exits 2 naming the file and field.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.generators.shape_siblings import SHAPE_SIBLINGS
from divfuzz.records.verdict import is_phase_span, nested_span
from divfuzz.fuzzer.store import Store, resolve_store
from divfuzz.records.errors import ConfigError
from divfuzz.records.safe_paths import check_plain, read_text

# The in-worker spans, in the order a case runs them; others (a hang's "case") come after.
SPAN_ORDER = ("build", "eager", "compile_forward", "compile_backward", "reference", "compiled_run", "oracles")
# A compile's phases, in the order they run (`divfuzz.fuzzer.engine.compile_phases.PHASES`: the
# breakdown reads them from the store as data, without the engine).
PHASE_ORDER = ("dynamo", "aot_autograd", "inductor", "backend_compile", "autotune")


@dataclass(frozen=True)
class Breakdown:
    store: Path
    run_id: int
    device: str
    workers: int
    cases: int
    span_s: float  # the budget's start (or the run's) to the run's end
    first_case_s: float | None  # after the start
    last_case_s: float | None
    stages: dict  # in-worker span -> seconds, summed over cases ("worker_ipc": the round trip outside them)
    slot_time: dict  # "start-up", "in the worker", "between cases", "after its last case" -> slot-seconds
    driver: dict = field(default_factory=dict)  # the driver's own tallies (timings file): generate, store, files, a fleet's round trips
    analyses: dict = field(default_factory=dict)  # count, filed, seconds, workers (timings file)
    budget_s: float | None = None
    drawing_stopped_s: float | None = None
    # After the start: the budget's work end, every slot ended, the analysis pool ended (the run's
    # end is span_s; summary and report.html come after it).
    finish: dict = field(default_factory=dict)
    pending_by_severity: dict = field(default_factory=dict)
    timings_file: Path | None = None
    worker_starts: dict = field(default_factory=dict)  # how the campaign process's workers started -> count (timings file)
    repeats: int = 0  # draws of a spec their slot had already run, not run again and not among `cases` (timings file)
    graphs: int = 0  # cases with a compile of their own
    siblings: int = 0  # input siblings: cases run through their drawn spec's compile (the rest never compiled: eager failed)
    # The campaign's compile span's phases (torch's timers), seconds summed over the compiled graphs;
    # empty for a store from before they were recorded.
    phases: dict = field(default_factory=dict)
    # The analyses' phases: phase -> {"s": seconds, "compiles": count}, summed over the analyses
    # (their seconds add up to the analyses' walls); rule -> {"count", "s", "compiles"}; each
    # analysis's wall and compiles, for the medians. Empty for a timings file without them.
    analysis_phases: dict = field(default_factory=dict)
    analysis_rules: dict = field(default_factory=dict)
    analysis_walls: tuple = ()
    analysis_compiles: tuple = ()

    def phase_ms_per_graph(self) -> dict[str, float]:
        """Each compile phase (`PHASE_ORDER`, then any other one recorded), and "other" (the compile
        span less its phases: first runs, Dynamo's frame entry, divfuzz's compile session), in ms
        per compiled graph; empty without graphs or phases."""
        if not self.graphs or not self.phases:
            return {}
        compile_s = self.stages.get("compile_forward", 0.0) + self.stages.get("compile_backward", 0.0)
        names = [k for k in PHASE_ORDER if k in self.phases] + sorted(k for k in self.phases if k not in PHASE_ORDER)
        out = {k: self.phases[k] / self.graphs * 1000 for k in names}
        out["other"] = max(0.0, compile_s - sum(self.phases.values())) / self.graphs * 1000
        return out

    @property
    def rate_over_run(self) -> float:
        return self.cases / self.span_s if self.span_s > 0 else 0.0

    @property
    def rate_past_startup(self) -> float:
        """Cases after the first over the time from the first to the last: what a long run sees."""
        if self.cases < 2 or self.last_case_s is None or self.first_case_s is None or self.last_case_s <= self.first_case_s:
            return 0.0
        return (self.cases - 1) / (self.last_case_s - self.first_case_s)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number but got {value!r}")
    return float(value)


def _timings_file(folder: Path, run_id: int) -> tuple[dict, Path | None]:
    path = folder / f"divfuzz-run{run_id}-timings.json"
    if not check_plain(path, what="timings file"):  # a symlink, a FIFO or a device there is refused, by name
        return {}, None
    try:
        data = json.loads(read_text(path, what="timings file"))
    except RecursionError:
        raise ConfigError(f"{path}: not a divfuzz timings file (its JSON is nested deeper than Python reads)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a divfuzz timings file ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object but got {type(data).__name__}")
    return data, path


def campaign_breakdown(path: Path, run_id: int | None = None) -> Breakdown:
    """The breakdown of a run (default: the store's latest) of the store at `path` (its folder or file)."""
    store_path = resolve_store(path)
    store = Store(store_path, create=False)
    try:
        runs = store.runs()
        if not runs:
            raise ConfigError(f"{store_path}: the store holds no run")
        run = next((r for r in runs if r["id"] == run_id), None) if run_id is not None else runs[-1]
        if run is None:
            raise ConfigError(f"{store_path}: no run {run_id!r} (runs: {', '.join(str(r['id']) for r in runs)})")
        cases = store.case_clock(run["id"])
    finally:
        store.close()
    extra, extra_path = _timings_file(store_path.parent, run["id"])
    where = f"{extra_path}" if extra_path else str(store_path)

    def opt(key):
        return _number(extra[key], f"{where}: {key}") if extra.get(key) is not None else None

    start = opt("budget_from") or _number(run["started_at"], f"{store_path}: run {run['id']} started_at")
    end = opt("ended") or (run["finished_at"] if isinstance(run["finished_at"], (int, float)) else None)
    workers = run["options"].get("workers") if isinstance(run["options"], dict) else None
    per_compile = run["options"].get("inputs_per_compile", 1) if isinstance(run["options"], dict) else 1
    per_compile = per_compile if isinstance(per_compile, int) and not isinstance(per_compile, bool) and per_compile >= 1 else 1
    per_compile = per_compile + SHAPE_SIBLINGS if per_compile > 1 else 1  # a draw's members (`members_per_draw`)
    workers = int(workers) if isinstance(workers, int) and workers > 0 else len({c["slot"] for c in cases if c["slot"] >= 0}) or 1

    stages: Counter = Counter()
    phases: Counter = Counter()
    slot_time: Counter = Counter()
    by_slot = defaultdict(list)
    stamps = []
    graphs = 0  # cases that compiled
    siblings = 0  # input siblings: cases run through their drawn spec's compile (none of their own)
    for c in cases:
        at = f"{store_path}: case slot {c['slot']} idx {c['idx']}"
        created, wall = _number(c["created_at"], f"{at} created_at"), _number(c["wall_s"], f"{at} wall_s")
        spans = {str(k): _number(v, f"{at} timings[{k!r}]") for k, v in c["timings"].items()}
        for name in [n for n in spans if is_phase_span(n)]:  # a compile's phase, inside its span: apart
            seconds = spans.pop(name)
            span, _, phase = name.partition(":")
            if span == "compile":
                phases[phase] += seconds
        if "compile" in spans:  # the forward's compile and first run: the compile span less the backward's
            spans["compile_forward"] = spans.pop("compile") - spans.get("compile_backward", 0.0)
            graphs += 1
        elif "compiled_run" in spans:  # an input sibling: run through its drawn spec's compile
            siblings += 1
        for name, seconds in spans.items():
            stages[name] += seconds
        stages["worker_ipc"] += max(0.0, wall - sum(s for n, s in spans.items() if not nested_span(n) or n == "compile_backward"))
        by_slot[c["slot"]].append((created, wall, c["idx"]))
        stamps.append(created)
    end = end if end is not None else max(stamps, default=start)
    for slot, rows in by_slot.items():
        if slot < 0:  # replays of known specs run before the slots, one after another
            continue
        # The slot's first group (a drawn spec and its input siblings, stored one after another once
        # it ran) started its walls before its first row was stored.
        first_group = [w for _, w, i in rows if i // per_compile == rows[0][2] // per_compile]
        first_start = rows[0][0] - sum(first_group)
        slot_time["start-up"] += max(0.0, first_start - start)
        slot_time["in the worker"] += sum(w for _, w, _ in rows)
        # The rest of the slot's span from its first case's start to its last case stored (a drawn
        # spec's input siblings are stored after their group ran, each with its own share of it)
        slot_time["between cases"] += max(0.0, rows[-1][0] - first_start - sum(w for _, w, _ in rows))
        slot_time["after its last case"] += max(0.0, end - rows[-1][0])
    idle_slots = workers - len([s for s in by_slot if s >= 0])
    if idle_slots > 0:  # a slot that stored no case waited (or started) the whole run
        slot_time["start-up"] += idle_slots * (end - start)

    analyses = {}
    by_phase: dict = {}
    by_rule: dict = {}
    walls_each: list = []
    compiles_each: list = []
    if isinstance(extra.get("analyses"), list):
        for i, a in enumerate(extra["analyses"]):
            if not isinstance(a, dict) or not isinstance(a.get("phases"), dict):
                continue
            at = f"{where}: analyses[{i}]"
            wall = _number(a.get("wall_s"), f"{at}.wall_s")
            compiles = 0
            for name, ph in a["phases"].items():
                if not isinstance(ph, dict):
                    raise ConfigError(f"{at}.phases[{str(name)[:80]!r}]: expected an object but got {type(ph).__name__}")
                seconds = _number(ph.get("s"), f"{at}.phases[{str(name)[:80]!r}].s")
                count = int(_number(ph.get("compiles"), f"{at}.phases[{str(name)[:80]!r}].compiles"))
                total = by_phase.setdefault(str(name)[:80], {"s": 0.0, "compiles": 0})
                total["s"] += seconds
                total["compiles"] += count
                compiles += count
            rule = str(a.get("rule") or a.get("kind") or "?")[:80]
            r = by_rule.setdefault(rule, {"count": 0, "s": 0.0, "compiles": 0})
            r["count"] += 1
            r["s"] += wall
            r["compiles"] += compiles
            walls_each.append(wall)
            compiles_each.append(compiles)
    if isinstance(extra.get("analyses"), list):
        walls = [_number(a.get("wall_s"), f"{where}: analyses[{i}].wall_s") for i, a in enumerate(extra["analyses"]) if isinstance(a, dict)]
        filed = sum(1 for a in extra["analyses"] if isinstance(a, dict) and a.get("filed") is True)
        analyses = {"count": len(walls), "filed": filed, "seconds": sum(walls),
                    "workers": int(opt("analysis_workers") or 0)}
    driver = {}
    if isinstance(extra.get("driver_timings"), dict):
        driver = {k: _number(extra["driver_timings"][k], f"{where}: driver_timings[{k!r}]")
                  for k in ("generate", "store", "minimize_and_files", "fleet_round_trip") if k in extra["driver_timings"]}
    pending = {}
    if isinstance(extra.get("pending_by_severity"), dict):
        pending = {str(k): int(_number(v, f"{where}: pending_by_severity[{k!r}]")) for k, v in extra["pending_by_severity"].items()}
    starts = {}
    if isinstance(extra.get("worker_starts"), dict):
        starts = {str(k)[:200]: int(_number(v, f"{where}: worker_starts[{k!r}]")) for k, v in extra["worker_starts"].items()}
    stopped = opt("drawing_stopped")
    repeats = int(opt("repeats") or 0)
    finish = {k: opt(k) - start for k in ("work_end", "slots_done", "pool_done") if opt(k) is not None}
    return Breakdown(
        store=store_path, run_id=run["id"], device=str(run["device"]), workers=workers, cases=len(cases),
        span_s=end - start, first_case_s=(min(stamps) - start) if stamps else None,
        last_case_s=(max(stamps) - start) if stamps else None, stages=dict(stages), slot_time=dict(slot_time),
        driver=driver, analyses=analyses, budget_s=opt("budget_s"),
        drawing_stopped_s=(stopped - start) if stopped is not None else None, pending_by_severity=pending,
        timings_file=extra_path, finish=finish, worker_starts=starts, repeats=repeats, graphs=graphs,
        siblings=siblings, phases=dict(phases), analysis_phases=by_phase, analysis_rules=by_rule,
        analysis_walls=tuple(walls_each), analysis_compiles=tuple(compiles_each),
    )


def breakdown_table(b: Breakdown) -> str:
    """The breakdown as markdown: the rates, where each case's time goes in the worker, and where
    the workers' time goes (and so where they wait)."""
    n = max(b.cases, 1)
    lines = [
        f"run {b.run_id} of {b.store} on {b.device}, {b.workers} worker(s)"
        + (f", budget {b.budget_s:.0f} s" if b.budget_s else "") + ":",
        f"{b.cases} cases in {b.span_s:.1f} s: {b.rate_over_run:.2f} cases/s over the run, "
        f"{b.rate_past_startup:.2f} past start-up (first case at {b.first_case_s or 0:.1f} s, last at {b.last_case_s or 0:.1f} s"
        + (f", drawing stopped at {b.drawing_stopped_s:.1f} s" if b.drawing_stopped_s is not None else "") + ")"
        + (f"; {b.repeats} more draws repeated a spec their slot had run, and were not run again" if b.repeats else ""),
        f"{b.graphs} graphs compiled: {b.graphs / b.span_s if b.span_s > 0 else 0:.2f} per second over the run"
        + (f"; {b.siblings} more cases (input siblings) ran through a drawn spec's compile on other inputs" if b.siblings else ""),
        "",
        "| in the worker, per case | total s | per case ms | share |",
        "| --- | --- | --- | --- |",
    ]
    order = [k for k in SPAN_ORDER if k in b.stages] + sorted(k for k in b.stages if k not in SPAN_ORDER and k != "worker_ipc")
    total = sum(b.stages.values())
    for k in order + ["worker_ipc"]:
        v = b.stages.get(k, 0.0)
        label = "worker round trip (pipe, outside the spans)" if k == "worker_ipc" else k
        lines.append(f"| {label} | {v:.1f} | {v / n * 1000:.0f} | {v / total * 100 if total else 0:.1f}% |")
    slot_total = b.workers * b.span_s
    lines += ["", f"| the workers' time ({b.workers} x {b.span_s:.0f} s) | slot-seconds | per case ms | share |", "| --- | --- | --- | --- |"]
    for k, why in (("start-up", "sizing, worker start, first draw"), ("in the worker", "running cases"),
                   ("between cases", "waiting on the driver: drawing, judging, store, folders"),
                   ("after its last case", "drawing stopped: minimizing, then shutdown")):
        v = b.slot_time.get(k, 0.0)
        lines.append(f"| {k} ({why}) | {v:.1f} | {v / n * 1000:.0f} | {v / slot_total * 100 if slot_total else 0:.1f}% |")
    if b.finish:
        names = {"work_end": "the budget's work end", "slots_done": "every slot ended", "pool_done": "the analysis pool ended"}
        lines += ["", "the finish: " + ", ".join(f"{names[k]} at {v:.1f} s" for k, v in b.finish.items())
                  + f", the run ended at {b.span_s:.1f} s (the summary and report.html follow)"]
    if b.graphs and b.siblings:
        per_graph = {k: b.stages.get(k, 0.0) / b.graphs * 1000 for k in ("compile_forward", "compile_backward")}
        lines += ["", "per compiled graph: " + ", ".join(f"{k} {v:.0f} ms" for k, v in per_graph.items())]
    lines += phase_table(b)
    if b.driver:
        lines += ["", "the driver's own time, summed over the slots' threads: "
                  + ", ".join(f"{k} {v:.1f} s ({v / n * 1000:.0f} ms per case)" for k, v in b.driver.items())]
    if b.analyses:
        a = b.analyses
        lines.append(f"analyses: {a['count']} run by {a['workers']} worker(s) (slots included once they stopped drawing), "
                     f"{a['filed']} filed, {a['seconds']:.0f} s in all"
                     + (f", {a['seconds'] / a['count']:.0f} s each" if a["count"] else ""))
    lines += analysis_phase_table(b)
    if b.worker_starts:
        lines.append("worker starts (this process's): " + ", ".join(f"{v} {k}" for k, v in sorted(b.worker_starts.items())))
    if b.pending_by_severity:
        lines.append("pending at the end: " + ", ".join(f"{v} {k}" for k, v in sorted(b.pending_by_severity.items())))
    if b.timings_file is None:
        lines.append("(no timings file beside the store: start-up counts from the run's start, no driver or analysis figures)")
    return "\n".join(lines)


# An analysis's phases (`divfuzz.fuzzer.triage.phase_clock.PhaseTally` names), in the order they run.
ANALYSIS_PHASE_ORDER = ("first_pass/ladder", "first_pass/probes", "first_pass", "minimize", "ladder", "probes", "bisector", "other")


def _median(values) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return 0.0 if not n else (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)


def analysis_phase_table(b: Breakdown) -> list[str]:
    """The analyses' seconds and compiles by phase, then by rule, as markdown lines (their
    seconds add up to the analyses' walls), with each analysis's median wall and compiles;
    none for a timings file without phases."""
    if not b.analysis_walls:
        return []
    n = len(b.analysis_walls)
    total = sum(b.analysis_walls)
    lines = ["", f"analyses by phase: {n} with phases, median {_median(b.analysis_walls):.1f} s and "
             f"{_median(b.analysis_compiles):.0f} compiles each, {sum(b.analysis_compiles) / n:.1f} compiles on average",
             "", "| analysis phase | seconds | compiles | per analysis s | share |", "| --- | --- | --- | --- | --- |"]
    names = [k for k in ANALYSIS_PHASE_ORDER if k in b.analysis_phases] + sorted(
        k for k in b.analysis_phases if k not in ANALYSIS_PHASE_ORDER)
    for k in names:
        ph = b.analysis_phases[k]
        lines.append(f"| {k} | {ph['s']:.1f} | {ph['compiles']} | {ph['s'] / n:.1f} | {ph['s'] / total * 100 if total else 0:.1f}% |")
    lines.append(f"| all | {sum(ph['s'] for ph in b.analysis_phases.values()):.1f} | {sum(b.analysis_compiles)} | {total / n:.1f} | 100% |")
    lines += ["", "| analyses by rule | count | seconds | compiles | per analysis s |", "| --- | --- | --- | --- | --- |"]
    for rule, r in sorted(b.analysis_rules.items(), key=lambda kv: -kv[1]["s"]):
        lines.append(f"| {rule} | {r['count']} | {r['s']:.1f} | {r['compiles']} | {r['s'] / r['count']:.1f} |")
    return lines


# What each phase holds, for the table's first column.
PHASE_LABELS = {
    "dynamo": "Dynamo (bytecode tracing, guards)",
    "aot_autograd": "AOTAutograd (joint graph, partition, lazy backward)",
    "inductor": "Inductor (passes, lowering, scheduling, codegen, module load)",
    "backend_compile": "backend compile (C++ compiler on the CPU, Triton/ptxas on a GPU)",
    "autotune": "autotuning (Triton configs timed on the device)",
    "other": "other (first forward/backward runs, Dynamo's frame entry, divfuzz's session)",
}


def phase_table(b: Breakdown) -> list[str]:
    """The compile's phases per compiled graph (`Breakdown.phase_ms_per_graph`) as markdown lines,
    with each one's share of the compile spans; none for a store without them."""
    per_graph = b.phase_ms_per_graph()
    if not per_graph:
        return []
    total = sum(per_graph.values())
    lines = ["", f"| the compile by phase (torch's timers), {b.graphs} compiled graphs | per compiled graph ms | share of the compile |",
             "| --- | --- | --- |"]
    for k, v in per_graph.items():
        lines.append(f"| {PHASE_LABELS.get(k, k)} | {v:.0f} | {v / total * 100 if total else 0:.1f}% |")
    return lines
