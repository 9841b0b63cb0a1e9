"""What a case is compiled with: a backend plus options, as data (JSON-able, hashable).

`backend` is a registered torch.compile backend name (`inductor`, `aot_eager`, ...) or an import
path `module:function` to a user's backend. `inductor` holds Inductor config overrides as
(key, value) pairs, applied with `torch._inductor.config.patch` around the compile.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from fuzzer.errors import ConfigError


@dataclass(frozen=True)
class CompileConfig:
    backend: str = "inductor"
    dynamic: bool | None = False
    mode: str | None = None
    inductor: tuple[tuple[str, Any], ...] = field(default=())

    def with_inductor(self, **overrides: Any) -> CompileConfig:
        merged = dict(self.inductor) | overrides
        return replace(self, inductor=tuple(sorted(merged.items())))

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "dynamic": self.dynamic, "mode": self.mode, "inductor": dict(self.inductor)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompileConfig:
        return cls(
            backend=d.get("backend", "inductor"),
            dynamic=d.get("dynamic", False),
            mode=d.get("mode"),
            inductor=tuple(sorted((d.get("inductor") or {}).items())),
        )

    def describe(self) -> str:
        extra = "".join(f" {k}={v!r}" for k, v in self.inductor)
        return f"{self.backend}{' dynamic' if self.dynamic else ''}{f' mode={self.mode}' if self.mode else ''}{extra}"


def parse_inductor_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    """`key=value` strings (value as JSON, else a plain string) into a dict; errors name the item."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"Expected KEY=VALUE for --inductor but got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def resolve_backend(name: str):
    """The backend callable or registered name that `torch.compile(backend=...)` takes.

    Raises ConfigError for an unknown name or an import path that does not resolve.
    """
    import torch._dynamo

    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ConfigError(f"backend {name!r}: cannot import module {module_name!r} ({e})") from None
        try:
            return getattr(module, attr)
        except AttributeError:
            raise ConfigError(f"backend {name!r}: module {module_name!r} has no attribute {attr!r}") from None
    known = set(torch._dynamo.list_backends(exclude_tags=())) | {"eager", "aot_eager", "aot_eager_decomp_partition"}
    if name not in known:
        raise ConfigError(f"unknown backend {name!r}; registered: {', '.join(sorted(known))}, or use module:function")
    return name


def validate_inductor_overrides(overrides: dict[str, Any]) -> None:
    import torch._inductor.config as inductor_config

    for key in overrides:
        obj = inductor_config
        parts = key.split(".")
        for p in parts[:-1]:
            obj = getattr(obj, p, None)
        if obj is None or not hasattr(obj, parts[-1]):
            raise ConfigError(f"unknown Inductor config key {key!r} in --inductor")
