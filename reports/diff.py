"""What changed between two campaigns: new buckets, buckets gone (fixed or not reached), and
buckets whose severity or bounds changed, each section led by its root causes
(`divfuzz.reports.root_causes`) with their raw buckets counted beneath. `divfuzz diff OLD NEW` prints it
(terminal, `--json`, `--markdown`) and writes it as a page (`--html FILE`, `diff_html`).

`side_from_store` reads one side (a store, or one run of it; any object with the `Store` read
methods: this module never imports `fuzzer`); `diff_sides` is a pure function of two sides.

Invariants:
- a bucket is the same on both sides when its key's fields are (`BucketKey.identity`), or, with
  `match_device=False`, when they are equal but for the device type (CPU vs GPU stores);
- a bucket gone from NEW is "fixed" only when NEW ran one of its specs (the spec of a case of
  the bucket, or its minimized spec: what `fuzz --replay-known` replays) and that spec no longer
  landed in it; otherwise it is "not reached": nothing says whether it still diverges;
- bounds are measured over each side's own cases of the bucket: the largest ULP distance for
  float outputs, the largest step and the flip count for integer outputs;
- a bucket's root cause is its side's (`root_cause_groups` over that side's buckets); a new
  bucket whose root cause OLD already had is a new raw bucket of a known root cause, and a gone
  bucket whose root cause NEW still has is a raw bucket gone from a root cause that stays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from divfuzz.reports.store_view import StoreView
from divfuzz.reports.root_causes import culprit_of, root_cause_groups, severity_rank
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.errors import DivfuzzError
from divfuzz.reports.html import escaped, page_shell


@dataclass(frozen=True)
class BucketState:
    """One bucket as one side saw it."""

    id: int
    key: str
    kind: str
    dtype: str
    device_type: str
    signature: str
    detail: str
    severity: str
    reason: str
    culprit: str
    cases: int  # this side's cases in it
    max_ulp: int | None  # over float outputs of those cases; None without one
    max_step: int | None  # over integer outputs
    max_flips: int | None
    folder: str | None
    spec_digests: frozenset[str] = field(default=frozenset(), compare=False)
    identity: str = field(default="", compare=False)  # BucketKey.identity(): what matches it across sides
    any_device: str = field(default="", compare=False)  # the same with the device type left out
    root_cause: str = field(default="", compare=False)  # RootCause.identity() on its side
    root_cause_any_device: str = field(default="", compare=False)  # the same, device type left out
    root_cause_title: str = field(default="", compare=False)
    known: str = field(default="new", compare=False)  # upstream, of its root cause (divfuzz.records.known_bugs)

    def root_cause_id(self, match_device: bool) -> str:
        return self.root_cause if match_device else self.root_cause_any_device

    def bounds(self) -> dict[str, int | None]:
        return {"max_ulp": self.max_ulp, "max_step": self.max_step, "max_flips": self.max_flips}

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "key": self.key, "kind": self.kind, "dtype": self.dtype, "device_type": self.device_type,
            "signature": self.signature, "detail": self.detail, "severity": self.severity, "reason": self.reason, "culprit": self.culprit, "cases": self.cases,
            **self.bounds(), "folder": self.folder, "root_cause": self.root_cause_title,
        }


@dataclass(frozen=True)
class Side:
    label: str  # e.g. "runs/divfuzz.sqlite" or "runs/divfuzz.sqlite:3"
    buckets: dict[str, BucketState]  # by BucketKey.identity()
    ran: dict[str, frozenset[str]]  # spec digest -> the bucket keys its cases landed in ("" for none)
    setups: frozenset[str] = frozenset()  # "device, compile config" of its runs


@dataclass(frozen=True)
class Gone:
    bucket: BucketState
    status: str  # "fixed" | "not reached"
    evidence: str


@dataclass(frozen=True)
class Changed:
    old: BucketState
    new: BucketState
    what: tuple[str, ...]  # e.g. ("severity suspect -> bug", "max_ulp 3 -> 40")


@dataclass(frozen=True)
class StoreDiff:
    old: str
    new: str
    new_buckets: tuple[BucketState, ...]
    gone: tuple[Gone, ...]
    changed: tuple[Changed, ...]
    unchanged: int
    setups_differ: str = ""  # non-empty when the sides ran on other devices or configs: "fixed" then means less
    old_root_causes: frozenset[str] = frozenset()  # identities (as matched) of OLD's root causes
    new_root_causes: frozenset[str] = frozenset()
    match_device: bool = True

    def root_causes(self, section: str) -> list["RootCauseChange"]:
        """The root causes of a section ("new", "gone" or "changed"), each with its raw buckets
        of that section beneath; most severe first, then most buckets."""
        items = {"new": self.new_buckets, "gone": tuple(g.bucket for g in self.gone),
                 "changed": tuple(c.new for c in self.changed)}[section]
        groups: dict[str, list[BucketState]] = {}
        for b in items:
            groups.setdefault(b.root_cause_id(self.match_device) or b.identity, []).append(b)
        rows = []
        for identity, members in groups.items():
            members.sort(key=lambda b: (severity_rank(b.severity), -b.cases, b.id))
            if section == "new":
                status = "known root cause, new buckets" if identity in self.old_root_causes else "new root cause"
            elif section == "gone":
                status = "root cause still in NEW" if identity in self.new_root_causes else "root cause gone"
            else:
                status = "changed"
            rows.append(RootCauseChange(identity, members[0].root_cause_title or members[0].signature, members[0].severity,
                                        status, tuple(members), members[0].known))
        return sorted(rows, key=lambda r: (severity_rank(r.severity), -len(r.buckets), r.buckets[0].id))

    def to_dict(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "new_buckets": [b.to_dict() for b in self.new_buckets],
            "gone": [{**g.bucket.to_dict(), "status": g.status, "evidence": g.evidence} for g in self.gone],
            "changed": [{"old": c.old.to_dict(), "new": c.new.to_dict(), "what": list(c.what)} for c in self.changed],
            "unchanged": self.unchanged,
            "setups_differ": self.setups_differ,
            "root_causes": {
                section: [r.to_dict() for r in self.root_causes(section)] for section in ("new", "gone", "changed")
            },
        }


@dataclass(frozen=True)
class RootCauseChange:
    """A root cause in one section of a diff, with that section's raw buckets of it."""

    identity: str
    title: str
    severity: str  # its most severe bucket's, in this section
    status: str  # new: "new root cause" | "known root cause, new buckets"; gone: "root cause gone" | "root cause still in NEW"
    buckets: tuple[BucketState, ...]
    known: str = "new"  # upstream: "known: pytorch#N (state)" or "new" (divfuzz.records.known_bugs)

    def counted(self) -> str:
        n = len(self.buckets)
        return f"{n} bucket{'s' if n != 1 else ''}: " + ", ".join(f"#{b.id} {b.severity}" for b in self.buckets)

    def to_dict(self) -> dict[str, Any]:
        return {"root_cause": self.title, "severity": self.severity, "status": self.status, "upstream": self.known,
                "buckets": [b.id for b in self.buckets]}


