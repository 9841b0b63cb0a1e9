"""`divfuzz report`: a store's root causes as markdown, led by severity, or (`--html FILE`) as one
self-contained HTML page (`divfuzz.reports.html`): plots inline for bug root causes; `--bucket N` writes
one bucket's page with all its plots (the command a compact card names)."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import RUN_ID, SEVERITY_CHOICE, DivfuzzCommand, check_out_file, out
from divfuzz.records.errors import ConfigError, StoreError


@click.command(cls=DivfuzzCommand)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True)
@click.option("--run", "run_id", type=RUN_ID, default=None, help="Only buckets seen in this run.")
@click.option("--min-severity", type=SEVERITY_CHOICE, default="noise", show_default=True, help="Hide buckets below this severity.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML page (plots, cards, no network) to this file instead of markdown.")
@click.option("--new-only", is_flag=True, default=False,
              help="With --min-severity: only root causes that match no known upstream bug (corpus/known-bugs.json).")
@click.option("--bucket", "bucket_id", type=click.IntRange(min=1), default=None,
              help="Only this bucket, with all its plots (needs --html): what a compact card's command draws.")
def report(out_dir, run_id, min_severity, html_path, bucket_id, new_only):
    """Print the root causes of a store as markdown, or write them as an HTML page (--html)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.reports.markdown import buckets_markdown, coverage_markdown

    path = out_dir / STORE_NAME
    if not path.exists():
        raise StoreError(f"{path}: no store here (run `divfuzz fuzz --out {out_dir}` first)")
    if bucket_id is not None and html_path is None:
        raise ConfigError(f"--bucket {bucket_id}: give --html FILE too (the bucket's page with its plots)")
    check_out_file(html_path, "--html")
    store = Store(path, create=False)
    try:
        if run_id is not None and not store.has_run(run_id):
            raise StoreError(f"--run {run_id}: {path} has no run {run_id}")
        _judge_unjudged(store)
        if html_path is not None:
            written = write_report_html(store, html_path, run_id=run_id, bucket_id=bucket_id)
            out.print(f"wrote {written}", markup=False, highlight=False)
        else:
            out.print(buckets_markdown(store, run_id=run_id, min_severity=min_severity, new_only=new_only), markup=False, highlight=False)
            out.print(coverage_markdown(store, run_id=run_id), markup=False, highlight=False)
    finally:
        store.close()


def write_report_html(store, html_path: Path, *, run_id: int | None = None, bucket_id: int | None = None) -> Path:
    """The store's HTML page (`divfuzz.reports.html`), written whole; `divfuzz fuzz` calls it too. With
    `bucket_id`, a page of that bucket alone with all its plots (StoreError when there is none)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.html import collect, write_html

    if bucket_id is None:
        return write_html(collect(store, run_id=run_id), html_path)
    data = collect(store, run_id=run_id, bucket_id=bucket_id, plots="all")
    if not data.buckets:
        raise StoreError(f"--bucket {bucket_id}: {store.path} has no bucket {bucket_id}"
                         + (f" in run {run_id}" if run_id is not None else ""))
    return write_html(data, html_path, plots="all")


def _judge_unjudged(store) -> None:
    """Buckets of a store written before severities existed get one, from their first case's
    stored verdict and their culprit (the same policy the campaign applies)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.oracles.severity_policy import severity_of
    from divfuzz.records.verdict import Verdict
    from divfuzz.reports.markdown import culprit_of

    for b in store.buckets():
        if b.severity_reason is not None or b.first_case_id is None:
            continue
        reason = severity_of(Verdict.from_dict(store.case(b.first_case_id).verdict), culprit=culprit_of(b))
        if reason is not None:
            store.set_bucket_severity(b.id, reason.to_dict())
