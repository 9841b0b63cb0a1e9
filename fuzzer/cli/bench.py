"""`divfuzz bench`: cases per minute and where a case's wall time goes."""

from __future__ import annotations

import click

from fuzzer.cli.options import DivfuzzCommand, out, resolve_device

@click.command(cls=DivfuzzCommand)
@click.option("--device", default="auto", show_default=True)
@click.option("--cases", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench(device, cases, seed):
    """Measure cases per minute and how a case's wall time splits (compile, runs, oracles, store...)."""
    from fuzzer.campaign.bench import bench_table, run_bench

    out.print(bench_table(run_bench(resolve_device(device), cases, seed=seed)), markup=False, highlight=False)
