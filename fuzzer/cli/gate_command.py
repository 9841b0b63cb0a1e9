"""`divfuzz gate`: replay the corpus against its baseline (and optionally fuzz), for CI.

Exit codes of `gate`: 0 pass (improvements and moved bounds are reported), 1 fail (a verdict more
severe than the baseline's or a new kind of failure, `divfuzz.fuzzer.gate.policy`; under --oracle perf,
compiled slower than eager as a bug; a new fuzz finding), 2 bad input (a corrupt corpus file or
baseline, a missing baseline, a baseline entry without a severity or a baseline without its
machine, an unknown backend, a missing device, a crash or hang --update-baseline would record, an
option --oracle perf cannot take).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import click

from divfuzz.fuzzer.gate.policy import gate_compile_config
from divfuzz.records.errors import ConfigError

from divfuzz.fuzzer.cli.options import (
    CASE_COUNT,
    SEED,
    TIMEOUT,
    WORKERS,
    WORKERS_HELP,
    DivfuzzCommand,
    Number,
    check_compile_options_early,
    check_device_early,
    check_out_dir,
    check_out_file,
    compile_config,
    compile_options,
    device_option,
    oracle_options,
    console,
    out,
    parse_budget,
    resolve_device,
)


@click.command(cls=DivfuzzCommand)
@device_option
@click.option("--corpus", "corpus_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("corpus"), show_default=True,
              metavar="DIR", help="The corpus folder: specs/*.json and the baselines beside them.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Baseline file (default: CORPUS/baseline-<device type>-<torch major.minor>-<CPU capability or sm_XY>.json).")
@click.option("--baseline-any", is_flag=True,
              help="Compare with a baseline written for another device, torch or CPU capability/GPU architecture (the mismatch is reported).")
@click.option("--margin", type=Number(low=0, high=1000, metavar="FRACTION"), default=0.1, show_default=True,
              help="A bound that grows by more than this fraction at the baseline's severity is listed under moved_bounds "
                   "(never a failure: the gate judges by severity).")
@click.option("--budget", default=None, metavar="DURATION", help="Wall-clock budget for the replay, e.g. 10m; specs left over fail.")
@click.option("--workers", type=WORKERS, default="auto", show_default=True,
              help=WORKERS_HELP + " The verdicts do not depend on it.")
@click.option("--timeout", "timeout_s", type=TIMEOUT, default=300.0, show_default=True, help="Seconds per spec.")
@click.option("--fuzz", "fuzz_budget", default=None, metavar="DURATION", help="After the replay, fuzz for this long, e.g. 5m.")
@click.option("--fuzz-cases", type=CASE_COUNT, default=None, help="After the replay, fuzz this many cases (deterministic).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the --fuzz campaign.")
@click.option("--spec", "only", multiple=True, metavar="NAME", help="Replay only this corpus spec, by its file name without .json (repeatable).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the result as JUnit XML here (one test case per spec).")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the result as markdown here (also appended to $GITHUB_STEP_SUMMARY when set).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the full result as JSON here; everything but its `timings` field is identical across runs.")
@click.option("--repro-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write spec.json + repro.py of each failing spec (and new fuzz buckets) here.")
@click.option("--update-baseline", is_flag=True, help="Replay the corpus and write the baseline from what it gives.")
@oracle_options
@compile_options
def gate(device, corpus_dir, baseline_path, margin, budget, workers, timeout_s, fuzz_budget, fuzz_cases, seed, only,
         junit_path, markdown_path, json_path, repro_dir, update_baseline, backend, inductor, dynamic, mode, baseline_any,
         oracle, perf_margin):
    """Replay the corpus and hold it to the baseline: the CI gate. With --oracle perf, time each
    spec eager vs compiled instead: a spec fails when compiled is slower as a bug (no baseline)."""

    # First, before torch is imported: what the options, the files and the device say.
    budget_s = parse_budget(budget) if budget else None
    fuzz_budget_s = parse_budget(fuzz_budget, "--fuzz") if fuzz_budget else None
    if oracle == "perf":
        _check_perf_options(update_baseline, fuzz_budget or fuzz_cases, baseline_path, baseline_any)
    elif perf_margin is not None:
        raise ConfigError("--perf-margin is for --oracle perf")
    _check_inputs_early(corpus_dir, baseline_path, update_baseline)
    check_compile_options_early(backend, inductor)
    check_device_early(device)
    for path, option in ((junit_path, "--junit"), (markdown_path, "--markdown"), (json_path, "--json")):
        check_out_file(path, option)  # before the replay, not after it
    if repro_dir is not None:
        check_out_dir(repro_dir, "--repro-dir")
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.sizing import resolve_workers
    from divfuzz.fuzzer.gate.baseline import default_baseline_path
    from divfuzz.fuzzer.gate.replay import GateOptions, run_gate

    device = resolve_device(device)

    workers, _ = resolve_workers(workers, device, oracle)  # perf: one per device, more exits 2
    config = compile_config(backend, inductor, dynamic, mode)
    if oracle != "perf":  # timing measures what users run; deterministic mode costs speed
        config = gate_compile_config(config, device.split(":")[0])
    opts = GateOptions(
        device=device,
        corpus_dir=corpus_dir,
        baseline_path=baseline_path,
        config=config,
        margin=margin,
        timeout_s=timeout_s,
        budget_s=budget_s,
        fuzz_budget_s=fuzz_budget_s,
        fuzz_cases=fuzz_cases,
        seed=seed,
        repro_dir=repro_dir,
        only=tuple(only),
        baseline_any=baseline_any,
        workers=workers,
        oracle=oracle,
        perf_margin=perf_margin,
    )
    lines = GateLines()
    log = lambda m: lines.print(console, m)  # noqa: E731
    if update_baseline:
        _write_baseline(opts, log, lines)
        return
    against = "the perf oracle (no baseline)" if oracle == "perf" else baseline_path or default_baseline_path(corpus_dir, device)
    lines.wrapped(console, f"divfuzz gate: {corpus_dir} against {against}, device {device}, backend {config.describe()}")
    data = run_gate(opts, log=log).to_dict()
    for note in data["notes"]:
        lines.wrapped(console, f"note: {note}")
    _write_reports(data, json_path=json_path, junit_path=junit_path, markdown_path=markdown_path)
    _print_outcome(data, lines)
    lines.where_whole(markdown_path=markdown_path, json_path=json_path)
    sys.exit(data["exit_code"])


def _check_inputs_early(corpus_dir: Path, baseline_path: Path | None, update_baseline: bool) -> None:
    """A corpus folder or a named baseline that is not there, said before torch is imported (exit 2).
    The default baseline's name needs the machine key (torch's CPU capability or GPU): it is
    checked later, with torch."""
    if not corpus_dir.is_dir():
        raise ConfigError(f"--corpus {corpus_dir}: " + ("not a folder" if corpus_dir.exists() else "corpus folder does not exist"))
    if baseline_path is not None and not update_baseline and not baseline_path.exists():
        raise ConfigError(f"--baseline {baseline_path}: no such file. A missing baseline is not a pass: write one with "
                          f"`divfuzz gate --update-baseline --baseline {baseline_path}` (on a build you trust) and commit it")


def _check_perf_options(update_baseline, fuzzing, baseline_path, baseline_any) -> None:
    """What --oracle perf cannot be combined with, refused before any work (exit 2). One worker per
    device, as for `fuzz --oracle perf` (side-by-side workers would time each other), is
    `resolve_workers`' rule."""
    for given, option in ((update_baseline, "--update-baseline"), (fuzzing, "--fuzz/--fuzz-cases"),
                          (baseline_path, "--baseline"), (baseline_any, "--baseline-any")):
        if given:
            raise ConfigError(f"{option} with --oracle perf: the perf gate judges each spec by the perf oracle's severity "
                              f"and reads no baseline")


