"""`divfuzz fuzz`: run a campaign with a live view or plain progress lines, then print its buckets by severity."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from divfuzz.fuzzer.cli.interrupts import stop_on_signals
from divfuzz.fuzzer.engine import warm_template
from divfuzz.fuzzer.cli.options import (
    SEVERITY_CHOICE,
    CASE_COUNT,
    SEED,
    TIMEOUT,
    WORKERS,
    WORKERS_HELP,
    DivfuzzCommand,
    WorkersType,
    against_compile_config,
    check_backend_capabilities,
    check_compile_options_early,
    check_device_early,
    check_out_dir,
    compile_config,
    compile_options,
    console,
    device_option,
    oracle_options,
    names_option,
    out,
    parse_budget,
    registered_ops,
    resolve_device,
)
from divfuzz.generators.input_siblings import DEFAULT_INPUTS_PER_COMPILE, MAX_INPUTS_PER_COMPILE
from divfuzz.records.config import check_backend_syntax
from divfuzz.records.errors import ConfigError, OutputError
from divfuzz.records.severity import ORDER
from divfuzz.records.safe_paths import remove_made



@click.command(cls=DivfuzzCommand)
@device_option
@click.option("--budget", default=None, metavar="DURATION",
              help="Wall-clock budget, minimization included, e.g. 90s, 10m, 8h (default 10m unless --max-cases).")
@click.option("--max-cases", type=CASE_COUNT, default=None, help="Stop after this many cases.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the draws: the same seed draws the same graphs.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True,
              metavar="DIR", help="The campaign folder: its store, bucket folders and report.html (a re-run resumes it).")
@click.option("--workers", type=WORKERS, default="auto", show_default=True, help=WORKERS_HELP)
@click.option("--timeout", "timeout_s", type=TIMEOUT, default=300.0, show_default=True, help="Seconds per case.")
@click.option("--max-ops", type=click.IntRange(1, 40), default=12, show_default=True, metavar="N", help="Most ops in a drawn graph (1 to 40).")
@click.option("--strict", is_flag=True, help="Bucket every fp32 bit difference, not only compiled-worse ones.")
@click.option("--ops", default=None, metavar="OP,...", help="Comma-separated op names to draw from (default: all).")
@click.option("--dtypes", default=None, metavar="DTYPE,...", help="Comma-separated data dtypes: float32, bfloat16, float16 (default: all).")
@click.option("--no-live", is_flag=True, help="No live view (plain progress lines).")
@click.option("--no-minimize", is_flag=True, help="Do not minimize and attribute new buckets.")
@click.option("--analysis-workers", type=WorkersType(minimum=0), default="auto", show_default=True,
              help="Workers that minimize and attribute new buckets beside the fuzzing ones: auto (fuzzing keeps at "
                   "least 70% of the worker processes), a count, or 0 (analyse inline, in the fuzzing worker).")
@click.option("--min-severity", type=SEVERITY_CHOICE, default="noise", show_default=True, help="Hide buckets below this severity in the summary.")
@click.option("--replay-known", is_flag=True,
              help="First re-run every known bucket's minimal spec in this run, so `divfuzz diff` can tell fixed from not reached.")
@click.option("--against", default=None, metavar="BACKEND", help="Judge --backend against this second compiler (and both against fp64).")
@click.option("--unguarded-casts", is_flag=True,
              help="Draw float->integer casts without their guard (NaN to 0, clamped to range): undefined casts, filed as such, not as findings.")
@click.option("--inputs-per-compile", type=click.IntRange(1, MAX_INPUTS_PER_COMPILE), default=None, metavar="N",
              help=f"Inputs each compiled graph runs on: the drawn recipe, then others through the same compile, each a "
                   f"case of its own (default {DEFAULT_INPUTS_PER_COMPILE}; 1 with --oracle perf or --against).")
@click.option("--cluster", "cluster_address", default=None, metavar="ADDRESS",
              help="Run the slots' cases on a Dask cluster (tcp://host:8786); needs divfuzz[cluster].")
@click.option("--cluster-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The same, from a Dask scheduler file (scheduler.json).")
@oracle_options
@compile_options
def fuzz(device, budget, max_cases, seed, out_dir, workers, timeout_s, max_ops, strict, ops, dtypes, no_live, no_minimize, analysis_workers,
         min_severity, replay_known, against, unguarded_casts, inputs_per_compile, cluster_address, cluster_file, oracle, perf_margin,
         backend, inductor, dynamic, mode):
    """Run a campaign: draw graphs, compare eager and compiled, bucket what diverges."""
    started = time.monotonic()  # --budget counts from here: sizing and start-up are inside it
    # First, before torch is imported and before the workers' template starts: what the options say.
    budget_s = parse_budget(budget) if budget else (None if max_cases else 600.0)
    op_names = names_option(ops, "--ops", known=registered_ops())
    dtype_names = names_option(dtypes, "--dtypes", known=("float32", "bfloat16", "float16"))
    check_compile_options_early(backend, inductor)
    if against is not None:
        check_backend_syntax(against, where="--against")
    if cluster_address is None and cluster_file is None:  # a fleet's nodes have the GPUs, not the driver
        check_device_early(device)
    check_out_dir(out_dir, "--out")
    if cluster_address is None and cluster_file is None:
        warm_template.start_in_background(str(device))  # the workers' template imports torch beside the driver
    cluster = _cluster_address(cluster_address, cluster_file, replay_known)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign import campaign_options, loop
    from divfuzz.fuzzer.store import STORE_NAME

    device = resolve_device(device) if cluster is None else device  # on a fleet the nodes have the GPUs, not the driver
    config = compile_config(backend, inductor, dynamic, mode)
    against_config = against_compile_config(against, config)
    check_backend_capabilities(config, against_config, op_names, dtype_names)
    if against_config is not None:
        if oracle == "perf":
            raise ConfigError("--against with --oracle perf: compiler against compiler is judged on numbers only")
        no_minimize = True  # the minimizer judges eager vs compiled; A-vs-B buckets keep the case as drawn
    fleet = None
    # Sized from this host or fleet: a resume keeps the run's own count (perf: one per device, always).
    workers_chosen_here = workers == "auto" and oracle != "perf"
    if cluster is not None:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.campaign.cluster import Fleet

        fleet = Fleet.connect(cluster, device, None if workers == "auto" else workers, minimize=not no_minimize)
        device, workers = fleet.device, len(fleet.plans)
        workers_reason = fleet.describe(None if analysis_workers == "auto" else analysis_workers)
        shared = [name for name in {p.where.name for p in fleet.plans} if sum(p.where.name == name for p in fleet.plans) > 1]
        if oracle == "perf" and shared:  # as on one host: timings need their device alone
            fleet.close()

            raise ConfigError(f"--cluster with --oracle perf: timings need the device alone, but {sorted(shared)[0]} has "
                              "several slots (start one Dask worker thread per GPU, or pass --workers)")
    else:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.campaign.sizing import resolve_workers

        workers, workers_reason = resolve_workers(workers, device, oracle)
    inputs_chosen_here = inputs_per_compile is None  # campaign_options.build picks divfuzz's default
    opts = campaign_options.build(
        device=device,
        out_dir=out_dir,
        config=config,
        seed=seed,
        budget_s=budget_s,
        max_cases=max_cases,
        workers=workers,
        strict=strict,
        timeout_s=timeout_s,
        max_ops=max_ops,
        minimize=not no_minimize,
        analysis_workers=None if analysis_workers == "auto" else analysis_workers,
        ops=op_names,
        dtypes=dtype_names,
        oracle=oracle,
        perf_margin=perf_margin,
        against=against_config,
        unguarded_casts=unguarded_casts,
        inputs_per_compile=inputs_per_compile,
        budget_from=started,
    )
    if (out_dir / STORE_NAME).exists():
        # Checked before it is read (the resume's runs, the known specs) and before the campaign
        # takes the lock or records a run: a file that is not a divfuzz store is refused untouched;
        # a store of an older schema is upgraded here, by this writing command, once checked
        # (the readers below open it read-only and refuse an older one).
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.store import Store

        Store(out_dir / STORE_NAME, create=False, read_only=False).close()
    free = ({"workers"} if workers_chosen_here else set()) | (
        {"inputs_per_compile"} if inputs_chosen_here and opts.inputs_per_compile != 1 else set())
    resumed = _resumable_run(out_dir / STORE_NAME, opts, free) if free else None
    if resumed is not None:
        run_id, chosen = resumed
        if chosen["workers"] != opts.workers:
            count = chosen["workers"]
            if fleet is not None:
                fleet.replan(count)
            workers, workers_reason = count, f"{count} worker{'s' if count != 1 else ''} (resuming run {run_id}, which ran with {count})"
        opts = replace(opts, **chosen)
    # Read and checked before the run starts: a stored spec that does not load exits 2, store untouched.
    known = _known_specs(out_dir / STORE_NAME) if replay_known else None
    stop_on_signals()  # again: the campaign turns the KeyboardInterrupt into a saved, resumable stop
    bounds = ([f"budget {int(budget_s)} s, minimization included"] if budget_s else []) + (
        [f"max {max_cases} cases"] if max_cases else [])
    console.print(
        f"divfuzz fuzz: device {device}, {workers_reason}, backend {config.describe()}{' against ' + against_config.describe() if against_config else ''}, oracle {oracle}, seed {seed}, "
        + "".join(f"{b}, " for b in bounds) + f"store {out_dir / STORE_NAME}",
        highlight=False,
    )
    if known is not None:
        console.print(f"--replay-known: {len(known)} known spec(s) of {out_dir / STORE_NAME} run first", highlight=False)
    live_view = _LiveView(opts, fleet) if not no_live and console.is_terminal else _LineView(opts, fleet)
    made = [p for p in reversed([out_dir, *out_dir.parents]) if not p.exists()]
    lock_path, store_path = out_dir / "divfuzz.lock", out_dir / STORE_NAME
    lock_existed, store_existed = lock_path.exists(), store_path.exists()
    try:
        with live_view:
            result = loop.run_campaign(opts, on_progress=live_view.update, before_slots=_replayer(known), fleet=fleet)
    except BaseException:
        if not store_existed and not store_path.exists():  # refused before a store was made: leave no trace
            remove_made(made, None if lock_existed else lock_path)
        raise
    finally:
        if fleet is not None:
            console.print(fleet.progress_line(), highlight=False)
            for line in fleet.lost_report():
                console.print(line, highlight=False)
            fleet.close()
    _print_summary(result, min_severity)
    _write_report_html(result.store_path, out_dir / "report.html")
    if result.interrupted:
        console.print(
            f"[bold yellow]interrupted:[/] {result.progress.cases} cases stored; run the same command again to resume",
            markup=True,
        )
        sys.exit(2)


def _cluster_address(address: str | None, scheduler_file: Path | None, replay_known: bool) -> str | None:
    """The scheduler address of --cluster or --cluster-file, checked (exit 2 naming what is wrong),
    and Dask importable (else exit 2 naming the extra); None without either. The options are
    checked before Dask is imported, so a wrong one is named on a host without the extra too."""
    if address is None and scheduler_file is None:
        return None
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.cluster import check_address, import_distributed, read_scheduler_file

    if address is not None and scheduler_file is not None:
        raise ConfigError("--cluster and --cluster-file: give one of them")
    if replay_known:
        raise ConfigError("--replay-known with --cluster: known specs are replayed on one host (run it without --cluster)")
    if scheduler_file is not None:  # a FIFO or a device is refused, never waited on
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.records.safe_paths import check_plain

        if not check_plain(scheduler_file.resolve() if scheduler_file.exists() else scheduler_file, what="--cluster-file"):
            raise ConfigError(f"--cluster-file {scheduler_file}: no such file")
    checked = check_address(address) if address is not None else read_scheduler_file(scheduler_file)
    import_distributed()
    return checked


def _known_specs(store_path: Path):
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.replay_known import known_specs

    return known_specs(store_path)


def _replayer(known):
    """What the campaign runs before its slots: the known specs (`divfuzz.fuzzer.campaign.replay_known`), or nothing."""
    if known is None:
        return None
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.replay_known import replay_known

    return lambda campaign: replay_known(campaign, known)


def _resumable_run(store_path: Path, opts, free: set[str]) -> tuple[int, dict] | None:
    """(run id, its values of the `free` options) of the newest unfinished run in the store that
    differs from `opts` only in those, or None. Free are the options the user left to divfuzz:
    with `--workers auto` (or a fleet's own slot count) the count can change between a run and its
    resume (another host, a node lost), and a run from before `--inputs-per-compile` (none stored:
    1) or with another default ran its own number; the same seed and the same values give the same
    cases, so the resume takes the run's values instead of starting anew. A stored value that is
    not a valid one (the store is untrusted data) makes the run not resumable this way."""
    if not store_path.is_file():
        return None
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store

    # As stored (JSON: tuples read back as lists), without the free options.
    identity = json.loads(json.dumps({k: v for k, v in opts.identity().items() if k not in free}))
    store = Store(store_path, create=False)
    try:
        runs = store.unfinished_runs(seed=opts.seed, device=opts.device, config=opts.config.to_dict())
    finally:
        store.close()
    for run_id, options in runs:
        chosen = {"workers": options.get("workers", opts.workers) if "workers" in free else opts.workers,
                  "inputs_per_compile": options.get("inputs_per_compile", 1) if "inputs_per_compile" in free else opts.inputs_per_compile}
        valid = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in chosen.values()) and \
            chosen["inputs_per_compile"] <= MAX_INPUTS_PER_COMPILE
        if valid and {k: v for k, v in options.items() if k not in free} == identity:
            return run_id, chosen
    return None


def _write_report_html(store_path: Path, html_path: Path) -> None:
    """`report.html` beside the store: not writing it is divfuzz's own error (exit 2), never skipped."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.cli.report_command import write_report_html
    from divfuzz.fuzzer.store import Store

    from divfuzz.reports.kill_points import kill_point

    store = Store(store_path, create=False)
    try:
        kill_point("report")
        write_report_html(store, html_path)
    except OSError as e:
        raise OutputError(f"{html_path}: could not write the HTML report ({e.strerror or e})") from e
    finally:
        store.close()
    console.print(f"report: {html_path}", highlight=False)


class _LineView:
    """Progress as plain lines (CI logs, pipes): one every 10 cases."""

    def __init__(self, opts, fleet=None):
        self.opts = opts
        self.fleet = fleet  # a Dask fleet: its line of workers by node and GPU

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, p) -> None:
        # Every 10 cases, and once more when only the analyses move (the end of a run waits on
        # them): never the same line twice.
        if p.cases % 10 == 0 and (p.cases, p.pending_analyses) != getattr(self, "_last", None):
            self._last = (p.cases, p.pending_analyses)
            console.print(_status_line(self.opts, p) + (f"; {self.fleet.progress_line()}" if self.fleet else ""), highlight=False)


