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
    device_option,
    out,
    parse_budget,
    resolve_device,
)
from divfuzz.generators.input_siblings import MAX_INPUTS_PER_COMPILE


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
def bench(device, budget, cases, seed, workers, no_minimize, inputs_per_compile, out_dir, breakdown_store, run_id, before_after):
    """Run a default campaign and print its rates and where its time goes (or --breakdown STORE)."""
    if breakdown_store is not None:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.campaign.breakdown import breakdown_table, campaign_breakdown

        out.print(breakdown_table(campaign_breakdown(breakdown_store, run_id)), markup=False, highlight=False)
        return
    check_device_early(device)  # before torch is imported
    device = resolve_device(device)
    if before_after:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.fuzzer.campaign.bench import before_after_table, bench_table, run_before_after

        count = workers if isinstance(workers, int) else 1
        results = run_before_after(device, cases or 30, seed=seed, workers=count)
        for r in results:
            out.print(f"\n{r.setting}", markup=False, highlight=False)
            out.print(bench_table(r), markup=False, highlight=False)
        out.print("\n" + before_after_table(results), markup=False, highlight=False)
        return
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.campaign.bench import default_campaign_table, run_default_campaign

    budget_s = None if cases else parse_budget(budget)
    with tempfile.TemporaryDirectory(prefix="divfuzz-bench-") as tmp:
        folder = out_dir if out_dir is not None else Path(tmp) / "out"
        run = run_default_campaign(device, folder, budget_s=budget_s, max_cases=cases, workers=workers, seed=seed,
                                   minimize=not no_minimize,
                                   extra=("--inputs-per-compile", str(inputs_per_compile)) if inputs_per_compile else ())
        out.print(default_campaign_table(run), markup=False, highlight=False)
