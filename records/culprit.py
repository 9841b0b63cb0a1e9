"""Culprits as data: where the compiler under test went wrong, as the attribution ladder found it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Culprit:
    """Where the compiler went wrong, as data with a readable `summary`.

    stage: the first backend that shows the finding ("aot_eager", "aot_eager_decomp_partition",
    "inductor", or the user's backend); subsystem/detail: what the bisector named (e.g.
    "decomposition" / "aten.native_layer_norm"); fixes: Inductor switches that remove it;
    ladder: (rung, finding kind or "ok" or the error) for every rung run.
    """

    stage: str
    summary: str
    subsystem: str | None = None
    detail: str | None = None
    fixes: tuple[str, ...] = ()
    ladder: tuple[tuple[str, str], ...] = ()
    probes: tuple[tuple[str, str], ...] = ()
    bisect: str | None = None  # the raw BisectionResult, for the report

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "summary": self.summary,
            "subsystem": self.subsystem,
            "detail": self.detail,
            "fixes": list(self.fixes),
            "ladder": [list(r) for r in self.ladder],
            "probes": [list(p) for p in self.probes],
            "bisect": self.bisect,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Culprit:
        return cls(
            stage=d["stage"],
            summary=d["summary"],
            subsystem=d.get("subsystem"),
            detail=d.get("detail"),
            fixes=tuple(d.get("fixes") or ()),
            ladder=tuple(tuple(r) for r in d.get("ladder") or ()),
            probes=tuple(tuple(p) for p in d.get("probes") or ()),
            bisect=d.get("bisect"),
        )