def _max(values) -> int | None:
    values = [int(v) for v in values]
    return max(values) if values else None


def _minimized_digest(bucket) -> str | None:
    """The digest of a bucket's minimized spec, when it has one that loads."""
    spec = (bucket.minimized or {}).get("spec")
    if spec is None:
        return None
    try:
        return GraphSpec.from_dict(spec, source=f"bucket {bucket.id} minimized spec").digest()
    except (DivfuzzError, ValueError, KeyError, TypeError):
        return None


def side_from_store(store: StoreView, *, run_id: int | None = None, label: str) -> Side:
    """One side: the buckets a store (or a run of it) has, with bounds from its own cases, and
    every spec it ran. Severity is the bucket's as stored (the most severe of its cases)."""
    cases = store.case_summaries(run_id=run_id)
    rows = store.buckets(run_id=run_id)
    root_cause_of = {b.id: rc for rc in root_cause_groups(rows) for b in rc.buckets}
    setups = frozenset(
        f"{r['device']}, {json.dumps(r['config'], sort_keys=True)}" for r in store.runs() if run_id is None or r["id"] == run_id
    )
    key_of = {b.id: b.key.identity() for b in store.buckets()}
    by_bucket: dict[int, list[dict]] = {}
    ran: dict[str, set[str]] = {}
    for c in cases:
        ran.setdefault(c["spec_digest"], set()).add(key_of.get(c["bucket_id"], "") if c["bucket_id"] is not None else "")
        if c["bucket_id"] is not None:
            by_bucket.setdefault(c["bucket_id"], []).append(c)
    buckets = {}
    for b in rows:
        own = by_bucket.get(b.id, [])
        outputs = [o for c in own for o in c["verdict"].get("outputs") or ()]
        floats = [o["float"] for o in outputs if o.get("float") and o["float"]["n_diff"]]
        ints = [o["int"] for o in outputs if o.get("int") and o["int"]["flips"]]
        digests = {c["spec_digest"] for c in own}
        minimized = _minimized_digest(b)
        if minimized:
            digests.add(minimized)
        buckets[b.key.identity()] = BucketState(
            id=b.id, key=str(b.key), kind=b.key.kind, dtype=b.key.dtype, device_type=b.key.device_type,
            signature=b.key.ops_text(), detail=b.key.detail, severity=b.severity, reason=(b.severity_reason or {}).get("detail", ""), culprit=culprit_of(b),
            cases=len(own), max_ulp=_max(f["max_ulp"] for f in floats), max_step=_max(i["max_step"] for i in ints),
            max_flips=_max(i["flips"] for i in ints), folder=b.folder, spec_digests=frozenset(digests),
            root_cause=root_cause_of[b.id].identity(), root_cause_any_device=root_cause_of[b.id].identity(match_device=False),
            root_cause_title=root_cause_of[b.id].title, known=root_cause_of[b.id].known,
            identity=b.key.identity(), any_device=replace(b.key, device_type="any device").identity(),
        )
    return Side(label=label, buckets=buckets, ran={d: frozenset(k) for d, k in ran.items()}, setups=setups)


