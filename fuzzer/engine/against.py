"""Compiler against compiler (`--against B`): one case run eagerly, in float64, compiled under A
(`--backend`) and compiled under B, judged A vs B, with fp64 saying which is further off.

The verdict's outputs are `judge_outputs(B, A, fp64)`: B takes eager's role and A compiled's, so
every oracle and policy reads them unchanged and a triage of compiled-worse means A is further
from fp64 than B. Eager stays a third point: each float output's RMSE vs fp64 for eager, A and
B is in `Verdict.against` (divfuzz.records.verdict.Against), with the judgement naming the compiler
further from fp64. A failure of either compiler is a verdict (its error, with the side named).
"""

from __future__ import annotations

import dataclasses

from divfuzz.fuzzer.engine.execute import single_thread, prepare_case, run_compiled
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.compare import compare_float
from divfuzz.oracles.judge import judge_outputs
from divfuzz.records.config import CompileConfig
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import Against, AgainstOutput, Verdict


def execute_against(spec: GraphSpec, device: str, config: CompileConfig, against: CompileConfig) -> Verdict:
    """Run one case under both compilers and judge A (`config`) against B (`against`)."""
    case = prepare_case(spec, device)
    if isinstance(case, Verdict):
        return case
    a_name, b_name = config.backend, against.backend
    a_out, failed = run_compiled(spec, case.device_type, config, case.inputs, case.cots, case.clock, span="compile")
    if failed is not None:
        return dataclasses.replace(failed, against=Against(a_name, b_name, "-", failed="backend"))
    b_out, failed = run_compiled(spec, case.device_type, against, case.inputs, case.cots, case.clock, span="compile_against")
    if failed is not None:
        return dataclasses.replace(failed, error_type=f"{b_name}: {failed.error_type}",
                                   against=Against(a_name, b_name, "-", failed="against"))
    with case.clock.span("oracles"), single_thread(case.device_type):
        verdicts = judge_outputs(b_out, a_out, case.reference, case.bounds, inputs=case.inputs)
        points = _three_points(case.eager, a_out, b_out, case.reference)
    status = Status.DIVERGED if any(v.differs for v in verdicts) else Status.OK
    judgement = further_from_fp64(points, a_name, b_name)
    return Verdict(status, outputs=tuple(verdicts), timings=tuple(case.clock.spans.items()),
                   against=Against(a_name, b_name, judgement, tuple(points)))


def _three_points(eager, a_out, b_out, reference) -> list[AgainstOutput]:
    """Per float output: eager's, A's and B's RMSE vs fp64 (from the same `compare_float` the
    oracles use), and which of A and B is further (its triage of A against B)."""
    a, b, ref = dict(a_out), dict(b_out), dict(reference)
    points = []
    for name, e in eager:
        if not e.is_floating_point() or name not in a or name not in b or a[name].shape != e.shape or b[name].shape != e.shape:
            continue
        ea = compare_float(e, a[name], ref[name])
        eb = compare_float(e, b[name], ref[name])
        ab = compare_float(b[name], a[name], ref[name])
        further = {"compiled-worse": "backend", "compiled-closer": "against", "equal": "equal"}.get(ab.triage, "same")
        rmse_eager = ea.rmse_eager or eb.rmse_eager
        points.append(AgainstOutput(name, rmse_eager,
                                    ea.rmse_compiled if ea.triage != "equal" else rmse_eager,
                                    eb.rmse_compiled if eb.triage != "equal" else rmse_eager, further))
    return points


def further_from_fp64(points: list[AgainstOutput], a_name: str, b_name: str) -> str:
    """The judgement: the backend further from fp64 on more outputs (ties: the larger summed RMSE
    ratio), "same" when neither is, "equal" when A and B agree bitwise on every output."""
    if all(p.further == "equal" for p in points):
        return "equal"
    a_worse = sum(p.further == "backend" for p in points)
    b_worse = sum(p.further == "against" for p in points)
    if a_worse != b_worse:
        return a_name if a_worse > b_worse else b_name
    ratio = sum(p.rmse_backend / max(p.rmse_against, 1e-300) - p.rmse_against / max(p.rmse_backend, 1e-300) for p in points)
    return a_name if ratio > 0 else b_name if ratio < 0 else "same"
