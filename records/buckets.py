"""Bucket keys: a finding's identity as fields, one small frozen value per bucket.

A key says what was found (kind, output dtype, device type), in which graph (its ops and modes),
how it was judged (the severity rule, and the mechanism that explains it when one does) and,
once attributed, where the compiler went wrong (`CulpritKey`). Invariants:
- identity is the fields: `identity()` is the canonical JSON of `to_dict()`, what a store keys
  buckets, analyses and root causes by; `str()` is for display only and nothing parses it;
- the program features (layouts, dynamic shapes, mode) are fields of their own, written only
  when set, so a key stored before them keeps its identity;
- a raw key (before analysis) names the graph's sorted op set, or, for a compiler error raised at
  a known site, the site instead of the ops (graphs of any ops that trip one assertion share one
  bucket); a root-cause key names the minimized graph's ops in order and the culprit, and keeps
  the raw key's rule and mechanism (the minimizer keeps them);
- `from_dict` checks every field's type: a key read from a store or a file is untrusted data.
Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from divfuzz.records.errors import StoreError

_TEXT_LIMIT = 500


def _text(d: dict, name: str, where: str, *, default: str | None = "") -> str:
    value = d.get(name, default)
    if value is None and default is None:
        raise StoreError(f"{where}: {name} is missing")
    if not isinstance(value, str):
        raise StoreError(f"{where}: {name} must be a string but got {value!r:.80}")
    return value[:_TEXT_LIMIT]


@dataclass(frozen=True)
class CulpritKey:
    """The fields of a culprit that make a root cause (`divfuzz.records.culprit.Culprit` holds the
    rest: the ladder, the probes, the bisector's text).

    stage: the first backend that shows the finding ("aot_eager", "aot_eager_decomp_partition",
    "inductor", a user's backend); subsystem/detail: the part inside it and the op it touched
    ("lowerings" / "aten.div"); switch: the documented switch that removes it
    ("emulate_precision_casts"), "" when none does.
    """

    stage: str
    subsystem: str = ""
    detail: str = ""
    switch: str = ""

    def describe(self) -> str:
        """A short sentence for display, e.g. "inductor lowering of aten.div"."""
        if self.subsystem == "decomposition" and self.detail:
            return f"decomposition of {self.detail}"
        if self.subsystem == "lowerings" and self.detail:
            return f"inductor lowering of {self.detail}"
        if self.subsystem.endswith("_passes") and self.detail:
            return f"inductor {self.subsystem.replace('_', ' ')}: {self.detail}"
        if self.switch:
            return f"{self.stage}: {self.switch} removes it"
        if self.subsystem:
            return f"{self.stage}: {self.subsystem}" + (f" ({self.detail})" if self.detail else "")
        return f"{self.stage} (no single subsystem)"

    def to_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "subsystem": self.subsystem, "detail": self.detail, "switch": self.switch}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "culprit key") -> CulpritKey:
        if not isinstance(d, dict):
            raise StoreError(f"{where}: expected an object but got {d!r:.80}")
        return cls(stage=_text(d, "stage", where, default=None), subsystem=_text(d, "subsystem", where),
                   detail=_text(d, "detail", where), switch=_text(d, "switch", where))


@dataclass(frozen=True)
class BucketKey:
    """A finding's identity (see the module docstring for the invariants).

    kind: a `FindingKind` value; dtype: the finding output's dtype ("-" for errors);
    device_type: "cpu", "cuda", ...; ops: the graph's ops (raw: sorted and deduplicated; a root
    cause: the minimized graph's, in order), empty for an error keyed by its site;
    autocast/backward: the graph's modes; detail: an error's exception type, and "A vs B" for a
    compiler-against-compiler case; site: where the compiler raised an error (masked: numbers and
    names replaced); rule: the severity rule its cases were rated by; mechanism: the mechanism
    that explains the divergence without a compiler defect ("" when none does); culprit: None
    until attribution names it.
    """

    kind: str
    dtype: str
    device_type: str
    ops: tuple[str, ...] = ()
    autocast: str = ""
    backward: bool = False
    detail: str = ""
    site: str = ""
    rule: str = ""
    mechanism: str = ""
    culprit: CulpritKey | None = field(default=None)
    # The graph's program features beyond a pure static graph of contiguous inputs, "" for none
    # (keys stored before them read so, and keep their identity: `to_dict` leaves them out):
    # its inputs' layouts ("transposed+strided"), how it compiles for shapes ("marked", "all")
    # and its torch.compile mode ("reduce-overhead"). In-place ops and views are in `ops`.
    layout: str = ""
    dynamic: str = ""
    mode: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.ops, str):
            raise TypeError(f"Expected ops as a sequence of op names but got the string {self.ops!r}")
        if not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))

    # ---- display -------------------------------------------------------------------------------
    def ops_text(self) -> str:
        """The graph part for display: `div+floor (autocast bfloat16, backward)`, or `raised: <site>`."""
        if not self.ops and self.site:
            return f"raised: {self.site}"
        text = "+".join(self.ops) or "(empty)"
        modes = [f"autocast {self.autocast}"] * bool(self.autocast) + ["backward"] * self.backward
        modes += [f"{self.layout} inputs"] * bool(self.layout) + [f"dynamic {self.dynamic}"] * bool(self.dynamic)
        modes += [f"mode {self.mode}"] * bool(self.mode)
        return f"{text} ({', '.join(modes)})" if modes else text

    def __str__(self) -> str:
        detail = f" {self.detail}" if self.detail else ""
        text = f"{self.kind}{detail} · {self.dtype} · {self.device_type} · {self.ops_text()}"
        if self.culprit is not None:
            text += f" @ {self.culprit.describe()}"
        if self.mechanism:
            text += f" · explained: {self.mechanism}"
        return text

    # ---- identity ------------------------------------------------------------------------------
    def identity(self) -> str:
        """The canonical text of the fields: equal keys, equal text; what a store keys rows by."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def with_culprit(self, culprit: CulpritKey | None) -> BucketKey:
        return replace(self, culprit=culprit)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dtype": self.dtype, "device_type": self.device_type, "ops": list(self.ops),
                "autocast": self.autocast, "backward": self.backward, "detail": self.detail, "site": self.site,
                "rule": self.rule, "mechanism": self.mechanism,
                "culprit": None if self.culprit is None else self.culprit.to_dict()} | {
                    name: value for name, value in (("layout", self.layout), ("dynamic", self.dynamic), ("mode", self.mode)) if value}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "bucket key") -> BucketKey:
        """A key read back from a store or a file, every field's type checked (StoreError naming `where`)."""
        if not isinstance(d, dict):
            raise StoreError(f"{where}: expected an object but got {d!r:.80}")
        if "signature" in d and "ops" not in d:
            raise StoreError(f"{where}: a key in the text form of stores before schema 5, which divfuzz converts "
                             "when it opens such a store; in a current store it is a damaged row")
        ops = d.get("ops", [])
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise StoreError(f"{where}: ops must be a list of strings but got {ops!r:.80}")
        backward = d.get("backward", False)
        if not isinstance(backward, bool):
            raise StoreError(f"{where}: backward must be true or false but got {backward!r:.80}")
        culprit = d.get("culprit")
        return cls(kind=_text(d, "kind", where, default=None), dtype=_text(d, "dtype", where, default=None),
                   device_type=_text(d, "device_type", where, default=None), ops=tuple(o[:_TEXT_LIMIT] for o in ops),
                   autocast=_text(d, "autocast", where), backward=backward, detail=_text(d, "detail", where),
                   site=_text(d, "site", where), rule=_text(d, "rule", where), mechanism=_text(d, "mechanism", where),
                   culprit=None if culprit is None else CulpritKey.from_dict(culprit, where=f"{where}.culprit"),
                   layout=_text(d, "layout", where), dynamic=_text(d, "dynamic", where), mode=_text(d, "mode", where))

    @classmethod
    def from_identity(cls, text: str, *, where: str = "bucket key") -> BucketKey:
        try:
            return cls.from_dict(json.loads(text), where=where)
        except json.JSONDecodeError as e:
            raise StoreError(f"{where}: not a bucket key ({e})") from None