def _identity(key: str, side: Side, match_device: bool) -> str:
    return key if match_device else side.buckets[key].any_device


def diff_sides(old: Side, new: Side, *, match_device: bool = True) -> StoreDiff:
    """New buckets, gone buckets (fixed or not reached), and changed ones; see the module docstring."""
    old_ids = {_identity(k, old, match_device): k for k in old.buckets}
    new_ids = {_identity(k, new, match_device): k for k in new.buckets}
    new_buckets = tuple(new.buckets[new_ids[i]] for i in sorted(new_ids.keys() - old_ids.keys(), key=lambda i: new.buckets[new_ids[i]].id))
    gone = []
    for i in sorted(old_ids.keys() - new_ids.keys(), key=lambda i: old.buckets[old_ids[i]].id):
        b = old.buckets[old_ids[i]]
        replayed = sorted(d for d in b.spec_digests if d in new.ran)
        if replayed:
            landed = sorted(k for d in replayed for k in new.ran[d] if k)
            where = f"; it now lands in {landed[0]}" if landed else "; no finding"
            gone.append(Gone(b, "fixed", f"spec {replayed[0]} ran in {new.label}{where}"))
        else:
            gone.append(Gone(b, "not reached", f"none of its {len(b.spec_digests)} spec(s) ran in {new.label}"))
    changed, unchanged = [], 0
    for i in sorted(old_ids.keys() & new_ids.keys(), key=lambda i: new.buckets[new_ids[i]].id):
        o, n = old.buckets[old_ids[i]], new.buckets[new_ids[i]]
        what = []
        if o.severity != n.severity:
            what.append(f"severity {o.severity} -> {n.severity}")
        for name, ov in o.bounds().items():
            nv = n.bounds()[name]
            if ov != nv:
                what.append(f"{name} {ov if ov is not None else '-'} -> {nv if nv is not None else '-'}")
        if what:
            changed.append(Changed(o, n, tuple(what)))
        else:
            unchanged += 1
    setups = ""
    if old.setups != new.setups:
        setups = f"the sides ran under other setups: OLD {sorted(old.setups)}, NEW {sorted(new.setups)}"
    return StoreDiff(old.label, new.label, new_buckets, tuple(gone), tuple(changed), unchanged, setups,
                     old_root_causes=frozenset(b.root_cause_id(match_device) for b in old.buckets.values()),
                     new_root_causes=frozenset(b.root_cause_id(match_device) for b in new.buckets.values()),
                     match_device=match_device)


# ---- renderings ---------------------------------------------------------------------------------


def diff_json(d: StoreDiff) -> str:
    return json.dumps(d.to_dict(), indent=2)


