"""`divfuzz recheck --python PATH`: a store's bug folders' issue.py run under another Python
environment (a venv with a newer torch, a nightly), per folder "still fails / passes / errors in
torch X" recorded in the store and shown in its issue.md (`divfuzz.fuzzer.triage.recheck`)."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import BUCKET_ID, TIMEOUT, DivfuzzCommand, out


@click.command(cls=DivfuzzCommand)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True,
              metavar="DIR", help="The campaign folder whose bug folders are rechecked (as `divfuzz fuzz --out`).")
@click.option("--python", "python", required=True, metavar="PATH",
              help="The other environment's interpreter, e.g. /opt/nightly/bin/python: each issue.py runs under it.")
@click.option("--bucket", "bucket_ids", type=BUCKET_ID, multiple=True,
              help="Only this bug bucket (repeat for more); default: every bug bucket of the store.")
@click.option("--timeout", "timeout_s", type=TIMEOUT, default=300, show_default=True,
              help="Seconds one issue.py may run (a fresh interpreter, torch's import and one compile).")
def recheck(out_dir, python, bucket_ids, timeout_s):
    """Run each bug folder's issue.py under another torch; record and show whether it still fails there."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.triage.recheck import recheck_store

    def said(done) -> None:
        if done.row is None:
            out.print(f"bucket {done.bucket_id}: not run: {done.why}", markup=False, highlight=False)
        else:
            note = f"; {done.why}" if done.why else ""
            out.print(f"bucket {done.bucket_id}: {done.row.outcome} in torch {done.row.torch_version} "
                      f"({done.row.detail}){note}", markup=False, highlight=False)

    version, done = recheck_store(out_dir, python=python, bucket_ids=tuple(bucket_ids), timeout_s=float(timeout_s), log=said)
    ran = [d.row for d in done if d.row is not None]
    counts = {what: sum(r.outcome == what for r in ran) for what in ("still fails", "passes", "errors")}
    out.print(f"rechecked {len(ran)} of {len(done)} bug folders under torch {version} ({python}): "
              + ", ".join(f"{n} {what}" for what, n in counts.items()), markup=False, highlight=False)
