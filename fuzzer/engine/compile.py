"""The one place divfuzz turns a function into its compiled form: backends resolved, Inductor
overrides checked and applied, decompositions removed, and `torch.compile` called.

Every path compiles through here: the campaign's cases, every rung of the attribution ladder,
the probes and the bisector (all through `divfuzz.fuzzer.engine.execute`), user modules' ladder, reducer
and bisector (`divfuzz.fuzzer.triage.user_module`) and whole-model capture (`divfuzz.fuzzer.triage.capture`).
A `CompileConfig` (divfuzz.records.config) says what to compile with, and the aten ops whose Inductor
decomposition is removed are a tuple of names: both are data; `compiled` is the only function
that turns them into torch calls, and the only `torch.compile` call in divfuzz (a test scans for
others).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import torch

from divfuzz.generators.runtime import import_backend
from divfuzz.records.config import COMPARED_COMPILE, CompileConfig, check_backend_syntax
from divfuzz.records.errors import ConfigError
from divfuzz.fuzzer.engine.own_backends import resolve_own_backend


def resolve_backend(name: str):
    """The backend callable or registered name that `torch.compile(backend=...)` takes.

    Raises ConfigError for an unknown name or an import path that does not resolve.
    """
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch._dynamo

    check_backend_syntax(name, where="--backend")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            return import_backend(name)
        except ImportError as e:
            raise ConfigError(f"backend {name!r}: cannot import module {module_name!r} ({e})") from None
        except AttributeError:
            raise ConfigError(f"backend {name!r}: module {module_name!r} has no attribute {attr!r}") from None

    own = resolve_own_backend(name)  # divfuzz's own second compilers (onnxrt, nvfuser), by plain name
    if own is not None:
        return own
    known = set(torch._dynamo.list_backends(exclude_tags=())) | {"eager", "aot_eager", "aot_eager_decomp_partition"}
    if name not in known:
        raise ConfigError(f"unknown backend {name!r}; registered: {', '.join(sorted(known | {'onnxrt', 'nvfuser'}))}, or use module:function")
    return name


def check_stored_backend(stored: str, cli_backend: str | None, *, source: str) -> None:
    """Refuse a backend read from `source` (a store) unless it is a registered torch backend, or a
    `module:function` that the user also named with `--backend`: data never picks code to import."""
    check_backend_syntax(stored, where=f"{source}: stored backend")
    if ":" in stored:
        if cli_backend != stored:
            raise ConfigError(
                f"{source} was compiled with the backend {stored!r}, an import path; divfuzz imports a "
                f"user's backend only when asked: pass --backend {stored} to use it"
            )
        return
    resolve_backend(stored)


@contextlib.contextmanager
def compiled(
    fn: Callable,
    config: CompileConfig,
    *,
    decompositions: tuple[str, ...] | list[str] = (),
    backend_fn: Callable | None = None,
    timed: bool = False,
) -> Iterator[Callable]:
    """Yield `fn` compiled under `config`, from a fresh Dynamo state, with `config`'s Inductor
    overrides applied (`torch._inductor.config.patch`) and the `decompositions` (aten op names)
    removed for the whole block.

    The settings hold for the block, not only for the `torch.compile` call, because compiling is
    lazy: the forward compiles at its first call and a training graph's backward at the first
    backward, both of which the caller runs inside the block. `backend_fn` replaces
    `config.backend` with one of divfuzz's own in-process backends (capture's recorder, its
    one-graph chooser); everything else about the compile still comes from `config`.
    Invariant: `torch._dynamo.reset()` runs first, so no earlier compile (nor its guards) is
    reused; the bisector relies on that, as it swaps backends between calls.
    Unless `timed` (the compiled code's speed is what is measured), `COMPARED_COMPILE` applies
    beneath `config`'s own overrides: fewer kernels compiled and timed, and one config per
    reduction, so the bits do not follow a timing.
    """
    backend = backend_fn if backend_fn is not None else resolve_backend(config.backend)
    torch._dynamo.reset()
    with _inductor_overrides(config, timed=timed), decompositions_removed(decompositions):
        yield torch.compile(fn, backend=backend, dynamic=config.dynamic, mode=config.mode)


def _inductor_overrides(config: CompileConfig, *, timed: bool = False):
    """`config`'s Inductor overrides, over `COMPARED_COMPILE` (its keys this Inductor has) unless
    the compile is `timed`."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch._inductor.config as inductor_config

    base = {} if timed else {key: value for key, value in COMPARED_COMPILE if _has_key(inductor_config, key)}
    overrides = base | dict(config.inductor)
    return inductor_config.patch(overrides) if overrides else contextlib.nullcontext()


def _has_key(inductor_config, key: str) -> bool:
    """Whether Inductor's config has the dotted `key` (older torch lacks some)."""
    obj = inductor_config
    *parts, last = key.split(".")
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return hasattr(obj, last)


def validate_inductor_overrides(overrides: dict[str, Any], *, where: str = "--inductor") -> None:
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch._inductor.config as inductor_config

    for key in overrides:
        if not _has_key(inductor_config, key):
            raise ConfigError(f"unknown Inductor config key {key!r} in {where}")


@contextlib.contextmanager
def decompositions_removed(op_names: tuple[str, ...] | list[str]):
    """Compile as if Inductor had no decomposition for these aten ops (e.g. "aten.native_layer_norm").

    Used to peel root causes: once a decomposition is named as one culprit, removing it shows
    what else still diverges. It edits Inductor's shared decomposition tables (so that every
    backend on the ladder and the bisector see the same thing) and restores them on exit.
    """
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor import decomposition as inductor_decomp

    if not op_names:
        yield
        return
    tables = [inductor_decomp.decompositions, inductor_decomp.fast_random_decomps()]
    saved: list[tuple[dict, Any, Any]] = []
    for name in op_names:
        namespace, _, op = name.partition(".")
        packet = getattr(getattr(torch.ops, namespace), op)
        for overload in packet.overloads():
            key = getattr(packet, overload)
            for table in tables:
                if key in table:
                    saved.append((table, key, table.pop(key)))
    # The compile caches do not key on the decomposition table: a graph compiled before the
    # removal would come back from them unchanged.
    no_cache = {"fx_graph_cache": False, "fx_graph_remote_cache": False}
    # Inductor turns an implicit fallback for an op that has a decomposition into an assertion
    # when the environment variable CI is set (a check for PyTorch's own CI). Here the fallback
    # is the point, so that check is switched off while the decompositions are away.
    ci = os.environ.pop("CI", None)
    try:
        with inductor_config.patch(no_cache), functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        if ci is not None:
            os.environ["CI"] = ci
        for table, key, fn in saved:
            table[key] = fn
