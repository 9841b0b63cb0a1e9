"""Culprits as data: where the compiler under test went wrong, as the attribution ladder found it.

Every readable text about a culprit is built here from its fields (`summarize`, `Culprit.describe`,
`BisectResult.describe`), never by parsing the `repr` of a torch object. Torch-free: the
bisector's own `BisectionResult` is copied field by field into a `BisectResult` where it is run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from divfuzz.records.backends import INDUCTOR
from divfuzz.records.buckets import CulpritKey
from divfuzz.records.errors import StoreError

# The bisector's debug_info for a decomposition is the OpOverload's repr:
# "<OpOverload(op='aten.native_layer_norm', overload='default')>".
_OPOVERLOAD = re.compile(r"op='([^']+)'")
# For a lowering it is the FX node's repr: torch 2.x gives the node's name, which is its op's name
# and, from the graph's second node of that op on, "_N" ("div_1"); a longer repr names a target.
_TARGET = re.compile(r"target=([^,)\s]+)")
_NODE_NUMBER = re.compile(r"_\d+$")
_FIELD_TEXT_LIMIT = 500


def readable_detail(subsystem: str | None, debug_info: str | None) -> str | None:
    """The op (or a short text) that a bisector's `debug_info` names for `subsystem`: a lowered
    node's name without its number ("div_1" and "div" are both the lowering of div)."""
    if not debug_info:
        return None
    m = _OPOVERLOAD.search(debug_info)
    if m:
        return m.group(1)
    if subsystem == "lowerings":
        t = _TARGET.search(debug_info)
        return t.group(1) if t else _NODE_NUMBER.sub("", debug_info[:80])
    return debug_info[:80]


def _optional(d: dict, key: str, kind: type, where: str) -> Any:
    value = d.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise StoreError(f"{where}: {key} must be a {kind.__name__} or null but got {value!r:.80}")
    return value


@dataclass(frozen=True)
class BisectResult:
    """What `torch._inductor.compiler_bisector` named, as plain fields.

    backend: the first backend that shows the failure ("aot_eager_decomp_partition", "inductor");
    subsystem: the part inside it ("decomposition", "lowerings", "inductor_emulate_precision_casts");
    bisect_number: how many applications of the subsystem it took to fail (None for a switch);
    debug_info: the bisector's text for that application (an OpOverload or node repr, torch's own).
    """

    backend: str
    subsystem: str | None = None
    bisect_number: int | None = None
    debug_info: str | None = None

    @property
    def detail(self) -> str | None:
        """The op the failing application touched (e.g. "aten.native_layer_norm"), when known."""
        return readable_detail(self.subsystem, self.debug_info)

    def describe(self) -> str:
        """e.g. "inductor / lowerings, application #0 (aten.eq)"."""
        text = self.backend + (f" / {self.subsystem}" if self.subsystem else "")
        if self.bisect_number is not None:
            text += f", application #{self.bisect_number}"
        return text + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict:
        return {"backend": self.backend, "subsystem": self.subsystem, "bisect_number": self.bisect_number, "debug_info": self.debug_info}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "bisect") -> BisectResult:
        """A result read back from JSON (a store, analysis.json, a worker's answer): types checked."""
        if not isinstance(d, dict):
            raise StoreError(f"{where}: expected an object but got {d!r:.80}")
        backend = _optional(d, "backend", str, where)
        if backend is None:
            raise StoreError(f"{where}: backend is missing")
        debug_info = _optional(d, "debug_info", str, where)
        return cls(
            backend=backend[:_FIELD_TEXT_LIMIT],
            subsystem=_optional(d, "subsystem", str, where),
            bisect_number=_optional(d, "bisect_number", int, where),
            debug_info=None if debug_info is None else debug_info[:_FIELD_TEXT_LIMIT],
        )