def _md(text: str) -> str:
    """Table-cell text: pipes and newlines would break the row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def diff_markdown(d: StoreDiff) -> str:
    lines = [
        f"# divfuzz diff: `{_md(d.old)}` → `{_md(d.new)}`", "",
        f"{len(d.new_buckets)} new, {len(d.gone)} gone ({sum(g.status == 'fixed' for g in d.gone)} fixed, "
        f"{sum(g.status == 'not reached' for g in d.gone)} not reached), {len(d.changed)} changed, {d.unchanged} unchanged.",
        "", _root_cause_counts(d) + ".",
    ]
    if d.setups_differ:
        lines += ["", f"> Note: {_md(d.setups_differ)}."]
    if d.new_buckets:
        lines += ["", "## new", ""] + _root_cause_list(d, "new")
        lines += ["", "| id | severity | key | culprit | cases | bounds |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {b.id} | {b.severity} | `{_md(b.key)}` | {_md(b.culprit)} | {b.cases} | {_bounds(b)} |" for b in d.new_buckets]
    if d.gone:
        lines += ["", "## gone", ""] + _root_cause_list(d, "gone")
        lines += ["", "| id | status | severity | key | why |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {g.bucket.id} | {g.status} | {g.bucket.severity} | `{_md(g.bucket.key)}` | {_md(g.evidence)} |" for g in d.gone]
    if d.changed:
        lines += ["", "## changed", ""] + _root_cause_list(d, "changed")
        lines += ["", "| id (old → new) | key | what changed |", "| --- | --- | --- |"]
        lines += [f"| {c.old.id} → {c.new.id} | `{_md(c.new.key)}` | {_md('; '.join(c.what))} |" for c in d.changed]
    return "\n".join(lines) + "\n"


def _root_cause_counts(d: StoreDiff) -> str:
    """`root causes: 1 new, 2 known with new buckets, 1 gone, 1 still in NEW`."""
    new, gone = d.root_causes("new"), d.root_causes("gone")
    return (f"root causes: {sum(r.status == 'new root cause' for r in new)} new, "
            f"{sum(r.status != 'new root cause' for r in new)} known with new buckets, "
            f"{sum(r.status == 'root cause gone' for r in gone)} gone, "
            f"{sum(r.status != 'root cause gone' for r in gone)} still in NEW with buckets gone")


def _root_cause_list(d: StoreDiff, section: str) -> list[str]:
    """Markdown: a section's root causes, each with its raw buckets counted beneath."""
    out = []
    for r in d.root_causes(section):
        status = "" if section == "changed" else f" ({r.status})"
        out += [f"- **`{_md(r.title)}`** [{_md(r.severity)}]{status} · upstream {_md(r.known)}", f"  - {_md(r.counted())}"]
    return out


def _bounds(b: BucketState) -> str:
    return ", ".join(f"{k} {v}" for k, v in b.bounds().items() if v is not None) or "-"


def diff_text(d: StoreDiff) -> str:
    """Plain lines for a terminal or a log."""
    lines = [
        f"diff {d.old} -> {d.new}: {len(d.new_buckets)} new, {len(d.gone)} gone, {len(d.changed)} changed, {d.unchanged} unchanged",
        f"  {_root_cause_counts(d)}",
    ]
    if d.setups_differ:
        lines.append(f"  note: {d.setups_differ}")
    for section in ("new", "gone", "changed"):
        for r in d.root_causes(section):
            status = "" if section == "changed" else f" ({r.status})"
            lines.append(f"  {section} root cause [{r.severity}] {r.title}{status} · upstream {r.known}")
            lines.append(f"      {r.counted()}")
    if d.new_buckets or d.gone or d.changed:
        lines.append("  raw buckets:")
    for b in d.new_buckets:
        lines.append(f"  new      #{b.id} [{b.severity}] {b.key} ({b.cases} cases; {_bounds(b)})")
    for g in d.gone:
        lines.append(f"  {g.status:<11} #{g.bucket.id} [{g.bucket.severity}] {g.bucket.key} ({g.evidence})")
    for c in d.changed:
        lines.append(f"  changed  #{c.old.id}->#{c.new.id} {c.new.key}: {'; '.join(c.what)}")
    return "\n".join(lines) + "\n"


