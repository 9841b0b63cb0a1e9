"""`divfuzz report`: a store's root causes as markdown, led by severity, or (`--html FILE`) as one
self-contained HTML page (`divfuzz.reports.html`): plots inline for bug root causes; `--bucket N` writes
one bucket's page with all its plots (the command a compact card names)."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import BUCKET_ID, RUN_ID, SEVERITY_CHOICE, DivfuzzCommand, check_out_file, out
from divfuzz.records.errors import ConfigError, StoreError


@click.command(cls=DivfuzzCommand)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True,
              metavar="DIR", help="The campaign folder whose store is reported (as `divfuzz fuzz --out`).")
@click.option("--run", "run_id", type=RUN_ID, default=None, help="Only buckets seen in this run.")
@click.option("--min-severity", type=SEVERITY_CHOICE, default="noise", show_default=True, help="Hide buckets below this severity.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML page (plots, cards, no network) to this file instead of markdown.")
@click.option("--new-only", is_flag=True, default=False,
              help="With --min-severity: only root causes that match no known upstream bug (corpus/known-bugs.json).")
@click.option("--bucket", "bucket_id", type=BUCKET_ID, default=None,
              help="Only this bucket, with all its plots (needs --html or --issue): what a compact card's command draws.")
@click.option("--issue", "issue", is_flag=True, default=False,
              help="With --bucket: print the bucket's issue.md (PyTorch's torch.compile bug template, issue.py inline), ready to paste.")
def report(out_dir, run_id, min_severity, html_path, bucket_id, new_only, issue):
    """Print the root causes of a store as markdown, or write them as an HTML page (--html)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store, resolve_store
    from divfuzz.reports.markdown import coverage_markdown, iter_buckets_markdown

    path = resolve_store(out_dir)
    if issue:
        click.echo(bucket_issue(path, out_dir, bucket_id), nl=False)  # as written: no wrapping, ready to paste
        return
    if bucket_id is not None and html_path is None:
        raise ConfigError(f"--bucket {bucket_id}: give --html FILE (the bucket's page with its plots) or --issue")
    check_out_file(html_path, "--html")
    store = Store(path, create=False)
    try:
        if run_id is not None and not store.has_run(run_id):
            raise StoreError(f"--run {run_id}: {path} has no run {run_id}")
        if html_path is not None:
            written = write_report_html(store, html_path, run_id=run_id, bucket_id=bucket_id)
            out.print(f"wrote {written}", markup=False, highlight=False)
        else:
            # printed as it is read, a batch of lines at a time: a store of any size is never held whole
            for text in batched_text(iter_buckets_markdown(store, run_id=run_id, min_severity=min_severity, new_only=new_only)):
                out.print(text, markup=False, highlight=False, end="")
            out.print()
            out.print(coverage_markdown(store, run_id=run_id), markup=False, highlight=False)
    finally:
        store.close()


def batched_text(pieces, size: int = 1 << 16):
    """`pieces` of text joined into batches of about `size` characters (whole pieces each)."""
    batch, n = [], 0
    for piece in pieces:
        batch.append(piece)
        n += len(piece)
        if n >= size:
            yield "".join(batch)
            batch, n = [], 0
    if batch:
        yield "".join(batch)


def bucket_issue(store_path: Path, out_dir: Path, bucket_id: int | None) -> str:
    """`--bucket N --issue`: the text of bucket N's issue.md, read from its folder (a path built
    from the bucket's id and key, never read from the store; a plain file, not a link)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store
    from divfuzz.reports.bucket_files import ISSUE_MARKDOWN
    from divfuzz.reports.bucket_folder import BucketFolder

    if bucket_id is None:
        raise ConfigError("--issue prints one bucket's issue.md: give --bucket N")
    store = Store(store_path, create=False)
    try:
        bucket = store.bucket(bucket_id) if store.has_bucket(bucket_id) else None  # one row, not the store's
    finally:
        store.close()
    if bucket is None:
        raise StoreError(f"--bucket {bucket_id}: {store_path} has no bucket {bucket_id}")
    folder = BucketFolder.load(out_dir, bucket.id, bucket.key)
    text = folder.read_file(ISSUE_MARKDOWN)
    if text is None:
        raise StoreError(f"--bucket {bucket_id}: no {ISSUE_MARKDOWN} in {folder.path}: divfuzz writes one for a bug "
                         f"(this bucket is {bucket.severity})")
    return text


def write_report_html(store, html_path: Path, *, run_id: int | None = None, bucket_id: int | None = None) -> Path:
    """The store's HTML page (`divfuzz.reports.html`), written whole; `divfuzz fuzz` calls it too. With
    `bucket_id`, a page of that bucket alone with all its plots (StoreError when there is none)."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.html import collect, write_html

    if bucket_id is None:
        return write_html(collect(store, run_id=run_id), html_path)
    data = collect(store, run_id=run_id, bucket_id=bucket_id, plots="all")
    if not data.bucket_total:
        raise StoreError(f"--bucket {bucket_id}: {store.path} has no bucket {bucket_id}"
                         + (f" in run {run_id}" if run_id is not None else ""))
    return write_html(data, html_path, plots="all")