@dataclass(frozen=True)
class Culprit:
    """Where the compiler went wrong, as data with a readable `summary`.

    stage: the first backend that shows the finding ("aot_eager", "aot_eager_decomp_partition",
    "inductor", or the user's backend); subsystem/detail: what the bisector named (e.g.
    "decomposition" / "aten.native_layer_norm"); fixes: Inductor switches that remove it;
    ladder: (rung, finding kind or "ok" or the error) for every rung run; bisect: the bisector's
    result as fields; bisect_note: text about the bisector when it has no result to give (it
    failed), or the raw text an older store kept in place of the fields.
    Invariant: `summary == summarize(self)` for every culprit divfuzz builds (older stores keep
    the summary they were written with: it is part of their bucket keys).
    """

    stage: str
    summary: str
    subsystem: str | None = None
    detail: str | None = None
    fixes: tuple[str, ...] = ()
    ladder: tuple[tuple[str, str], ...] = ()
    probes: tuple[tuple[str, str], ...] = ()
    bisect: BisectResult | None = None
    bisect_note: str | None = None

    def with_bisect(self, result: BisectResult) -> Culprit:
        """This culprit narrowed by the bisector's result, its summary rebuilt."""
        narrowed = replace(self, stage=result.backend or self.stage, subsystem=result.subsystem, detail=result.detail, bisect=result)
        return replace(narrowed, summary=summarize(narrowed))

    def describe(self) -> str:
        """The summary, plus which application of its subsystem the bisector blamed:
        e.g. "inductor lowering of aten.eq (bisect #0)"."""
        if self.bisect is not None and self.bisect.bisect_number is not None:
            return f"{self.summary} (bisect #{self.bisect.bisect_number})"
        return self.summary

    def key(self) -> CulpritKey:
        """The fields that make a root cause (`divfuzz.records.buckets.CulpritKey`): the stage,
        the subsystem and its detail, and the switch the summary names as removing it."""
        return CulpritKey(stage=self.stage, subsystem=self.subsystem or "", detail=self.detail or "",
                          switch=switch_named(self) or "")

    def bisect_text(self) -> str | None:
        """One line about the bisector for notes and reports, or None when it did not run."""
        if self.bisect is not None:
            return self.bisect.describe()
        return self.bisect_note

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "summary": self.summary,
            "subsystem": self.subsystem,
            "detail": self.detail,
            "fixes": list(self.fixes),
            "ladder": [list(r) for r in self.ladder],
            "probes": [list(p) for p in self.probes],
            "bisect": None if self.bisect is None else self.bisect.to_dict(),
            "bisect_note": self.bisect_note,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Culprit:
        """A culprit read back from a store or analysis.json. Stores written before the bisector's
        result was kept as fields hold it as one string (its repr, or "bisector failed: ..."):
        that text is kept as `bisect_note`, shown as is and never parsed."""
        bisect = d.get("bisect")
        note = d.get("bisect_note")
        if isinstance(bisect, str):
            bisect, note = None, note or bisect
        return cls(
            stage=d["stage"],
            summary=d["summary"],
            subsystem=d.get("subsystem"),
            detail=d.get("detail"),
            fixes=tuple(d.get("fixes") or ()),
            ladder=tuple(tuple(r) for r in d.get("ladder") or ()),
            probes=tuple(tuple(p) for p in d.get("probes") or ()),
            bisect=None if bisect is None else BisectResult.from_dict(bisect, where="culprit.bisect"),
            bisect_note=note,
        )


def bisect_text_of(culprit: dict) -> str | None:
    """`Culprit.bisect_text` of a culprit dict (analysis.json, a store row, a partial dict in a
    report): the fields described, an older store's raw text as is, or None."""
    bisect = culprit.get("bisect")
    if isinstance(bisect, str):
        return bisect
    if bisect is not None:
        return BisectResult.from_dict(bisect, where="culprit.bisect").describe()
    return culprit.get("bisect_note")


# How a `bisect_note` starts when the budget ended before the bisector could name a subsystem
# (`minimize --module --budget`): the summary then says so instead of "no single subsystem".
NOT_ATTRIBUTED = "culprit not attributed"


# The bisector's subsystems that name one part of the compiler once it gives the op it touched.
_ONE_PART_SUBSYSTEMS = ("decomposition", "lowerings", "pre_grad_passes", "joint_graph_passes", "post_grad_passes")


def names_one_part(culprit: Any) -> bool:
    """Whether a culprit, as stored (`Culprit.to_dict`), names one part of the compiler from its
    fields: a decomposition, a lowering or a graph pass with the op it touched (what `summarize`
    writes as "decomposition of X", "inductor lowering of X", "inductor ... passes: X"), which a
    maintainer mends once for every graph that meets it. A switch that removes a finding, a stage
    alone or an unattributed culprit does not."""
    return (isinstance(culprit, dict) and culprit.get("subsystem") in _ONE_PART_SUBSYSTEMS
            and isinstance(culprit.get("detail"), str) and bool(culprit["detail"]))


def switch_named(c: Culprit) -> str | None:
    """The switch that `summarize` names as removing the finding ("inductor: X removes it"), or
    None when the summary names a part of the compiler instead (a decomposition or a lowering
    that a switch also hides is still that part's defect)."""
    if c.subsystem == "decomposition" and c.detail:
        return None
    if c.subsystem and c.subsystem.startswith("inductor_"):
        return c.subsystem.removeprefix("inductor_")
    if c.stage == INDUCTOR and c.fixes and not c.subsystem:
        return c.fixes[0]
    if c.subsystem:
        return None
    return c.fixes[0] if c.fixes else None


def summarize(c: Culprit) -> str:
    """A short sentence naming the culprit, from its fields: used in bucket keys, repro headers
    and reports, for campaign cases and user modules alike."""
    if c.subsystem == "decomposition" and c.detail:
        return f"decomposition of {c.detail}"
    if c.subsystem and c.subsystem.startswith("inductor_") and c.subsystem.removeprefix("inductor_") in c.fixes:
        return f"inductor: {c.subsystem.removeprefix('inductor_')} removes it"
    if c.stage == INDUCTOR and c.fixes and not c.subsystem:
        return f"inductor: {c.fixes[0]} removes it"
    if c.subsystem == "lowerings" and c.detail:
        return f"inductor lowering of {c.detail}"
    if c.subsystem in ("pre_grad_passes", "joint_graph_passes", "post_grad_passes") and c.detail:
        return f"inductor {c.subsystem.replace('_', ' ')}: {c.detail}"
    if c.subsystem and c.subsystem.startswith("inductor_"):
        return f"inductor: {c.subsystem.removeprefix('inductor_')} removes it"
    if c.subsystem:
        return f"{c.stage}: {c.subsystem}" + (f" ({c.detail})" if c.detail else "")
    if c.fixes:
        return f"{c.stage}: {c.fixes[0]} removes it"
    if c.bisect_note and c.bisect_note.startswith(NOT_ATTRIBUTED):  # the bisector never finished: no claim
        return f"{c.stage} ({c.bisect_note})"
    return f"{c.stage} (no single subsystem)"
