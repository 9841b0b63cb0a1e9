"""`divfuzz minimize CASE-ID|spec.json [--out DIR] [--repro-dir DIR]`, `divfuzz minimize --module
file.py:NAME [--repro-dir DIR]` and `divfuzz minimize --pending [--out DIR] [--budget]` (finish a
campaign's pending bucket analyses). `--out` is the campaign folder, as for `fuzz` and `report`.

A case (from the store of the campaign folder) or a spec file is minimized and attributed in a worker
process, and written as a bucket folder: spec.json, repro.py (culprit in its header),
report.md, analysis.json. Spec files are parsed as data (`load_spec`), never executed; a
`--module` file is the user's own code and is imported to call NAME().
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import (
    BACKEND_HELP,
    INDUCTOR_HELP,
    TIMEOUT,
    WORKERS,
    DivfuzzCommand,
    check_compile_options_early,
    check_device_early,
    load_spec_early,
    check_out_dir,
    compile_config,
    console,
    device_option,
    oracle_options,
    out,
    parse_budget,
    read_input,
    resolve_device,
)
from divfuzz.fuzzer.store.schema import resolve_store
from divfuzz.fuzzer.triage.module_ref import parse_module_ref
from divfuzz.records.backends import INDUCTOR, backend_of
from divfuzz.records.config import CompileConfig, parse_inductor_overrides
from divfuzz.records.errors import ConfigError
from divfuzz.records.numbers import parse_number
from divfuzz.reports.bucket_files import COMPILE_LOG, MINIMIZE_KEY_FILE

# `minimize --module --budget B`: B is a deadline for the whole command (the worker's phases check
# it before each step); the step in flight at B (one compile of a captured graph, or the capture
# itself, which always runs) gets at most this much more, after which the worker is killed (a user
# module that never returns included) and the command exits 2 saying which phase it was in.
MODULE_GRACE_S = 90.0
# Defaults for --budget. A module's budget covers loading, judging and capturing the whole model as
# well as the reductions, so it is larger than a spec's: on this 2-core CPU, seed 002's model
# reduced to 22 ops, not 6, when 120 s had to cover its capture too.
SPEC_DEFAULT_BUDGET = "120s"
MODULE_DEFAULT_BUDGET = "300s"
# `--module --oracle perf` bounds only its probes by the budget (`divfuzz.fuzzer.triage.module_perf`): its
# worker keeps the wider grace it has always had.
PERF_MODULE_GRACE_S = 300.0


@click.command("minimize", cls=DivfuzzCommand)
@click.argument("case", metavar="[CASE-ID|SPEC.json]", required=False)
@click.option("--module", "modules", multiple=True, metavar="FILE.py:NAME",
              help="Your own model instead: NAME() in FILE.py returns (model, args) or (model, args, kwargs) (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="The campaign folder whose store holds CASE-ID or the pending analyses, as for fuzz and report "
                   "[default: divfuzz-out].")
@click.option("--repro-dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Where the minimized case is written: repro.py, spec.json, report.md (with --module: capture.json "
                   "and a folder per root cause) [default: divfuzz-minimized].")
@click.option("--store", "store_dir", type=click.Path(file_okay=False, path_type=Path), default=None, hidden=True,
              help="Deprecated spelling of --out (the campaign folder).")
@device_option
@click.option("--budget", default=None, metavar="DURATION",
              help="Minimizer time budget: 120s for a spec or --pending; with --module 300s, a deadline for the whole "
                   "command (load, judgement and capture included), plus a stated grace.")
@click.option("--timeout", "timeout_s", type=TIMEOUT, default=300.0, show_default=True, help="Seconds per case run.")
@click.option("--autocast", type=click.Choice(["bfloat16", "float16"]), default=None, help="For --module: run NAME's model under autocast.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None, help="For --module: cast the model and float inputs to this dtype.")
@click.option("--train", is_flag=True, help="For --module: judge a training step (forward, loss, backward; gradients are outputs).")
@click.option("--backend", default=INDUCTOR, show_default=True, metavar="NAME", help=BACKEND_HELP)
@click.option("--inductor", multiple=True, metavar="KEY=VALUE", help=INDUCTOR_HELP)
@click.option("--pending", is_flag=True, help="Finish the bucket analyses a campaign left pending in its store (--out).")
@click.option("--workers", type=WORKERS, default="auto", show_default=True, help="For --pending: analysis workers, auto (sized from "
              "this host's cores, GPUs and free memory) or a count.")
@oracle_options
@click.pass_context
def minimize(ctx, case, modules, out_dir, repro_dir, store_dir, device, budget, timeout_s, autocast, dtype, train, backend, inductor,
             pending, workers, oracle, perf_margin):
    """Shrink a diverging case (or your own module) to a minimal repro and name its culprit."""
    campaign_dir, repro_dir = minimize_folders(case, out_dir=out_dir, repro_dir=repro_dir, store_dir=store_dir,
                                               pending=pending, modules=modules)
    if pending:
        if case or modules:
            raise ConfigError("--pending finishes a campaign's pending analyses: give no CASE-ID, spec or --module with it")
        explicit_backend = ctx.get_parameter_source("backend") is not click.core.ParameterSource.DEFAULT
        _finish_pending(campaign_dir, budget_s=parse_budget(budget or SPEC_DEFAULT_BUDGET), workers=workers, timeout_s=timeout_s,
                        cli_backend=backend if explicit_backend else None)
        return
    # First, before torch is imported: the output folder, the module files or the case, the device.
    check_out_dir(repro_dir, "--repro-dir", no_link=True)  # its writer refuses a link: said now, not after the work
    for ref in modules:
        parse_module_ref(ref)
    if modules and oracle != "perf" and (ctx.get_parameter_source("backend") is not click.core.ParameterSource.DEFAULT or inductor):
        # the numeric --module path ladders torch's own rungs (eager ... inductor) and judges Inductor's
        # defaults: a backend or a switch it would not use is refused, never silently dropped
        raise ConfigError("--module judges torch.compile's own ladder under Inductor's defaults (eager, aot_eager, "
                          "aot_eager_decomp_partition, inductor): --backend and --inductor apply to a spec or "
                          "--oracle perf; run the module without them")
    if not modules and not case:
        raise ConfigError("Expected a CASE-ID, a spec.json or --module FILE.py:NAME")
    case_text = None if modules or _is_case_id(case) else read_input(Path(case))
    if case_text is not None:
        load_spec_early(case_text, source=case)
    if not modules and _is_case_id(case):
        resolve_store(campaign_dir, purpose=f"for case {case}")
    check_compile_options_early(backend, inductor)
    check_device_early(device)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.engine.worker import Worker, WorkerTarget

    device = resolve_device(device)
    out_dir = repro_dir  # below: where this command writes
    if modules:
        worker = Worker(device)
        try:
            for i, ref in enumerate(modules):
                target = out_dir if len(modules) == 1 else out_dir / f"module-{i + 1}"
                budget_s = parse_budget(budget or MODULE_DEFAULT_BUDGET)
                if oracle == "perf":
                    _perf_module(worker, ref, target, device=device, autocast=autocast, dtype=dtype, train=train,
                                 margin=perf_margin, budget_s=budget_s, backend=backend, inductor=inductor)
                    continue
                mark = worker.output_mark()
                res = worker.call(
                    WorkerTarget.MINIMIZE_MODULE,
                    {"ref": ref, "device": device, "out_dir": str(target), "autocast": autocast, "dtype": dtype, "budget_s": budget_s, "train": train},
                    budget_s + MODULE_GRACE_S,
                )
                _keep_compile_log(target, worker.output_since(mark))
                if res.error and res.error.startswith("Timeout"):
                    raise ConfigError(_killed_at_deadline(ref, target, budget_s))
                if res.error:
                    raise ConfigError(f"--module {ref}: {res.error}")
                for line in res.value["verdict"]:
                    out.print(line, highlight=False)
                out.print(_phases_line(res.value.get("phases") or {}), highlight=False)
                cut = (res.value.get("phases") or {}).get("cut_by_budget") or []
                if not res.value["causes"] and cut:
                    out.print(f"{ref}: nothing minimized: --budget {budget_s:g} s was spent first ({cut[0]}); "
                              "a larger --budget goes further", highlight=False)
                elif not res.value["causes"]:
                    severity = (res.value.get("severity") or {}).get("severity")
                    notes = "; ".join(res.value.get("capture", {}).get("notes", []))
                    why = ("eager and compiled agree" if severity is None else
                           f"the divergence is {severity}, below suspect" if severity not in ("bug", "suspect") else
                           f"the whole model reads {severity}, but no captured graph differs at suspect or worse by itself")
                    out.print(f"{ref}: nothing to minimize: {why}" + (f" ({notes})" if notes else ""), highlight=False)
                for c in res.value["causes"]:
                    sev = (c.get("severity") or {}).get("severity", "-")
                    if c.get("reproduced") is False:
                        sev = f"not reproduced ({c.get('not_reproduced_why')}), judged {sev}"
                    out.print(f"{c['folder']}: {sev}: {c['ops_before']} -> {c['ops']} ops; {c['compared_to']} vs {c['rung']}: {c['summary']}", highlight=False)
                out.print(module_headline(res.value), highlight=False)
        except BaseException:
            worker.abort()
            raise
        finally:
            worker.stop()
        return
    spec, config = _load_case(case, campaign_dir, lambda path: case_text, cli_backend=backend)
    if not backend_of(backend).is_inductor or inductor:
        config = compile_config(backend, inductor, config.dynamic, config.mode)
    result = minimize_case(spec, device=device, config=config, budget_s=parse_budget(budget or SPEC_DEFAULT_BUDGET), timeout_s=timeout_s, out_dir=out_dir,
                           oracle=oracle, perf_margin=perf_margin)
    if result is None:
        out.print(f"{case}: no finding on {device} under {config.describe()}: nothing to minimize", highlight=False)
        return
    folder, analysis = result
    for line in analysis.notes():
        out.print(line, highlight=False)
    reason = analysis.reason
    out.print(f"severity: {reason.labelled()}" if reason else "severity: not judged (no verdict of the minimal spec)", highlight=False)
    out.print(f"written: {folder}/repro.py, report.md, spec.json", highlight=False)


def _keep_compile_log(target: Path, text: str) -> None:
    """What the compiler (and the user's module) printed in the worker, kept as `target/compile.log`."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.issue_folder import clipped_log

    if text.strip() and target.is_dir():
        (target / COMPILE_LOG).write_text(clipped_log(text))


DEFAULT_CAMPAIGN_DIR = Path("divfuzz-out")
DEFAULT_REPRO_DIR = Path("divfuzz-minimized")


def _is_case_id(case: str | None) -> bool:
    """A stored case's id (digits that name no file), not a spec file."""
    return bool(case) and case.isdigit() and not Path(case).exists()


def minimize_folders(case: str | None, *, out_dir: Path | None, repro_dir: Path | None, store_dir: Path | None,
                     pending: bool, modules) -> tuple[Path, Path]:
    """(the campaign folder read, the folder written). `--out` is the campaign folder, as for
    `fuzz` and `report`; `--repro-dir` the output. The old spellings still work, each with a note
    on stderr: `--store DIR` (the campaign folder, now `--out`), and `--out DIR` as the output
    folder, taken so where it cannot be the campaign folder: beside `--store`, or where no store is
    read (a spec file, `--module`) and `--repro-dir` is not given."""
    if store_dir is not None:
        console.print("note: minimize --store is deprecated: use --out DIR (the campaign folder, as for fuzz and report)",
                      highlight=False)
        if out_dir is not None and repro_dir is not None:
            raise ConfigError("--store, --out and --repro-dir: give --out (the campaign folder) and --repro-dir (the output)")
        if out_dir is not None:  # the old pair: --store the campaign, --out the output
            console.print("note: minimize --out as the output folder is deprecated: use --repro-dir DIR", highlight=False)
            return store_dir, out_dir
        return store_dir, repro_dir or DEFAULT_REPRO_DIR
    reads_store = pending or (not modules and _is_case_id(case))
    if out_dir is not None and repro_dir is None and not reads_store:
        console.print(f"note: minimize --out {out_dir} read as the output folder (no store is read here); that spelling is "
                      "deprecated: use --repro-dir DIR (--out names the campaign folder, as for fuzz and report)", highlight=False)
        return DEFAULT_CAMPAIGN_DIR, out_dir
    return out_dir or DEFAULT_CAMPAIGN_DIR, repro_dir or DEFAULT_REPRO_DIR


def module_headline(value: dict) -> str:
    """One answer per model: the severity the evidence supports, and why when the whole model's
    judgement and its reduced causes disagree. A reduced, reproduced cause is the stronger evidence
    (it isolates the difference and was tried against the precision knobs); a cause that did not
    reproduce is no evidence. A bug headline always has a repro that exits 1, except where the
    difference lies outside every captured graph, and then it says so and names the graph breaks:
    a whole model that reads bug with no repro for another reason (a cause that did not reproduce,
    a budget spent first) is headlined suspect, with the reason."""
    whole = value.get("severity") or {}
    whole_sev = whole.get("severity")
    causes = [c for c in value.get("causes") or [] if c.get("reproduced") is not False and c.get("severity")]
    if not causes:
        if whole_sev in ("bug", "suspect"):
            lost = len(value.get("causes") or [])
            cut = (value.get("phases") or {}).get("cut_by_budget")
            if lost or cut:
                why = (f"{lost} cause folder(s) did not reproduce" if lost else
                       "nothing reduced: --budget was spent first (a larger --budget goes further)")
                if whole_sev == "bug":
                    return f"headline: suspect: the whole model reads bug ({whole.get('rule', '-')}), but no repro shows it: {why}"
                return f"headline: suspect (the whole model only): {why}"
            explained = _explained_by_its_graphs(value.get("capture") or {})
            if explained:
                return explained
            return f"headline: {whole_sev} (the whole model only): {_outside_the_graphs(value.get('capture') or {})}"
        return f"headline: {whole_sev or 'none'}"
    order = ("bug", "suspect", "by-design", "noise", "eager-worse")
    worst = min(causes, key=lambda c: order.index(c["severity"]["severity"]))
    sev = worst["severity"]["severity"]
    if sev == whole_sev:
        return f"headline: {sev}"
    return (f"headline: {sev}: the whole model reads {whole_sev or 'none'} ({whole.get('rule', '-')}), its reduced cause "
            f"{worst['folder']} reads {sev} ({worst['severity']['rule']}: {worst['summary']}); the reduced, reproduced graph "
            f"is the stronger evidence")


def _explained_by_its_graphs(capture: dict) -> str | None:
    """The headline of a model that reads suspect or worse as a whole while it is one captured graph
    with no graph break (the graph is the whole model) and that graph, judged by itself, reads
    below suspect because a mechanism explains it (the whole model's Python run cannot run the
    experiment; its graph can): the graph's severity, with the mechanism. None otherwise."""
    explained = capture.get("explained_graphs") or []
    if capture.get("graph_breaks") or len(capture.get("graphs") or []) != 1 or len(explained) != 1:
        return None
    graph = explained[0]
    whole = capture.get("severity") or {}
    return (f"headline: {graph['severity']}: the whole model reads {whole.get('severity', 'none')} ({whole.get('rule', '-')}), "
            f"and its one captured graph, the whole model with no graph break, reads {graph['severity']} "
            f"({graph['rule']}), explained by {graph['mechanism']}")


def _outside_the_graphs(capture: dict) -> str:
    """Where a difference no captured graph reproduces by itself lies: between the graph breaks
    (named, with their source lines) or, with none, outside what Dynamo hands the compiler."""
    breaks = capture.get("break_reasons") or []
    if capture.get("graph_breaks") and breaks:
        shown = "; ".join(str(b) for b in breaks[:3]) + (f"; and {len(breaks) - 3} more" if len(breaks) > 3 else "")
        return (f"no captured graph reproduces it by itself: the difference lies in the code between the "
                f"{capture['graph_breaks']} graph break(s), which runs eagerly ({shown})")
    return ("no captured graph reproduces it by itself (the difference lies outside the graphs Dynamo hands the "
            "compiler: gradients taken inside the forward, code Dynamo runs eagerly)")


def _phases_line(timing: dict) -> str:
    """One line: the command's total against its budget, then the seconds of each phase."""
    phases = ", ".join(f"{k} {v:g} s" for k, v in (timing.get("phases_s") or {}).items())
    return f"time: {timing.get('total_s', 0):g} s of --budget {timing.get('budget_s', 0):g} s ({phases})"


def _killed_at_deadline(ref: str, target: Path, budget_s: float) -> str:
    """The error of a worker killed at the budget plus the grace: the phase it was in (from the
    `phases.json` it kept up to date), the time each phase took and the cause folders already
    written (each holds a repro of the graph reduced so far)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.triage.phase_clock import read_progress

    msg = f"--module {ref}: not done within --budget {budget_s:g} s plus {MODULE_GRACE_S:g} s of grace; the worker was killed"
    progress = read_progress(target / "phases.json")
    if progress is None:
        return msg + " before the user module's case was loaded (does NAME() or the model return?)"
    done = ", ".join(f"{k} {v:g} s" for k, v in (progress.get("phases_s") or {}).items()) or "none"
    msg += f" during {progress.get('in_flight') or 'no phase'} (does NAME() or the model return?); phases done before: {done}"
    folders = sorted(str(p.parent) for p in target.glob("*/repro.py"))
    if folders:
        msg += "; repros written so far (culprit not attributed unless culprit.json says so): " + ", ".join(folders)
    return msg


def _finish_pending(campaign_dir: Path, *, budget_s: float, workers: int, timeout_s: float, cli_backend: str | None) -> None:
    """`--pending`: the campaign's open analyses, filed into its buckets (`divfuzz.fuzzer.campaign.pending.finish_pending`)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.pending import finish_pending

    done = finish_pending(campaign_dir, budget_s=budget_s, workers=workers, timeout_s=timeout_s, cli_backend=cli_backend,
                          log=lambda line: out.print(line, highlight=False))
    out.print(f"{len(done.filed)} pending analys{'is' if len(done.filed) == 1 else 'es'} filed; {done.left} still pending"
              + (" (--budget ran out: run it again to go on)" if done.left else ""), highlight=False)


def _load_case(case: str, store_dir: Path, read, *, cli_backend: str | None = None):
    """The spec and compile config of a stored case or a spec file.

    A stored config is data: it is checked like command-line input, and its backend is used only
    when it is a registered torch backend or the `module:function` the user passed as --backend.
    """
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store
    from divfuzz.fuzzer.engine.compile import check_stored_backend, validate_inductor_overrides
    from divfuzz.generators.validate import load_spec

    if _is_case_id(case):
        path = resolve_store(store_dir, purpose=f"for case {case}")

        case_id = parse_number(case, "CASE-ID", low=1, high=2**63 - 1, integer=True)
        store = Store(path, create=False)
        try:
            row = store.case(case_id)
        finally:
            store.close()
        # A store travels (merge takes shards from many hosts): its config is untrusted, checked
        # against the Inductor switches anyone may set before it reaches a worker or a repro.py.
        config = CompileConfig.from_dict(row.config, where=f"the stored config of case {case} in {path}")
        check_stored_backend(config.backend, cli_backend, source=f"case {case} in {path}")
        validate_inductor_overrides(dict(config.inductor), where=f"the stored config of case {case} in {path}")
        return load_spec(row.spec_json, source=f"case {case}"), config
    return load_spec(read(Path(case)), source=case), CompileConfig()


def _perf_module(worker, ref: str, target: Path, *, device: str, autocast, dtype, train: bool, margin, budget_s: float,
                 backend: str, inductor: tuple[str, ...]) -> None:
    """`--module --oracle perf`: time the model and probe the scheduling switches in the worker."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.engine.compile import resolve_backend
    from divfuzz.fuzzer.engine.worker import WorkerTarget

    resolve_backend(backend)
    res = worker.call(
        WorkerTarget.PERF_MODULE,
        {"ref": ref, "device": device, "out_dir": str(target), "autocast": autocast, "dtype": dtype, "train": train,
         "margin": margin, "budget_s": budget_s, "backend": backend, "inductor": parse_inductor_overrides(inductor)},
        budget_s + PERF_MODULE_GRACE_S,
    )
    if res.error:
        raise ConfigError(f"--module {ref} --oracle perf: {res.error}")
    for line in res.value["verdict"]:
        out.print(line, highlight=False)
    out.print(f"written: {target}/perf.json, report.md", highlight=False)


def minimize_case(spec, *, device: str, config, budget_s: float, timeout_s: float, out_dir: Path, oracle: str = "numeric",
                  perf_margin: float | None = None):
    """Run, minimize, attribute and write one case; None when it shows no finding."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.triage.analysis import write_bucket
    from divfuzz.fuzzer.engine.bucketing import root_cause_key
    from divfuzz.fuzzer.finding.judgement import judge
    from divfuzz.fuzzer.engine.environment import environment_versions
    from divfuzz.fuzzer.triage.analysis import analyze_finding
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker

    worker = Worker(device)
    try:
        verdict = worker.run(CaseRequest(spec, device, config, oracle=oracle, perf_margin=perf_margin), timeout_s)
        judged = judge(verdict, spec=spec, device=device)  # the one judgement, as a campaign's case gets it
        if judged.key is None:
            return None
        analysis = analyze_finding(spec, worker=worker, device=device, config=config, kind=judged.finding.kind.value,
                                   budget_s=budget_s, timeout_s=timeout_s, oracle=oracle, perf_margin=perf_margin,
                                   case_verdict=verdict)
    except BaseException:  # a signal (divfuzz.fuzzer.cli.interrupts) or an error: the case in flight is not waited for
        worker.abort()
        raise
    finally:
        worker.stop()
    key = root_cause_key(judged.key, analysis.spec, analysis.culprit.key())
    folder = write_bucket(out_dir, bucket_id=1, key=key, analysis=analysis, device=device, config=config,
                          fallback_verdict=verdict, case_id=None, timeout_s=int(timeout_s),
                          versions=environment_versions(device), compile_log=worker.output_since(0))
    (folder / MINIMIZE_KEY_FILE).write_text(json.dumps({"key": key.to_dict(), "str": str(key)}, indent=2) + "\n")
    return folder, analysis
