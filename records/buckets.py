"""Bucket keys: one small frozen value per root cause, with a readable `str`.

A key is (kind, output dtype, device type, op signature, detail). The detail is the exception
type for error kinds and empty otherwise; the signature is the graph's sorted set of ops (and its
autocast and backward modes) until the minimizer supplies the minimized op pattern and its culprit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class BucketKey:
    kind: str
    dtype: str
    device_type: str
    signature: str
    detail: str = ""

    def __str__(self) -> str:
        detail = f" {self.detail}" if self.detail else ""
        return f"{self.kind}{detail} · {self.dtype} · {self.device_type} · {self.signature}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BucketKey:
        return cls(**d)
