"""`divfuzz bench`: what a default campaign does on this host, and where its time goes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import (
    CASE_COUNT,
    RUN_ID,
    SEED,
    WORKERS,
    DivfuzzCommand,
    check_device_early,
    console,
    device_option,
    out,
    parse_budget,
    resolve_device,
)
from divfuzz.generators.input_siblings import MAX_INPUTS_PER_COMPILE
from divfuzz.records.errors import ConfigError


# `bench --legs`: one GPU, every GPU of the host, a local Dask cluster (divfuzz.fuzzer.campaign.bench_legs).
LEGS = ("one", "all", "dask")


def parse_legs(text: str) -> tuple[str, ...]:
    """`--legs one,all,dask` as names in the order given; ConfigError (exit 2) for another name or a repeat."""
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    if not names or any(n not in LEGS for n in names):
        raise ConfigError(f"--legs: expected a comma-separated list of {', '.join(LEGS)} but got {text!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--legs: each leg once, but got {text!r}")
    return names


@click.command(cls=DivfuzzCommand)
@device_option
@click.option("--budget", default="5m", show_default=True, metavar="DURATION",
              help="The campaign's --budget (a default campaign: at least 5 minutes).")
@click.option("--cases", type=CASE_COUNT, default=None, help="Bound the campaign by cases instead (--max-cases).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="The campaign's --seed.")
@click.option("--workers", type=WORKERS, default="auto", show_default=True, help="The campaign's --workers: auto (as `divfuzz fuzz`) or a count.")
@click.option("--no-minimize", is_flag=True, help="Pass --no-minimize to the campaign.")
@click.option("--inputs-per-compile", type=click.IntRange(1, MAX_INPUTS_PER_COMPILE), default=None, metavar="N",
              help="Pass --inputs-per-compile to the campaign (default: the campaign's own).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="The campaign folder, kept (default: a temporary folder, removed after).")
@click.option("--breakdown", "breakdown_store", type=click.Path(path_type=Path), default=None, metavar="STORE",
              help="Run nothing: print the breakdown of an existing campaign's store (its --out folder or divfuzz.sqlite).")
@click.option("--run", "run_id", type=RUN_ID, default=None, help="With --breakdown: that run (default: the latest).")
@click.option("--before-after", is_flag=True,
              help="Run the same cases under torch's compile defaults, divfuzz's, and divfuzz's on a warm cache.")
@click.option("--legs", default=None, metavar="LEG,...",
              help="Measure these legs side by side, each a campaign on the same seed and bound with its own cold compile "
                   "cache: one (the first GPU and its share of the cores), all (every GPU), dask (a local Dask cluster, one "
                   "worker per GPU); prints graphs/s, cases/s and the ratios. --workers N: slots per GPU.")
def bench(device, budget, cases, seed, workers, no_minimize, inputs_per_compile, out_dir, breakdown_store, run_id, before_after,
          legs):
    """Run a default campaign and print its rates and where its time goes (or --breakdown STORE)."""
    if sum(x is not None and x is not False for x in (breakdown_store, legs, before_after or None)) > 1:
        raise ConfigError("--breakdown, --legs and --before-after: give one of them")
    if breakdown_store is not None:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.campaign.breakdown import breakdown_table, campaign_breakdown

        out.print(breakdown_table(campaign_breakdown(breakdown_store, run_id)), markup=False, highlight=False)
        return
    check_device_early(device)  # before torch is imported
    names = parse_legs(legs) if legs is not None else None
    device = resolve_device(device)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign import bench as runs, bench_legs

    extra = ("--inputs-per-compile", str(inputs_per_compile)) if inputs_per_compile else ()
    budget_s = None if cases else parse_budget(budget)
    if names is not None:
        with tempfile.TemporaryDirectory(prefix="divfuzz-bench-") as tmp:
            root = out_dir if out_dir is not None else Path(tmp)
            results = bench_legs.run_legs(names, device, root, budget_s=budget_s, max_cases=cases, workers=workers, seed=seed,
                                          minimize=not no_minimize, extra=extra,
                                          log=lambda line: console.print(line, markup=False, highlight=False))
            out.print(bench_legs.legs_table(results, device, seed=seed, budget_s=budget_s, max_cases=cases), markup=False,
                      highlight=False)
            if out_dir is not None:
                out.print(f"each leg's store: {out_dir}/leg-<leg>/out (divfuzz bench --breakdown {out_dir}/leg-one/out)",
                          markup=False, highlight=False)
        return
    if before_after:
        count = workers if isinstance(workers, int) else 1
        results = runs.run_before_after(device, cases or 30, seed=seed, workers=count)
        for r in results:
            out.print(f"\n{r.setting}", markup=False, highlight=False)
            out.print(runs.bench_table(r), markup=False, highlight=False)
        out.print("\n" + runs.before_after_table(results), markup=False, highlight=False)
        return
    with tempfile.TemporaryDirectory(prefix="divfuzz-bench-") as tmp:
        folder = out_dir if out_dir is not None else Path(tmp) / "out"
        run = runs.run_default_campaign(device, folder, budget_s=budget_s, max_cases=cases, workers=workers, seed=seed,
                                        minimize=not no_minimize, extra=extra)
        out.print(runs.default_campaign_table(run), markup=False, highlight=False)