def diff_html(d: StoreDiff) -> str:
    """The diff as one self-contained page (the report's shell: no script, the CSP, inline style):
    new buckets, gone ones (fixed, then not reached), changed ones. Every stored string escaped."""
    def chip(sev: str) -> str:
        return f'<span class="chip sev-{escaped(sev)}">{escaped(sev)}</span>'

    def table(head: tuple[str, ...], rows: list[tuple[str, ...]], cls: str, row_ids: list[str]) -> str:
        return (
            f'<table class="rows-{cls}"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(f'<tr data-key="{escaped(k)}">' + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for k, r in zip(row_ids, rows))
            + "</tbody></table>"
        )

    def section(sid: str, title: str, count: int, body: str, empty: str, h: str = "h2") -> str:
        return f'<section id="{sid}"><{h}>{title} ({count})</{h}>{body if count else f"<p>{empty}</p>"}</section>'

    def root_causes(name: str) -> str:
        """The section's root causes first, each with its raw buckets counted."""
        rows = d.root_causes(name)
        if not rows:
            return ""
        return (
            f'<table class="root-causes rc-{name}"><thead><tr><th>root cause</th><th>severity</th>'
            + ("" if name == "changed" else "<th>status</th>") + "<th>raw buckets</th></tr></thead><tbody>"
            + "".join(
                f'<tr data-root-cause="{escaped(r.title)}"><td><code>{escaped(r.title)}</code></td><td>{chip(r.severity)}</td>'
                + ("" if name == "changed" else f"<td>{escaped(r.status)}</td>") + f"<td>{escaped(r.counted())}</td></tr>"
                for r in rows
            )
            + "</tbody></table>"
        )

    new_rows = [
        (str(b.id), chip(b.severity), f"<code>{escaped(b.key)}</code>", escaped(b.culprit), escaped(b.reason), str(b.cases), escaped(_bounds(b)))
        for b in d.new_buckets
    ]
    fixed = [g for g in d.gone if g.status == "fixed"]
    unreached = [g for g in d.gone if g.status != "fixed"]

    def gone_rows(gs):
        return [(str(g.bucket.id), chip(g.bucket.severity), f"<code>{escaped(g.bucket.key)}</code>", escaped(g.bucket.culprit),
                 escaped(_bounds(g.bucket)), escaped(g.evidence)) for g in gs]

    changed_rows = [
        (f"{c.old.id} → {c.new.id}", f"{chip(c.old.severity)} → {chip(c.new.severity)}", f"<code>{escaped(c.new.key)}</code>",
         escaped(c.new.culprit), "<br>".join(escaped(w) for w in c.what))
        for c in d.changed
    ]
    gone_head = ("id", "severity", "key", "culprit", "bounds (OLD)", "why")
    body = (
        f"<header><h1>divfuzz diff</h1><p class=\"sides\">OLD <code>{escaped(d.old)}</code> → NEW <code>{escaped(d.new)}</code></p>"
        f'<p class="summary">{len(d.new_buckets)} new, {len(d.gone)} gone ({len(fixed)} fixed, {len(unreached)} not reached), '
        f"{len(d.changed)} changed, {d.unchanged} unchanged; {escaped(_root_cause_counts(d))}</p>"
        + (f'<p class="setups">note: {escaped(d.setups_differ)}</p>' if d.setups_differ else "")
        + "</header>"
        + section("new", "new", len(new_rows),
                  root_causes("new") + table(("id", "severity", "key", "culprit", "why", "cases", "bounds"), new_rows, "new", [b.key for b in d.new_buckets]),
                  "no new buckets")
        + f'<section id="gone"><h2>gone ({len(d.gone)})</h2>{root_causes("gone")}'
        + section("fixed", "fixed: NEW ran their spec and it no longer lands there", len(fixed),
                  table(gone_head, gone_rows(fixed), "fixed", [g.bucket.key for g in fixed]), "none fixed", "h3")
        + section("not-reached", "not reached: NEW never ran their spec (still there or not: unknown)", len(unreached),
                  table(gone_head, gone_rows(unreached), "not-reached", [g.bucket.key for g in unreached]), "none unreached", "h3")
        + "</section>"
        + section("changed", "changed", len(changed_rows),
                  root_causes("changed") + table(("id (OLD → NEW)", "severity", "key", "culprit", "what changed"), changed_rows, "changed",
                        [c.new.key for c in d.changed]),
                  "no bucket changed severity or bounds")
    )
    return page_shell(f"divfuzz diff: {d.old} -> {d.new}", body)
