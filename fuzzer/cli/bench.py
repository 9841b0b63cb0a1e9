"""`divfuzz bench`: cases per minute and where a case's wall time goes."""

from __future__ import annotations

import click

from fuzzer.cli.options import DivfuzzCommand, out, resolve_device

@click.command(cls=DivfuzzCommand)
@click.option("--device", default="auto", show_default=True)
@click.option("--cases", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--before-after", is_flag=True,
              help="Run the same cases under torch's compile defaults, divfuzz's, and divfuzz's on a warm cache.")
def bench(device, cases, seed, workers, before_after):
    """Measure cases per minute and how a case's wall time splits (compile, runs, oracles, store...)."""
    from fuzzer.campaign.bench import before_after_table, bench_table, run_before_after, run_bench

    device = resolve_device(device)
    if before_after:
        results = run_before_after(device, cases, seed=seed, workers=workers)
        for r in results:
            out.print(f"\n{r.setting}", markup=False, highlight=False)
            out.print(bench_table(r), markup=False, highlight=False)
        out.print("\n" + before_after_table(results), markup=False, highlight=False)
        return
    out.print(bench_table(run_bench(device, cases, seed=seed, workers=workers)), markup=False, highlight=False)
