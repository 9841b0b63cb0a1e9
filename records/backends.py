"""A compile backend as divfuzz uses it (`Backend`: Inductor or another, its stage ladder, how a
script compiles with it), and what each known second compiler can compile, as torch-free data:
data dtypes, backward, autocast, and the (op, dtype, mode) cells it does not support.

One owner for a backend's name and its ladder: every "is this Inductor?" and every list of rungs
goes through `Backend` (`backend_of`), so a new backend has one place to say what it has.

A campaign draws only within its backend's capabilities (`graph_specs(allowed=...)`), so a graph
the backend cannot compile is never drawn; a compile error that a declared-unsupported cell
explains anyway (a replayed spec, a cast into a dtype) is `Status.UNSUPPORTED`, not a finding.
Backends not in the table (inductor, aot_eager, any `module:function`) support everything.

The onnxrt table is measured, not guessed: `scripts/probe_backend_ops.py onnxrt` compiles a
one-op graph per registered op, data dtype and mode on the CPU (see the note in `ONNXRT`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from divfuzz.records.dtypes import DATA_DTYPES
from divfuzz.records.errors import ConfigError

INDUCTOR = "inductor"  # torch.compile's default backend: the one with config switches and a compiler bisector
# The stage ladder (torch._dynamo's aot_eager family): each rung runs one stage more of the compile
# than the one before, so the first that shows a finding names the stage at fault. Eager is the
# reference every run is compared with; these are the rungs between it and the backend.
LADDER_RUNGS = ("aot_eager", "aot_eager_decomp_partition")


@dataclass(frozen=True)
class Backend:
    """A `torch.compile` backend as divfuzz drives it. Invariant: `name` is what `CompileConfig.backend`
    holds (a registered name or `module:function`), and everything that branches on the backend asks
    this record, never compares the name."""

    name: str

    @property
    def is_inductor(self) -> bool:
        """Inductor has config switches to probe, a compiler bisector, and the full ladder below it."""
        return self.name == INDUCTOR

    @property
    def ladder(self) -> tuple[str, ...]:
        """The rungs below the backend that a culprit search climbs: the AOT rungs, for every
        backend (they tell whether torch's own AOT stages already show the finding); under a
        backend other than Inductor the backend is the culprit whatever they show."""
        return LADDER_RUNGS

    def rungs(self) -> tuple[str, ...]:
        """Eager, the ladder, then the backend itself: the runs a module's cause is compared along."""
        return ("eager", *self.ladder, self.name)

    def compile_expression(self, target: str) -> str:
        """How a script compiles `target` with this backend by its registered name (Inductor: torch's default call)."""
        return f"torch.compile({target})" if self.is_inductor else f"torch.compile({target}, backend={self.name!r})"

    def caps(self) -> "BackendCaps":
        return capabilities_of(self.name)


def backend_of(name: str | None) -> Backend:
    """The `Backend` for a config's backend name (None: torch's default, Inductor)."""
    return Backend(name or INDUCTOR)


# The data dtypes a backend may declare (`divfuzz.records.dtypes.DATA_DTYPES`); `divfuzz.fuzzer.campaign.loop`
# imports it under this name.
ALL_DTYPES = DATA_DTYPES
ANY = "*"


@dataclass(frozen=True)
class BackendCaps:
    name: str
    extra: str | None = None  # the optional dependency group that installs it (pyproject.toml)
    modules: tuple[str, ...] = ()  # what it imports
    dtypes: tuple[str, ...] = DATA_DTYPES  # data dtypes it compiles
    backward: bool = True
    autocast: bool = True
    # (op, data dtype or "*", "fwd" | "bwd" | "*"): cells it fails to compile
    unsupported: tuple[tuple[str, str, str], ...] = ()
    measured: str = ""  # where the table comes from

    def allows(self, op: str, dtype: str, backward: bool) -> bool:
        """Whether `op` on a `dtype` input compiles, in a forward-only or a backward graph."""
        if dtype in DATA_DTYPES and dtype not in self.dtypes:
            return False
        if backward and not self.backward:
            return False
        mode = "bwd" if backward else "fwd"
        return not any(o == op and d in (dtype, ANY) and m in (mode, ANY) for o, d, m in self.unsupported)

    def usable(self, op: str, dtypes: Iterable[str] | None = None) -> bool:
        """Whether `op` compiles in at least one of `dtypes` (default: the backend's), forward."""
        return any(self.allows(op, d, False) for d in (dtypes or self.dtypes))

    def unsupported_cell(self, cells: Iterable[tuple[str, str, bool]]) -> tuple[str, str, bool] | None:
        """The first (op, input dtype, backward) cell of a graph this backend declares unsupported."""
        return next((c for c in cells if not self.allows(*c)), None)


def _intersect(a: BackendCaps, b: BackendCaps) -> BackendCaps:
    return BackendCaps(
        name=f"{a.name}+{b.name}",
        dtypes=tuple(d for d in a.dtypes if d in b.dtypes),
        backward=a.backward and b.backward,
        autocast=a.autocast and b.autocast,
        unsupported=a.unsupported + b.unsupported,
        measured="; ".join(m for m in (a.measured, b.measured) if m),
    )


# Measured with scripts/probe_backend_ops.py onnxrt on 2026-11-22 (docs/backends/onnxrt-probe-2026-11-22.json), one one-op graph per cell, on
# two set-ups that agree on every cell measured on both: (a) the H100 host's CPU, torch 2.11.0+cu130,
# onnxruntime 1.30.0 (CPU and Azure providers only: no CUDAExecutionProvider), onnxscript 0.7.2,
# onnx 1.23.1, all 210 cells (145 compile); (b) this repo's CPU box, torch 2.13.0+cpu, onnxruntime
# 1.31.1, onnxscript 0.7.2, onnx 1.23.2, every forward cell. The cells below failed to compile;
# every other (op, dtype, mode) compiled and ran. The reason is ONNX Runtime's, or the exporter's:
# - NotImplemented: ONNX Runtime's CPU provider has no bfloat16 kernel for Add, Mul, Div, Exp, Log,
#   Tanh, Sigmoid, Pow, MatMul, ReduceMean/Max, Where, Max, Expand (the first such node is named);
# - Fail "Type Error ... does not match": torchlib emits native_layer_norm / batch norm statistics
#   in the input dtype where ONNX Runtime expects float (bf16 and fp16);
# - InvalidGraph: a bf16 input to an op whose ONNX schema excludes bf16 (elu, group_norm, quantize);
# - ConversionError: no torchlib function for aten.silu_backward.
# The 43 ops the generator gained after that were probed on 2026-11-25 (docs/backends/onnxrt-probe-2026-11-25.json:
# torch 2.13.0+cpu, onnxruntime 1.32.0, every cell, this repo's CPU box), with the same kinds of
# failure (no bf16 kernel for ArgMax, Ceil, Floor, Clip, Mod, Pow, Reciprocal, Sqrt, Where...;
# no bf16 in the ONNX schema of Round, TopK, MaxPool, AveragePool, SoftmaxCrossEntropyLoss; no torchlib
# function for cummax, cumprod, median, sort, avg_pool1d's backward) and one more:
# - RuntimeException when run: ScatterElements with reduction 'add' has no bf16 or fp16 kernel on the
#   CPU provider (scatter_add, index_add, and the backward of gather and index_select).
# (add_eps's backward passes its gradient through: an identity graph, which divfuzz's backend hands
# back without exporting; it failed in the probe before that, and compiles since.)
# Op-level cells: a cell holds for the smallest graph of its op; other parameters of the same op may differ.
ONNXRT = BackendCaps(
    name="onnxrt",
    extra="onnx",
    modules=("onnxruntime", "onnxscript", "onnx"),
    dtypes=DATA_DTYPES,
    backward=True,
    autocast=False,  # autocast makes linear's matmul bfloat16: NotImplemented
    unsupported=(
        ("add", "bfloat16", "*"),  # NotImplemented (Add)
        ("add_eps", "bfloat16", "*"),  # NotImplemented (Add)
        ("argmax", "bfloat16", "*"),  # NotImplemented
        ("argmin", "bfloat16", "*"),  # NotImplemented
        ("avg_pool1d", "bfloat16", "*"),  # InvalidGraph
        ("avg_pool1d", "float16", "bwd"),  # ConversionError
        ("avg_pool1d", "float32", "bwd"),  # ConversionError
        ("batch_norm_eval", "bfloat16", "*"),  # Fail (Type Error)
        ("batch_norm_eval", "float16", "*"),  # Fail (Type Error)
        ("cast_guard", "bfloat16", "*"),  # NotImplemented
        ("ceil", "bfloat16", "*"),  # NotImplemented
        ("clamp_scalar", "bfloat16", "*"),  # NotImplemented
        ("cross_entropy", "bfloat16", "*"),  # InvalidGraph
        ("cummax", "bfloat16", "*"),  # ConversionError
        ("cummax", "float16", "*"),  # ConversionError
        ("cummax", "float32", "*"),  # ConversionError
        ("cumprod", "bfloat16", "*"),  # ConversionError
        ("cumprod", "float16", "*"),  # ConversionError
        ("cumprod", "float32", "*"),  # ConversionError
        ("div", "bfloat16", "*"),  # NotImplemented
        ("e8m0_encode", "bfloat16", "*"),  # NotImplemented
        ("elu", "bfloat16", "*"),  # InvalidGraph
        ("exp", "bfloat16", "*"),  # NotImplemented
        ("floor", "bfloat16", "*"),  # NotImplemented
        ("fmod", "bfloat16", "*"),  # NotImplemented
        ("fmod_tensor", "bfloat16", "*"),  # NotImplemented
        ("gate", "bfloat16", "*"),  # NotImplemented (Sigmoid)
        ("gather", "bfloat16", "bwd"),  # RuntimeException when run
        ("gather", "float16", "bwd"),  # RuntimeException when run
        ("gelu", "bfloat16", "*"),  # NotImplemented (Div)
        ("gelu_manual", "bfloat16", "*"),  # NotImplemented (Mul)
        ("gelu_tanh", "bfloat16", "*"),  # NotImplemented (Pow)
        ("group_norm", "bfloat16", "*"),  # InvalidGraph
        ("index_add", "bfloat16", "*"),  # RuntimeException when run
        ("index_add", "float16", "*"),  # RuntimeException when run
        ("index_select", "bfloat16", "bwd"),  # RuntimeException when run
        ("index_select", "float16", "bwd"),  # RuntimeException when run
        ("layer_norm", "bfloat16", "*"),  # Fail (Type Error)
        ("layer_norm", "float16", "*"),  # Fail (Type Error)
        ("layer_norm_manual", "bfloat16", "*"),  # NotImplemented (ReduceMean)
        ("linear", "bfloat16", "*"),  # NotImplemented (MatMul)
        ("log", "bfloat16", "*"),  # NotImplemented
        ("log_softmax", "bfloat16", "*"),  # NotImplemented (ReduceMax)
        ("logcumsumexp", "bfloat16", "*"),  # NotImplemented
        ("margin_ranking_loss", "bfloat16", "*"),  # NotImplemented
        ("matmul", "bfloat16", "*"),  # NotImplemented (MatMul)
        ("max_dim", "bfloat16", "*"),  # NotImplemented
        ("max_pool1d", "bfloat16", "*"),  # InvalidGraph
        ("max_pool2d", "bfloat16", "*"),  # InvalidGraph
        ("mean", "bfloat16", "*"),  # NotImplemented (ReduceMean)
        ("median", "bfloat16", "*"),  # ConversionError
        ("median", "float16", "*"),  # ConversionError
        ("median", "float32", "*"),  # ConversionError
        ("min_dim", "bfloat16", "*"),  # NotImplemented
        ("mse_loss", "bfloat16", "bwd"),  # NotImplemented
        ("mul", "bfloat16", "*"),  # NotImplemented
        ("pow_scalar", "bfloat16", "*"),  # NotImplemented
        ("quantize", "bfloat16", "*"),  # InvalidGraph
        ("reciprocal", "bfloat16", "*"),  # NotImplemented
        ("relu", "bfloat16", "*"),  # NotImplemented (Max)
        ("remainder", "bfloat16", "*"),  # NotImplemented
        ("remainder_tensor", "bfloat16", "*"),  # NotImplemented
        ("rms_norm_manual", "bfloat16", "*"),  # NotImplemented (Pow)
        ("round", "bfloat16", "*"),  # InvalidGraph
        ("rsqrt", "bfloat16", "*"),  # NotImplemented
        ("scatter_add", "bfloat16", "*"),  # RuntimeException when run
        ("scatter_add", "float16", "*"),  # RuntimeException when run
        ("sigmoid", "bfloat16", "*"),  # NotImplemented
        ("sign", "bfloat16", "bwd"),  # NotImplemented (Expand, zeros_like)
        ("silu", "bfloat16", "*"),  # NotImplemented (Sigmoid)
        ("silu", "float16", "bwd"),  # ConversionError (aten.silu_backward)
        ("silu", "float32", "bwd"),  # ConversionError (aten.silu_backward)
        ("softmax", "bfloat16", "*"),  # NotImplemented (ReduceMax)
        ("sort", "bfloat16", "*"),  # ConversionError
        ("sort", "float16", "*"),  # ConversionError
        ("sort", "float32", "*"),  # ConversionError
        ("sqrt", "bfloat16", "*"),  # NotImplemented
        ("std", "bfloat16", "bwd"),  # NotImplemented
        ("tanh", "bfloat16", "*"),  # NotImplemented
        ("topk", "bfloat16", "*"),  # InvalidGraph
        ("trunc", "bfloat16", "*"),  # NotImplemented
        ("var", "bfloat16", "bwd"),  # NotImplemented
        ("var_mean", "bfloat16", "bwd"),  # NotImplemented
        ("where_cmp", "bfloat16", "*"),  # NotImplemented
        ("where_scalar", "bfloat16", "*"),  # NotImplemented
    ),
    measured="scripts/probe_backend_ops.py onnxrt, 2026-11-22: torch 2.11 + onnxruntime 1.30 and torch 2.13 + onnxruntime 1.31, CPU provider; "
             "the 43 ops added since, 2026-11-25: torch 2.13 + onnxruntime 1.32, CPU provider",
)

# Not measured (no GPU here): Thunder's nvFuser executor is CUDA only, forward and backward; the
# ops it cannot fuse fall back to torch inside Thunder, so none is declared unsupported.
NVFUSER = BackendCaps(
    name="nvfuser",
    extra="nvfuser",
    modules=("nvfuser_direct", "thunder"),  # or the older `nvfuser` module
    measured="declared, not measured: needs a CUDA GPU",
)

KNOWN: dict[str, BackendCaps] = {c.name: c for c in (ONNXRT, NVFUSER)}


def capabilities_of(*backends: str | None) -> BackendCaps:
    """What every one of `backends` supports (their intersection); unknown names support all."""
    caps = [KNOWN.get(b, BackendCaps(name=b)) for b in backends if b]
    if not caps:
        return BackendCaps(name=INDUCTOR)
    result = caps[0]
    for c in caps[1:]:
        result = _intersect(result, c)
    return result


def check_requested(caps: BackendCaps, ops: Iterable[str] | None, dtypes: Iterable[str] | None, *, backends: str) -> None:
    """ConfigError naming the op (or dtype) and the backend when the user asked for what it cannot compile."""
    wanted_dtypes = tuple(dtypes) if dtypes else caps.dtypes
    bad_dtypes = [d for d in wanted_dtypes if d not in caps.dtypes]
    if bad_dtypes:
        raise ConfigError(f"--dtypes {','.join(bad_dtypes)}: backend {backends} does not support "
                          f"{'this dtype' if len(bad_dtypes) == 1 else 'these dtypes'} (supported: {', '.join(caps.dtypes)})")
    for op in ops or ():
        if not caps.usable(op, wanted_dtypes):
            raise ConfigError(f"--ops {op}: backend {backends} does not support the op {op!r} "
                              f"in {', '.join(wanted_dtypes)} ({caps.measured or 'declared in records/backends.py'})")
