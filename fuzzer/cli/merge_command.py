"""`divfuzz merge OUT STORE...`: fold shard stores (campaign folders or .sqlite files) into OUT's store."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import DivfuzzCommand, check_out_dir, out


@click.command(cls=DivfuzzCommand)
@click.argument("out_dir", metavar="OUT", type=click.Path(file_okay=False, path_type=Path))
@click.argument("stores", metavar="STORE...", nargs=-1, required=True, type=click.Path(path_type=Path))
def merge(out_dir, stores):
    """Merge the stores of shards into OUT: runs kept, cases copied once, buckets merged by root cause.

    The inputs are only read. OUT may be new or an existing store (merging the same shard again adds nothing).
    """
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import STORE_NAME
    from divfuzz.fuzzer.campaign.merge import merge_stores

    check_out_dir(out_dir, "OUT")
    s = merge_stores(out_dir, list(stores))
    out.print(
        f"merged {len(stores)} store(s) into {out_dir / STORE_NAME}: {s.runs_added} runs added"
        f" ({s.runs_known} already there), {s.cases_added} cases added ({s.cases_duplicate} duplicates skipped),"
        f" {s.buckets_new} new buckets, {s.buckets_merged} merged into known ones, {s.folders_copied} bucket folders copied",
        highlight=False,
    )
    if s.pending_open or s.pending_filed:
        out.print(f"analyses: {s.pending_open} still pending (divfuzz minimize --pending {out_dir}), {s.pending_filed} closed "
                  "because another store had filed their root cause", highlight=False)
    for missing in s.folders_missing:
        out.print(f"no folder to copy for {missing}", highlight=False)
