"""What a case is compiled with: a backend plus options, as data (JSON-able, hashable).

`backend` is a registered torch.compile backend name (`inductor`, `aot_eager`, ...) or an import
path `module:function` to a user's backend. `inductor` holds Inductor config overrides as
(key, value) pairs, applied with `torch._inductor.config.patch` around the compile.

Invariant: every CompileConfig, whether built from the command line or read back from a store,
a bucket's case.json or a baseline, holds a backend that is a plain name or a `module:function`
of dotted identifiers, `dynamic` of True/False/None, a plain mode word, and Inductor overrides
keyed by dotted identifiers with JSON scalar values (`__post_init__` checks; ConfigError names
the field). Whether a stored `module:function` may be imported is the command's decision
(`check_stored_backend`): a store never picks code to import on its own.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from records.errors import ConfigError


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
BACKEND_NAME = re.compile(_IDENT)
BACKEND_IMPORT_PATH = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}")
INDUCTOR_KEY = re.compile(rf"{_IDENT}(\.{_IDENT})*")
MODE_WORD = re.compile(r"[a-z][a-z0-9-]{0,39}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def check_backend_syntax(name: Any, *, where: str = "backend") -> str:
    """`name` when it is a registered-name shape or a `module:function` path; ConfigError otherwise."""
    if not isinstance(name, str) or len(name) > 200 or not (BACKEND_NAME.fullmatch(name) or BACKEND_IMPORT_PATH.fullmatch(name)):
        raise ConfigError(f"{where}: expected a backend name or module:function but got {_short(name)}")
    return name


def _check_override_value(key: str, value: Any, where: str) -> None:
    ok = value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))
    if not ok or (isinstance(value, str) and len(value) > 200):
        raise ConfigError(f"{where}: Inductor override {key!r} must be a JSON scalar (finite number, string, bool or null) but got {_short(value)}")


@dataclass(frozen=True)
class CompileConfig:
    backend: str = "inductor"
    dynamic: bool | None = False
    mode: str | None = None
    inductor: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        check_backend_syntax(self.backend)
        if self.dynamic not in (True, False, None) or not isinstance(self.dynamic, (bool, type(None))):
            raise ConfigError(f"dynamic: expected true, false or null but got {_short(self.dynamic)}")
        if self.mode is not None and not (isinstance(self.mode, str) and MODE_WORD.fullmatch(self.mode)):
            raise ConfigError(f"mode: expected a torch.compile mode such as 'max-autotune' but got {_short(self.mode)}")
        if not isinstance(self.inductor, tuple):
            raise ConfigError(f"inductor: expected key/value pairs but got {_short(self.inductor)}")
        for pair in self.inductor:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) and INDUCTOR_KEY.fullmatch(pair[0])):
                raise ConfigError(f"inductor: expected a dotted config key but got {_short(pair)}")
            _check_override_value(pair[0], pair[1], "inductor")

    def with_inductor(self, **overrides: Any) -> CompileConfig:
        merged = dict(self.inductor) | overrides
        return replace(self, inductor=tuple(sorted(merged.items())))

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "dynamic": self.dynamic, "mode": self.mode, "inductor": dict(self.inductor)}

    @classmethod
    def from_dict(cls, d: Any) -> CompileConfig:
        """A config read back from JSON (a store, case.json, a baseline): checked like CLI input."""
        if not isinstance(d, dict):
            raise ConfigError(f"compile config: expected an object but got {_short(d)}")
        inductor = d.get("inductor") or {}
        if not isinstance(inductor, dict):
            raise ConfigError(f"inductor: expected an object of overrides but got {_short(inductor)}")
        return cls(
            backend=d.get("backend", "inductor"),
            dynamic=d.get("dynamic", False),
            mode=d.get("mode"),
            inductor=tuple(sorted(inductor.items())),
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
        key = key.strip()
        if not INDUCTOR_KEY.fullmatch(key):
            raise ConfigError(f"--inductor {item!r}: {key!r} is not a config key (dotted identifiers)")
        try:
            out[key] = json.loads(raw)
        except (json.JSONDecodeError, RecursionError, ValueError):
            out[key] = raw
        _check_override_value(key, out[key], f"--inductor {item!r}")
    return out
