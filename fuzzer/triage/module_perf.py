"""`divfuzz minimize --module file.py:NAME --oracle perf`: is a user's model slower compiled, and
which Inductor scheduling switch makes it so?

Runs inside a worker (`Worker.call` -> `perf_module_in_worker`), like `divfuzz.fuzzer.triage.user_module`,
and shares its loading and step logic (`divfuzz.fuzzer.triage.capture`: `normalize_case`, `prepare_model`,
`ModelStep`). Steps:
1. time the model eager and compiled (`torch.compile` through `divfuzz.fuzzer.engine.compile.compiled`),
   interleaved call by call (`divfuzz.oracles.timing`): the forward, and with `--train` the training step
   (forward, loss, backward); judged by `divfuzz.oracles.perf` (paired ratios, their interval, the margin);
2. compile again with each scheduling switch of
   `divfuzz.fuzzer.triage.attribute.PERF_PROBES` set alone (within the budget) and time each against eager:
   each is reported against eager and against the default compile; when compiled is slower,
   the switch whose flip makes it no longer slower, fastest first, is the culprit;
3. write `perf.json` (every timing, probe and the culprit) and `report.md` into the out folder.
The whole model is timed, not a reduced graph: cutting a model's graph changes what the scheduler
fuses, which is the very thing under test; the probes name the switch instead.
Invariant: eager and every compiled variant run on the same inputs and parameters, in one process.
"""

from __future__ import annotations

import json
from pathlib import Path

from divfuzz.fuzzer.triage.attribute import PERF_PROBES, available_probes
from divfuzz.oracles.perf import DEFAULT_MARGIN, is_slower
from divfuzz.fuzzer.finding.judgement import judge
from divfuzz.oracles.severity_policy import verdict_lines_of
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import PerfComparison, Verdict
from divfuzz.fuzzer.triage.capture import ModelStep, normalize_case, prepare_model
from divfuzz.records.backends import INDUCTOR, backend_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.deadline import Deadline

PHASE_BUDGET_S = 20.0


def _phases(run, model, forward, args, kwargs) -> dict:
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    if not run.train:
        def fwd():
            with torch.no_grad():
                return forward(*args, **kwargs)
        return {"fwd": fwd}
    return {"fwd": lambda: forward(*args, **kwargs), "fwd+bwd": lambda: run._step(model, forward, args, kwargs)}