class _LiveView(_LineView):
    """On a terminal: a bar toward the case count or the budget, cases/s, buckets by severity.
    Drawn anew at every refresh from the last progress and the clock, so that the time and the
    rate move while no case ends (the end of a run waits on its analyses for minutes)."""

    def __enter__(self):
        self.last = None
        self.live = Live(console=console, refresh_per_second=2, transient=True, get_renderable=self._renderable)
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def _renderable(self):
        if self.last is None:
            return Text("")
        return live_progress(self.opts, self.last, fleet_line=self.fleet_line)

    def update(self, p) -> None:
        # The fleet's line is read here, in the campaign's thread, not in the refresh thread.
        self.last, self.fleet_line = p, self.fleet.progress_line() if self.fleet else None


def progress_fraction(opts, p, now: float | None = None) -> float:
    """How far the campaign is, 0..1: drawn cases toward --max-cases (replays of known specs do
    not count), else time toward --budget (with both, whichever is further); 0 when neither bounds it."""
    elapsed = (now if now is not None else time.monotonic()) - p.started + p.spent_before  # a resume's earlier sessions count
    parts = []
    if opts.max_cases:
        parts.append((p.cases + p.skipped - p.replays) / opts.max_cases)
    if opts.budget_s:
        parts.append(elapsed / opts.budget_s)
    return min(1.0, max(parts, default=0.0))


