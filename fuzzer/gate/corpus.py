"""The gate's corpus as a set: adding a spec, and pruning to the smallest set that keeps coverage.

A spec's features are (op, dtype, kind) triples: the op of each node, the dtype it computes in
(its first data input's dtype, or `<dtype>+autocast-<low>` inside an autocast region), and the
kind: `forward` always (a backward spec compares its forward outputs too), and `backward` as well
when the spec differentiates through that op. Pruning is a greedy set
cover (most new features first, then fewest elements, then name), like a fuzzing corpus merge,
followed by a pass that drops any kept spec whose features the others already cover.
Invariants: pruning is deterministic and never loses a feature; specs that the baseline lists as
known divergences or errors are always kept (they are the gate's regression checks). A spec's
name in the corpus is a slug (`divfuzz.reports.bucket_folder.is_slug`) and its file is a direct child of the
specs folder: the gate uses that name for folders under `--repro-dir`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from divfuzz.records.errors import SpecError, UnsafePathError
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import load_spec
from divfuzz.records.safe_paths import child_path, is_slug, slugify
from divfuzz.records.safe_paths import check_plain, plain_folder, read_text, write_atomic
from divfuzz.fuzzer.gate.baseline import load_baseline
from divfuzz.reports.bucket_files import SPEC_FILE

Feature = tuple[str, str, str]


def spec_features(spec: GraphSpec) -> frozenset[Feature]:
    """The (op, dtype, kind) features one spec covers."""
    feats = set()
    grads = spec.backward and any(t.requires_grad for t in spec.inputs)
    for n in spec.nodes:
        op = get_op(n.op)
        dtype = spec.meta(n.inputs[0])[1]
        if spec.autocast:
            dtype = f"{dtype}+autocast-{spec.autocast}"
        feats.add((n.op, dtype, "forward"))
        if grads and op.differentiable:
            feats.add((n.op, dtype, "backward"))
    return frozenset(feats)


def corpus_features(specs: dict[str, GraphSpec]) -> frozenset[Feature]:
    out: set[Feature] = set()
    for s in specs.values():
        out |= spec_features(s)
    return frozenset(out)


def _cost(spec: GraphSpec) -> int:
    return spec.input_elements * (3 if spec.backward else 1)


@dataclass(frozen=True)
class PrunePlan:
    keep: tuple[str, ...]
    drop: tuple[str, ...]
    pinned: tuple[str, ...]  # kept because the baseline lists them as known divergences or errors
    features: frozenset[Feature]


def plan_prune(specs: dict[str, GraphSpec], *, pinned: frozenset[str] = frozenset()) -> PrunePlan:
    """Which specs to keep so that every feature of `specs` stays covered (greedy set cover)."""
    feats = {name: spec_features(s) for name, s in specs.items()}
    all_feats = frozenset().union(*feats.values()) if feats else frozenset()
    kept = sorted(n for n in specs if n in pinned)
    covered = set().union(*(feats[n] for n in kept)) if kept else set()
    candidates = sorted(n for n in specs if n not in pinned)
    while covered != all_feats:
        best = min(candidates, key=lambda n: (-len(feats[n] - covered), _cost(specs[n]), n))
        if not feats[best] - covered:
            break
        kept.append(best)
        candidates.remove(best)
        covered |= feats[best]
    # Redundancy pass: a greedy pick can be made redundant by later picks.
    for name in sorted(kept, key=lambda n: (-_cost(specs[n]), n)):
        if name in pinned:
            continue
        others = set().union(*(feats[n] for n in kept if n != name))
        if feats[name] <= others:
            kept.remove(name)
    keep = tuple(sorted(kept))
    return PrunePlan(keep, tuple(sorted(set(specs) - set(keep))), tuple(sorted(pinned & set(specs))), all_feats)


def known_divergences(corpus_dir: Path) -> frozenset[str]:
    """Spec names that any baseline in the corpus folder lists as not clean."""
    names = set()
    for path in sorted(corpus_dir.glob("baseline-*.json")):
        check_plain(path, what="baseline")  # never a symlink or a FIFO in a corpus
        # Only which specs diverge is read: a baseline the gate would refuse to judge by (written
        # before severities were recorded) still names its known divergences.
        for name, entry in load_baseline(path, judging=False).specs.items():
            if entry["status"] != "ok" or entry["outputs"]:
                names.add(name)
    return frozenset(names)


def read_spec_text(path: Path, *, named_by_user: bool = False) -> str:
    """A spec file's text as UTF-8; SpecError naming the file when it cannot be read or decoded.
    A corpus file must be a regular file, not a symlink (`divfuzz.records.safe_paths`); a file the user
    named (`corpus add SOURCE`) may be a symlink, never a FIFO or a device."""
    try:
        return read_text(path, what="spec file", follow=named_by_user)
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); a spec is JSON text") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror or e})") from None


def corpus_spec_name(path: Path) -> str:
    """The name of a corpus spec file (its stem), refused unless it is a slug."""
    if not is_slug(path.stem) or path.suffix != ".json":
        raise SpecError(
            f"{path}: corpus spec file names must be a slug plus .json (letters, digits, '_' and '-'); rename it"
        )
    return path.stem


def add_to_corpus(source: Path, corpus_specs: Path, *, name: str | None = None) -> tuple[Path, bool]:
    """Copy a spec (a spec.json, or a bucket folder's spec.json) into the corpus.

    Returns (path, added); added is False when an identical spec (same digest) is already there.
    """
    path = source / SPEC_FILE if source.is_dir() else source
    if not path.is_file():
        raise SpecError(f"{source}: expected a spec .json file or a bucket folder holding spec.json")
    if source.is_dir():
        check_plain(path, root=source, what="bucket folder's spec")  # inside a folder: never a symlink
    if name is not None and not is_slug(name):
        raise UnsafePathError(
            f"--name {name!r} is not a safe corpus name: use letters, digits, '_' and '-' "
            "(starting with a letter or digit, at most 100 characters)"
        )
    spec = load_spec(read_spec_text(path, named_by_user=True), source=str(path))
    if corpus_specs.exists() and not corpus_specs.is_dir():
        raise SpecError(f"{corpus_specs}: not a folder")
    exists = check_plain(corpus_specs, what="corpus specs folder", folder=True)  # a symlinked specs/ is refused
    existing_files = sorted(corpus_specs.glob("*.json")) if exists else []
    for existing in existing_files:
        text = read_spec_text(existing)  # an unreadable corpus file stops the add: the gate would refuse it too
        try:
            other = GraphSpec.from_json(text, source=str(existing))
        except SpecError:
            continue
        if other.digest() == spec.digest():
            return existing, False
    stem = name or slugify(source.name if source.is_dir() else path.stem) or f"spec-{spec.digest()}"
    corpus_specs.parent.mkdir(parents=True, exist_ok=True)  # the --corpus folder the user named
    plain_folder(corpus_specs, create=True, what="corpus specs folder")
    dest = child_path(corpus_specs, f"{stem}.json", what="corpus spec name")
    if os.path.lexists(dest):
        dest = child_path(corpus_specs, f"{stem}-{spec.digest()[:8]}.json", what="corpus spec name")
    write_atomic(dest, spec.to_json() + "\n", what="corpus spec")
    return dest, True


def read_specs(folder: Path) -> dict[str, GraphSpec]:
    out = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("baseline-"):
            continue
        out[corpus_spec_name(path)] = load_spec(read_spec_text(path), source=str(path))
    return out


@dataclass(frozen=True)
class CorpusSpec:
    name: str  # the file's stem: the spec's identity in the baseline and in reports
    path: Path
    spec: GraphSpec


def specs_folder(corpus_dir: Path) -> Path:
    """Where a corpus keeps its specs: `DIR/specs/` when it exists, else `DIR` itself. A `specs`
    that is a symlink, or not a folder, is refused (UnsafePathError)."""
    specs = corpus_dir / "specs"
    return specs if os.path.lexists(specs) and check_plain(specs, what="corpus specs folder", folder=True) else corpus_dir


def load_corpus(corpus_dir: Path) -> list[CorpusSpec]:
    """Every `*.json` spec of a corpus, sorted by name; a bad file raises SpecError naming it."""
    if not corpus_dir.is_dir():
        raise SpecError(f"{corpus_dir}: corpus folder does not exist")
    folder = specs_folder(corpus_dir)
    result = []
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("baseline-"):
            continue
        name = corpus_spec_name(path)  # becomes a folder under --repro-dir: a slug or refused
        result.append(CorpusSpec(name, path, load_spec(read_spec_text(path), source=str(path))))
    if not result:
        raise SpecError(f"{folder}: no *.json specs in this corpus")
    return result