def _time(timer, eager: dict, other: dict, *, margin: float, device: str, dtype: str) -> tuple[PerfComparison, ...]:
    """Each phase warmed up, then timed like a case's (`divfuzz.fuzzer.engine.execute_perf.time_phase`)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    from divfuzz.fuzzer.engine.execute_perf import time_phase
    from divfuzz.oracles.timing import timer_description

    result = []
    for phase in eager:
        for _ in range(3):
            eager[phase]()
            other[phase]()
        result.append(time_phase(timer, phase, eager[phase], other[phase], margin=margin, dtype=dtype, overhead_s=0.0,
                                 timer_text=timer_description(device, torch.get_num_threads()), device=device,
                                 budget_s=PHASE_BUDGET_S))
    return tuple(result)


def perf_module_in_worker(*, ref: str, device: str, out_dir: str, autocast: str | None = None, dtype: str | None = None,
                          train: bool = False, margin: float | None = None, budget_s: float = 300.0,
                          backend: str = INDUCTOR, inductor: dict | None = None) -> dict:
    """Time the user's model eager vs compiled, probe the scheduling switches when it is slower,
    write perf.json and report.md; returns a JSON-able summary."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch
    import torch.utils._pytree as pytree

    from divfuzz.fuzzer.engine.compile import compiled
    from divfuzz.fuzzer.triage.user_module import load_user_module
    from divfuzz.oracles.timing import Timer

    deadline = Deadline.after(budget_s)
    margin = DEFAULT_MARGIN[device.split(":")[0]] if margin is None else margin
    model, args, kwargs = normalize_case(load_user_module(ref), ref)
    model, args, kwargs = prepare_model(model, args, kwargs, device, dtype)
    if train:
        args, kwargs = pytree.tree_map(
            lambda x: x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, (args, kwargs))
    run = ModelStep(model, args, kwargs, device=device, autocast=autocast, train=train)
    leaves = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    params = [p for p in model.parameters()] if isinstance(model, torch.nn.Module) else []
    data_dtype = str((params or leaves or [torch.empty(0)])[0].dtype).removeprefix("torch.")
    eager = _phases(run, model, run.forward_fn(model), args, kwargs)
    timer = Timer(device)
    config = CompileConfig(backend=backend).with_inductor(**(inductor or {}))

    def timed(cfg: CompileConfig) -> tuple[PerfComparison, ...]:
        with compiled(run.forward_fn(model), cfg, timed=True) as fast:
            return _time(timer, eager, _phases(run, model, fast, args, kwargs), margin=margin, device=device, dtype=data_dtype)

    phases = timed(config)
    verdict = Verdict(Status.DIVERGED if any(is_slower(p) for p in phases) else Status.OK, perf=phases)
    probes: list[dict] = []
    if backend_of(backend).is_inductor:  # also when not slower: which switch would make it faster is worth knowing
        for key, value in available_probes(device, PERF_PROBES):
            if deadline.expired():
                probes.append({"knob": key, "value": value, "skipped": "out of --budget"})
                continue
            try:
                got = timed(config.with_inductor(**{key: value}))
            except Exception as e:  # a switch this model cannot compile with says nothing about the slowdown
                probes.append({"knob": key, "value": value, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                continue
            probes.append({"knob": key, "value": value, "slower": any(is_slower(p) for p in got),
                           "phases": [p.to_dict() for p in got]})
    fixes = sorted((p for p in probes if p.get("slower") is False),
                   key=lambda p: max(q["ratio"] for q in p["phases"]))
    culprit = ""
    if verdict.status == Status.DIVERGED:
        culprit = f"inductor: {fixes[0]['knob']} removes it" if fixes else ("inductor (no single switch removes it)" if probes else "")
    # Probes are compared with the default compile through their ratios to eager, each measured
    # interleaved with eager: GPU clocks ramping between the two compiles cancel out.
    default_ratio = {p.phase: p.ratio for p in phases}
    reason = judge(verdict, switch=fixes[0]["knob"] if fixes and verdict.status == Status.DIVERGED else None).reason
    lines = verdict_lines_of(verdict)[:-1] + [f"severity: {reason}" if reason else "severity: none (compiled is not slower)"]
    for p in probes:
        if "phases" in p:
            ratios = ", ".join(f"{q['phase']} {q['ratio']:.2f}x eager, {q['ratio'] / default_ratio[q['phase']]:.2f}x default compiled"
                               for q in p["phases"])
            lines.append(f"probe {p['knob']}={p['value']!r}: {'still slower' if p['slower'] else 'not slower'} ({ratios})")
        else:
            lines.append(f"probe {p['knob']}={p['value']!r}: {p.get('error') or p.get('skipped')}")
    if culprit:
        lines.append(f"culprit: {culprit}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {"module": ref, "device": device, "train": train, "autocast": autocast, "dtype": dtype, "margin": margin,
              "config": config.to_dict(), "verdict": verdict.to_dict(), "probes": probes, "culprit": culprit,
              "severity": reason.to_dict() if reason else None}
    (out / "perf.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "report.md").write_text(_report(ref, device, lines))
    return {"verdict": lines, "severity": record["severity"], "culprit": culprit, "probes": probes, "causes": []}


def _report(ref: str, device: str, lines: list[str]) -> str:
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    body = "\n".join(f"- {line}" for line in lines)
    gpu = f" ({torch.cuda.get_device_name()})" if device.startswith("cuda") else ""
    return (f"# torch.compile vs eager timing: {ref}\n\n- torch {torch.__version__}, device {device}{gpu}\n\n{body}\n\n"
            "Timings are medians of paired, interleaved calls; intervals are distribution-free 95% intervals of the "
            "median compiled/eager ratio (divfuzz `divfuzz.oracles.perf`). Reproduce with `divfuzz minimize --module "
            f"{ref} --oracle perf`.\n")
