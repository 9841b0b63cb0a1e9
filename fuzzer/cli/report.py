"""`divfuzz report`: a store's buckets as markdown, led by severity."""

from __future__ import annotations

from pathlib import Path

import click

from fuzzer.cli.options import SEVERITY_CHOICE, DivfuzzCommand, out

@click.command(cls=DivfuzzCommand)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True)
@click.option("--run", "run_id", type=int, default=None, help="Only buckets seen in this run.")
@click.option("--min-severity", type=SEVERITY_CHOICE, default="noise", show_default=True, help="Hide buckets below this severity.")
def report(out_dir, run_id, min_severity):
    """Print the buckets of a store as markdown."""
    from fuzzer.campaign.loop import STORE_NAME
    from records.errors import StoreError
    from fuzzer.engine.store import Store
    from reports.markdown import buckets_markdown

    path = out_dir / STORE_NAME
    if not path.exists():
        raise StoreError(f"{path}: no store here (run `divfuzz fuzz --out {out_dir}` first)")
    store = Store(path, create=False)
    try:
        _judge_unjudged(store)
        out.print(buckets_markdown(store, run_id=run_id, min_severity=min_severity), markup=False, highlight=False)
    finally:
        store.close()


def _judge_unjudged(store) -> None:
    """Buckets of a store written before severities existed get one, from their first case's
    stored verdict and their culprit (the same policy the campaign applies)."""
    from oracles.severity import severity_of
    from records.verdict import Verdict
    from reports.markdown import culprit_of

    for b in store.buckets():
        if b.severity_reason is not None or b.first_case_id is None:
            continue
        reason = severity_of(Verdict.from_dict(store.case(b.first_case_id).verdict), culprit=culprit_of(b))
        if reason is not None:
            store.set_bucket_severity(b.id, reason.to_dict())
