"""`divfuzz diff OLD NEW`: what changed between two campaigns (`divfuzz.reports.diff`), each section led by
its root causes (new ones, and new buckets of root causes OLD already had), raw buckets beneath.

Each side is a store (its folder, as `--out` names it, or the SQLite file) or `STORE:RUN_ID`
for one run of a store. Bad input (no store there, not a divfuzz store, a run the store does
not have) exits 2 naming the side; neither store is written to.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import DivfuzzCommand, check_out_file, console
from divfuzz.reports.terminal import terminal_safe
from divfuzz.records.errors import ConfigError, OutputError, StoreError
from divfuzz.records.numbers import parse_number

_RUN_SUFFIX = re.compile(r"^(?P<store>.+):(?P<run>[0-9]+)$")


def parse_side(text: str, name: str) -> tuple[Path, int | None]:
    """`STORE` or `STORE:RUN_ID` -> (path of the SQLite file, run id or None); errors name the side."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import resolve_store

    path, run_id = Path(text), None
    m = _RUN_SUFFIX.match(text)
    if m and not path.exists():  # a folder really named "x:3" stays a folder

        path = Path(m["store"])
        run_id = parse_number(m["run"], f"{name} {text[:60]!r}: run id", low=1, high=2**63 - 1, integer=True, error=StoreError)
    return resolve_store(path, purpose=f"for {name} {text!r}"), run_id


def _open_side(text: str, name: str):
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.store import Store
    from divfuzz.reports.diff import side_from_store

    path, run_id = parse_side(text, name)
    try:
        store = Store(path, create=False)
    except StoreError as e:
        raise StoreError(f"{name} {text!r}: {e}") from None
    try:
        if run_id is not None and not store.has_run(run_id):
            known = ", ".join(str(r["id"]) for r in store.runs()) or "none"
            raise StoreError(f"{name} {text!r}: {path} has no run {run_id} (its runs: {known})")
        return side_from_store(store, run_id=run_id, label=text)
    finally:
        store.close()


@click.command(cls=DivfuzzCommand)
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the diff as markdown.")
@click.option("--any-device", is_flag=True, help="Match buckets across device types (a CPU store against a GPU store).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the diff as one self-contained HTML page (no script, no network) to this file.")
def diff(old, new, as_json, as_markdown, any_device, html_path):
    """What changed from OLD to NEW (each a store, or STORE:RUN_ID), by root cause: new buckets,
    buckets gone (fixed when NEW replayed their spec, else not reached), and severity or bounds changes."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.reports.diff import diff_html, diff_json, diff_markdown, diff_sides, diff_text

    if as_json and as_markdown:
        raise ConfigError("--json and --markdown: choose one")
    check_out_file(html_path, "--html")  # before reading either store
    result = diff_sides(_open_side(old, "OLD"), _open_side(new, "NEW"), match_device=not any_device)
    render = diff_json if as_json else diff_markdown if as_markdown else diff_text
    click.echo(terminal_safe(render(result)), nl=as_json)  # plain text: rich would re-wrap JSON and keys on a terminal
    if html_path is not None:
        # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
        from divfuzz.reports.html import write_page

        try:
            written = write_page(diff_html(result), html_path)
        except OSError as e:
            raise OutputError(f"--html {html_path}: could not write the page ({e.strerror or e})") from e
        console.print(f"wrote {written}", markup=False, highlight=False)  # stderr: stdout stays JSON or markdown