def _write_baseline(opts, log, lines: "GateLines") -> None:
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.gate.machine import machine_rows
    from divfuzz.fuzzer.gate.replay import update_baseline

    if opts.only:
        raise ConfigError("--spec cannot be combined with --update-baseline: a baseline covers the whole corpus")
    baseline = update_baseline(opts, log=log)
    lines.print(out, f"wrote {baseline.path}: {len(baseline.specs)} specs, "
                f"{sum(1 for e in baseline.specs.values() if e['outputs'] or e['status'] != 'ok')} known divergences or errors")
    for row in machine_rows(baseline.machine, baseline.machine):
        lines.print(out, f"  machine {row['field']}: {row['current']}")


def _write_reports(data: dict, *, json_path, junit_path, markdown_path) -> None:
    """The result as JSON, JUnit and markdown where asked, and the markdown appended to GitHub's
    step summary when it runs there."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.gate_markdown import gate_markdown
    from divfuzz.reports.junit import gate_junit

    md = gate_markdown(data)
    if json_path:
        json_path.write_text(json.dumps(data, indent=2) + "\n")
    if junit_path:
        junit_path.write_text(gate_junit(data))
    if markdown_path:
        markdown_path.write_text(md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(md + "\n")


def _print_outcome(data: dict, lines: "GateLines") -> None:
    c = data["counts"]
    lines.print(out,
                f"gate {data['result'].upper()}: {c['passed']}/{c['specs']} specs pass, {c['failed']} fail, {c['improved']} improved"
                + (f", {len(data['fuzz']['failing'])} new fuzz findings" if data["fuzz"] else "")
                + f" ({data['timings']['total_s']:.0f} s)")
    for s in data["specs"]:
        for p in s["problems"]:
            lines.print(out, f"  FAIL {s['name']}: {p}")
    if data["fuzz"]:
        for key in data["fuzz"]["failing"]:
            lines.print(out, f"  FAIL fuzz: {key}")
    _print_moved_bounds(data, lines)


def _print_moved_bounds(data: dict, lines: "GateLines") -> None:
    """Bounds that moved at the baseline's severity (not failures), and then the machine that
    wrote the baseline beside this one: within one key, the CPU model moves bounds."""
    moved = [(s["name"], m) for s in data["specs"] for m in s["moved_bounds"]]
    if not moved:
        return
    lines.print(out, f"moved bounds ({len(moved)}, at the baseline's severity: reported, not failures):")
    for name, m in moved:
        lines.print(out, f"  moved {name}: {m}")
    rows = data["machine"]["rows"]
    if rows:
        width = max(len(r["field"]) for r in rows)
        left = max(len("baseline"), *(len(r["baseline"]) for r in rows))
        lines.print(out, f"  {'machine':<{width}}  {'baseline':<{left}}  this run", flatten=False)
        for r in rows:
            mark = "  (differs)" if r["differs"] else ""
            lines.print(out, f"  {r['field']:<{width}}  {r['baseline']:<{left}}  {r['current']}{mark}", flatten=False)


class GateLines:
    """The gate's terminal lines, none wider than its console: a line of the run's detail (a
    spec's verdict, a problem, a moved bound: a compiler's error message once made lines of 1,324
    characters) is one line, a longer one cut with '…' and counted, so that the last line says where
    every line is whole: the --markdown and --json files (the JSON holds every field; the markdown
    every problem), else the options that write them; divfuzz's own sentences are wrapped whole
    (`wrapped`). Text from the run (error messages, names) is printed as it is: no markup."""

    def __init__(self) -> None:
        self.cut = 0

    def print(self, target, text: str, *, flatten: bool = True) -> None:
        text = str(text)
        indent = text[: len(text) - len(text.lstrip(" "))]  # the FAIL and moved lines' own indent
        line = indent + " ".join(text.split()) if flatten else text.replace("\n", " ")
        width = max(20, target.width)
        if len(line) > width:
            line, self.cut = line[: width - 1] + "…", self.cut + 1
        target.print(line, highlight=False, markup=False, emoji=False, soft_wrap=True)

    def wrapped(self, target, text: str) -> None:
        """`text` wrapped at the console's width, whole: divfuzz's own sentences (the gate's first
        line, its notes), which say what a reader must know, such as a baseline of another machine."""
        for line in textwrap.wrap(" ".join(str(text).split()), width=max(20, target.width), subsequent_indent="  ",
                                  break_on_hyphens=False):
            target.print(line, highlight=False, markup=False, emoji=False, soft_wrap=True)

    def where_whole(self, *, markdown_path: Path | None = None, json_path: Path | None = None) -> None:
        if not self.cut:
            return
        files = [str(p) for p in (markdown_path, json_path) if p is not None]
        where = " and ".join(files) if files else "the files --markdown FILE and --json FILE write"
        self.wrapped(out, f"{self.cut} line{'s' if self.cut != 1 else ''} above cut at the terminal's width (…): whole in {where}")
