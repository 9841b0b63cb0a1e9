"""What a case is compiled with: a backend plus options, as data (JSON-able, hashable).

`backend` is a registered torch.compile backend name (`inductor`, `aot_eager`, ...) or an import
path `module:function` to a user's backend. `inductor` holds Inductor config overrides as
(key, value) pairs, applied with `torch._inductor.config.patch` around the compile.

Invariant: every CompileConfig, whether built from the command line or read back from a store,
a bucket's case.json or a baseline, holds a backend that is a plain name or a `module:function`
of dotted identifiers, `dynamic` of True/False/None, a plain mode word, and Inductor overrides
drawn from `INDUCTOR_SWITCHES` only, each value of its switch's type and range (`__post_init__`
checks; ConfigError names the field, the key and the value). Whether a stored `module:function`
may be imported is the command's decision (`check_stored_backend`): a store never picks code to
import on its own.

`INDUCTOR_SWITCHES` is the one list of Inductor keys anyone may set, from `--inductor`, a store,
a spec, a corpus or a baseline. It holds only switches whose values are booleans or bounded whole
numbers, so no value can name a program, a path, a module or a callable (`cpp.cxx`, the `*_pass`
hooks, cache and debug folders are never in it), and every key is public (no `_` part).
tests/test_untrusted_input_and_signals.py checks each entry against the installed torch's own type for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from divfuzz.records.backends import INDUCTOR
from divfuzz.records.errors import ConfigError
from divfuzz.records.numbers import number_problem


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
BACKEND_NAME = re.compile(_IDENT)
BACKEND_IMPORT_PATH = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}")
INDUCTOR_KEY = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")  # public: no `_x`, no dunder
MODE_WORD = re.compile(r"[a-z][a-z0-9-]{0,39}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def check_backend_syntax(name: Any, *, where: str = "backend") -> str:
    """`name` when it is a registered-name shape or a `module:function` path; ConfigError otherwise."""
    if not isinstance(name, str) or len(name) > 200 or not (BACKEND_NAME.fullmatch(name) or BACKEND_IMPORT_PATH.fullmatch(name)):
        raise ConfigError(f"{where}: expected a backend name or module:function but got {_short(name)}")
    return name


@dataclass(frozen=True)
class Switch:
    """The values one Inductor key takes: `bool`, or a whole number in [low, high] (or null when
    `nullable`, Inductor's "decide yourself")."""

    kind: type
    low: int | None = None
    high: int | None = None
    nullable: bool = False

    def problem(self, value: Any) -> str | None:
        """What the value should have been, or None when it fits."""
        if value is None and self.nullable:
            return None
        if self.kind is bool:
            return None if isinstance(value, bool) else "true or false"
        wanted = number_problem(value, low=self.low, high=self.high, integer=True)
        return None if wanted is None else wanted + (" or null" if self.nullable else "")


_BOOL = Switch(bool)

# The Inductor switches divfuzz lets anyone set: numerics and scheduling knobs, documented in
# torch/_inductor/config.py. Add one here (a bool or a bounded whole number) to allow it.
INDUCTOR_SWITCHES: dict[str, Switch] = {
    # numerics (divfuzz.fuzzer.triage.attribute.PROBES)
    "emulate_precision_casts": _BOOL,
    # Skips the on-device benchmarks whose pick changes numerics (a reduction's kernel config):
    # the CUDA gate's replays set it (divfuzz.fuzzer.gate.policy.gate_compile_config).
    "deterministic": _BOOL,
    "fallback_random": _BOOL,
    "keep_addmm_fused_for_half_dtypes": _BOOL,
    "pattern_matcher": _BOOL,
    "cpp.simdlen": Switch(int, 0, 2048, nullable=True),
    "eager_numerics.division_rounding": _BOOL,
    "triton.codegen_upcast_to_fp32": _BOOL,
    "split_reductions": _BOOL,
    "online_softmax": _BOOL,
    "cpp.enable_unsafe_math_opt_flag": _BOOL,
    "cpp.fallback_scatter_reduce_sum": _BOOL,
    "force_fuse_int_mm_with_mul": _BOOL,
    "use_mixed_mm": _BOOL,
    "implicit_fallbacks": _BOOL,
    "size_asserts": _BOOL,
    "nan_asserts": _BOOL,
    "freezing": _BOOL,
    "joint_graph_constant_folding": _BOOL,
    "fallback_embedding_bag_byte_unpack": _BOOL,
    "conv_1x1_as_mm": _BOOL,
    # scheduling and fusion (divfuzz.fuzzer.triage.attribute.PERF_PROBES)
    "triton.mix_order_reduction": _BOOL,
    "triton.persistent_reductions": _BOOL,
    "triton.multi_kernel": Switch(int, 0, 3),
    "triton.cooperative_reductions": _BOOL,
    "coordinate_descent_tuning": _BOOL,
    "max_autotune": _BOOL,
    "max_autotune_pointwise": _BOOL,
    "max_autotune_gemm": _BOOL,
    "max_fusion_size": Switch(int, 1, 4096),
    "aggressive_fusion": _BOOL,
    "loop_ordering_after_fusion": _BOOL,
    "realize_opcount_threshold": Switch(int, 0, 4096, nullable=True),
    "realize_reads_threshold": Switch(int, 0, 4096),
    "realize_acc_reads_threshold": Switch(int, 0, 4096, nullable=True),
    "unroll_reductions_threshold": Switch(int, 0, 4096),
    "max_pointwise_cat_inputs": Switch(int, 0, 4096),
    "score_fusion_memory_threshold": Switch(int, 0, 2**20),
    "cpp.enable_tiling_heuristics": _BOOL,
    "cpp.max_horizontal_fusion_size": Switch(int, 0, 4096),
    "cpp.threads": Switch(int, -1, 1024),
    "cpp.dynamic_threads": _BOOL,
    "cpp.min_chunk_size": Switch(int, 1, 2**20),
    "cpp.gemm_max_k_slices": Switch(int, 0, 1024),
    "combo_kernels": _BOOL,
    "epilogue_fusion": _BOOL,
    "prologue_fusion": _BOOL,
    "batch_fusion": _BOOL,
    "permute_fusion": _BOOL,
    "reorder_for_locality": _BOOL,
    "reorder_for_peak_memory": _BOOL,
    "benchmark_fusion": _BOOL,
    "layout_optimization": _BOOL,
    "force_layout_optimization": _BOOL,
    "keep_output_stride": _BOOL,
    "shape_padding": _BOOL,
    "comprehensive_padding": _BOOL,
    "pad_outputs": _BOOL,
    "dce": _BOOL,
    "triton.cudagraphs": _BOOL,
    "triton.cudagraph_trees": _BOOL,
    "triton.dense_indexing": _BOOL,
    "triton.divisible_by_16": _BOOL,
    "triton.autotune_pointwise": _BOOL,
    # false: each reduction's config timed on the GPU, as torch's default (divfuzz's compared
    # compiles set it true: REPRODUCIBLE below)
    "test_configs.force_filter_reduction_configs": _BOOL,
    "triton.prefer_nd_tiling": _BOOL,
    "triton.use_block_ptr": _BOOL,
    "triton.max_tiles": Switch(int, 1, 3, nullable=True),
    "triton.tiling_prevents_pointwise_fusion": _BOOL,
    "triton.tiling_prevents_reduction_fusion": _BOOL,
    "triton.spill_threshold": Switch(int, 0, 4096),
    # how Inductor compiles, not what: a worker's own share of the cores, the local caches on or off
    "compile_threads": Switch(int, 1, 1024),
    "fx_graph_cache": _BOOL,
    "autotune_local_cache": _BOOL,
}

# Inductor settings that change how long a compile takes and how fast its kernels run, never the
# bits they compute. Pointwise autotuning compiles each pointwise Triton kernel with several block
# sizes (2 for a 1-D kernel, 6 for a 2-D one) and times every one on the GPU at its first call; a
# pointwise kernel computes each element alone, so its block size cannot change a result.
NUMERICS_NEUTRAL = (("triton.autotune_pointwise", False),)

# Inductor settings that make a compile's bits a function of the graph alone. By default each
# Triton reduction kernel is compiled with up to 4-6 configs and the fastest on the GPU at its
# first call is kept; the config sets the reduction's order, so the bits follow a timing (on the
# H100 19 of 141 campaign cases' verdicts differed between two runs of the same specs, and a
# minimizer's or bisector's check could flip with them). This compiles one config per reduction,
# the one Inductor's deterministic mode picks by a fixed rule from the same candidates, and
# nothing else of that mode (1 of 141 verdicts differed between two runs, in one gradient of a
# backward graph; the compile took 30% less; scripts/profile_compile_phases.py, DESIGN.md). A key this
# torch's Inductor lacks is left out.
REPRODUCIBLE = (("test_configs.force_filter_reduction_configs", True),)

# What a compile whose outputs are compared runs under, beneath the case's own overrides. A
# compile whose speed is measured (the perf oracle: `compiled(..., timed=True)`) keeps torch's
# defaults, since there the pick is what is under test. Applied by
# `divfuzz.fuzzer.engine.compile.compiled`, and carried into every numeric repro script
# (`divfuzz.reports.repro`), so that the script compiles as the case did.
COMPARED_COMPILE = NUMERICS_NEUTRAL + REPRODUCIBLE

# Words in a key that name a program, a path, a module or a callable: said so when refused.
_NAMES_CODE = re.compile(r"cxx|cc\b|compiler|_pass\b|pass$|hook|dir\b|_dir|path|file|cache_dir|module|callable|fn\b|_fn|command|cmd|remote|url")


def check_inductor_override(key: Any, value: Any, where: str = "--inductor") -> None:
    """ConfigError naming `where`, the key and the value unless `key` is one of
    `INDUCTOR_SWITCHES` and `value` fits its type and range."""
    if not isinstance(key, str) or len(key) > 100 or not INDUCTOR_KEY.fullmatch(key):
        raise ConfigError(f"{where}: Inductor key {_short(key)} is not a public config key (lower-case dotted names, "
                          "no '_' or dunder parts)")
    switch = INDUCTOR_SWITCHES.get(key)
    if switch is None:
        why = ("it names a program, a path, a module or a callable, which never come from a config"
               if _NAMES_CODE.search(key) else "it is not one of the switches divfuzz lets a config set")
        raise ConfigError(f"{where}: unknown Inductor config key {key!r} refused: {why} (divfuzz.records.config.INDUCTOR_SWITCHES)")
    wanted = switch.problem(value)
    if wanted is not None:
        raise ConfigError(f"{where}: Inductor switch {key!r} takes {wanted} but got {_short(value)}")


@dataclass(frozen=True)
class CompileConfig:
    backend: str = INDUCTOR
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
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ConfigError(f"inductor: expected key/value pairs but got {_short(pair)}")
            check_inductor_override(pair[0], pair[1], "inductor")

    def for_graph(self, dynamic: str = "", mode: str = "") -> CompileConfig:
        """What a graph compiles under: this config, with `dynamic=True` where the graph's spec
        compiles for all shapes dynamic (`GraphSpec.dynamic == "all"`; "marked" dims are marked
        on the inputs, with the config's `dynamic` as it is), and the spec's `mode` where it names
        one (`GraphSpec.mode`). The one place a spec's compile dimensions meet a config: the
        engine and every script call it."""
        config = self
        if dynamic == "all" and config.dynamic is not True:
            config = replace(config, dynamic=True)
        if mode and config.mode != mode:
            config = replace(config, mode=mode)
        return config

    def with_inductor(self, **overrides: Any) -> CompileConfig:
        merged = dict(self.inductor) | overrides
        return replace(self, inductor=tuple(sorted(merged.items())))

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "dynamic": self.dynamic, "mode": self.mode, "inductor": dict(self.inductor)}

    @classmethod
    def from_dict(cls, d: Any, *, where: str | None = None) -> CompileConfig:
        """A config read back from JSON (a store, case.json, a baseline, a worker's message):
        checked like CLI input; a refusal names `where` it came from."""
        try:
            if not isinstance(d, dict):
                raise ConfigError(f"compile config: expected an object but got {_short(d)}")
            inductor = d.get("inductor") or {}
            if not isinstance(inductor, dict):
                raise ConfigError(f"inductor: expected an object of overrides but got {_short(inductor)}")
            return cls(
                backend=d.get("backend", INDUCTOR),
                dynamic=d.get("dynamic", False),
                mode=d.get("mode"),
                inductor=tuple(sorted(inductor.items())),
            )
        except ConfigError as e:
            if where is None:
                raise
            raise ConfigError(f"{where}: {e}") from None

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
        try:
            out[key] = json.loads(raw, parse_constant=lambda name: name) if len(raw) <= 400 else raw
        except (json.JSONDecodeError, RecursionError, ValueError):
            out[key] = raw
        check_inductor_override(key, out[key], f"--inductor {_short(item)}")
    return out