def live_progress(opts, p, now: float | None = None, fleet_line: str | None = None) -> Group:
    """The live view's renderable: the bar with its percentage, cases and cases/s, then this
    run's buckets by severity, then on a fleet its workers by node and GPU (a pure function of
    the options, a `Progress` and the fleet's line)."""
    now = now if now is not None else time.monotonic()
    elapsed = now - p.started
    fraction = progress_fraction(opts, p, now)
    rate = p.cases / elapsed if elapsed > 0 else 0.0
    toward = (f"/{opts.max_cases} cases" if opts.max_cases else " cases") + (
        f", {max(0.0, opts.budget_s - elapsed - p.spent_before):.0f} s of {opts.budget_s:.0f} s left" if opts.budget_s else "")
    # Without a budget the seconds count up: the view moves while only the analyses do.
    replays = (f" (+{p.replays} known replayed)" if p.replays else "") + ("" if opts.budget_s else f", {elapsed:.0f} s")
    # Wrapped within its column, not cut: on a narrow terminal the rate and the time left still show.
    head = Text(f" {fraction:4.0%}  {p.cases + p.skipped - p.replays}{toward}{replays}, {rate:.2f} cases/s")
    counts = p.by_severity
    sev = Text("buckets: ")
    for i, s in enumerate(ORDER):
        sev.append(f"{s.value} {counts.get(s.value, 0)}", style={"bug": "bold red", "suspect": "yellow"}.get(s.value, ""))
        sev.append(" · " if i < len(ORDER) - 1 else "")
    sev.append(f"  ({p.findings} findings, {p.new_buckets} new buckets" + (f", {p.skipped} resumed" if p.skipped else "")
               + (f", {p.pending_analyses} {'analysis' if p.pending_analyses == 1 else 'analyses'} pending"
                  if p.pending_analyses else "") + ")")
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=1000, completed=round(fraction * 1000), width=40), head)
    return Group(bar, sev, Text(fleet_line)) if fleet_line else Group(bar, sev)


