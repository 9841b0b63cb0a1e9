"""`divfuzz corpus add|prune`: manage the gate's corpus of specs."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import out
from divfuzz.records.errors import SpecError


@click.group()
def corpus() -> None:
    """Manage the gate's corpus of specs."""


@corpus.command("add")
@click.argument("source", metavar="BUCKET-DIR|SPEC.json", type=click.Path(exists=True, path_type=Path))
@click.option("--corpus", "corpus_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("corpus"), show_default=True,
              metavar="DIR", help="The corpus folder (its specs/ holds the gate's specs).")
@click.option("--name", default=None, metavar="NAME", help="File stem in the corpus (default: the bucket folder's or file's name).")
def corpus_add(source, corpus_dir, name):
    """Add a spec.json or a bucket folder's spec to the corpus."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.gate.corpus import add_to_corpus
    from divfuzz.fuzzer.gate.corpus import specs_folder

    folder = specs_folder(corpus_dir) if corpus_dir.exists() else corpus_dir / "specs"
    dest, added = add_to_corpus(source, folder, name=name)
    if not added:
        out.print(f"already in the corpus as {dest} (same spec digest); nothing added", highlight=False)
        return
    out.print(
        f"added {dest}. The gate expects it clean until the baseline says otherwise: if it is a known "
        f"divergence, run `divfuzz gate --update-baseline --corpus {corpus_dir}`",
        highlight=False,
    )


@corpus.command("prune")
@click.option("--corpus", "corpus_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("corpus"), show_default=True,
              metavar="DIR", help="The corpus folder (its specs/ holds the gate's specs).")
@click.option("--dry-run", is_flag=True, help="Only say what would be dropped.")
def corpus_prune(corpus_dir, dry_run):
    """Keep the smallest set of specs that covers every (op, dtype, kind) feature; say what was dropped."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.gate.corpus import known_divergences, plan_prune, read_specs
    from divfuzz.fuzzer.gate.corpus import specs_folder

    if not corpus_dir.is_dir():
        raise SpecError(f"{corpus_dir}: corpus folder does not exist")
    folder = specs_folder(corpus_dir)
    specs = read_specs(folder)
    plan = plan_prune(specs, pinned=known_divergences(corpus_dir))
    for name in plan.drop:
        out.print(f"{'would drop' if dry_run else 'dropped'} {folder / (name + '.json')}", highlight=False)
        if not dry_run:
            (folder / f"{name}.json").unlink()
    out.print(
        f"kept {len(plan.keep)} of {len(specs)} specs ({len(plan.pinned)} pinned as known divergences), "
        f"covering all {len(plan.features)} (op, dtype, kind) features",
        highlight=False,
    )