def _status_line(opts, p) -> str:
    elapsed = time.monotonic() - p.started
    rate = p.cases / elapsed * 60 if elapsed > 0 else 0.0
    left = f", {max(0, opts.budget_s - elapsed - p.spent_before):.0f} s left" if opts.budget_s else ""
    done = f"/{opts.max_cases}" if opts.max_cases else ""
    return (
        f"{p.cases - p.replays}{done} cases{f' (+{p.replays} known replayed)' if p.replays else ''} ({rate:.1f}/min), {p.findings} findings in {len(p.buckets)} buckets "
        f"({p.new_buckets} new){left}" + (f", {p.pending_analyses} analyses pending" if p.pending_analyses else "")
    )


def _print_summary(result, min_severity: str = "noise") -> None:
    """The end of the run on one screen, at most the terminal's width (80 columns off a terminal)
    and 24 lines: `summary_screen`. The caller then prints the path of report.html."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store
    from divfuzz.reports.root_causes import SCREEN_WIDTH

    store = Store(result.store_path, create=False)
    try:
        buckets = store.buckets(run_id=result.run_id)
    finally:
        store.close()
    width = out.size.width if out.is_terminal else SCREEN_WIDTH
    for line in summary_screen(result, buckets, elapsed=time.monotonic() - result.progress.started, width=width,
                               min_severity=min_severity):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def summary_screen(result, buckets, *, elapsed: float, width: int, min_severity: str = "noise") -> list[str]:
    """The summary's lines, none wider than `width` (a pure function of the run's result and its
    buckets): the run's own facts, each wrapped onto lines of its own (what the run did, the graphs
    compiled, what was cut, why analyses are pending and the command that finishes them), then
    `divfuzz.reports.root_causes.screen_summary` (the counts by severity, a line per bug culprit,
    wrapped whole, with its folder). Nothing is cut. `min_severity` names the floor that
    `divfuzz report` is pointed at (the screen lists bug root causes only)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.root_causes import screen_summary, wrap

    p = result.progress
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(p.by_status.items()))
    facts = [f"run {result.run_id}{' (resumed)' if result.resumed else ''}: {p.cases} cases in {elapsed:.0f} s "
             f"({p.cases / elapsed * 60 if elapsed else 0:.1f}/min)" + (f"; {statuses}" if statuses else "")
             + (f"; {p.skipped} skipped (stored)" if p.skipped else "")]
    compiled = ([f"{p.graphs} graphs compiled ({p.cases / p.graphs:.1f} inputs each)"] if 0 < p.graphs < p.cases else []) + (
        [f"{p.repeats} repeated draws not run again"] if p.repeats else []) + (
        [f"{p.exhausted_slots} slot(s) stopped: every draw repeated a graph already run (narrow options)"] if p.exhausted_slots else [])
    if compiled:
        facts.append("; ".join(compiled))
    if result.cut_at_end:
        facts.append("budget reached: work still in flight then was dropped (re-run resumes it)")
    if p.worker_deaths:
        where = ", ".join(f"slot {d['slot']} case {d['idx']} ({'; '.join(d['deaths'])})" for d in p.worker_deaths[:3])
        facts.append(f"{len(p.worker_deaths)} worker death(s) that did not repeat when the case ran again in a fresh "
                     f"worker: {where}{', ...' if len(p.worker_deaths) > 3 else ''}; infrastructure (a kill from outside, "
                     "the OOM killer), not findings")
    store_dir = result.store_path.parent
    if result.pending_analyses:
        by_severity = ", ".join(f"{n} {s}" for s, n in sorted(result.pending_by_severity.items()) if n)
        count = result.pending_analyses
        facts.append(f"{count} {'analysis' if count == 1 else 'analyses'} pending{f' ({by_severity})' if by_severity else ''}; a campaign never "
                     f"minimizes noise, by-design or eager-worse; to finish them: divfuzz minimize --pending --out {store_dir}")
    head = [line for fact in facts for line in wrap(fact, width)]
    rest = f"divfuzz report --out {store_dir}" + (f" --min-severity {min_severity}" if min_severity != "noise" else "")
    return screen_summary(buckets, head=head, store_dir=str(store_dir), run_id=result.run_id, width=width,
                          reserve=1 + bool(result.interrupted), rest=rest)  # report.html's line, and the interrupted one
