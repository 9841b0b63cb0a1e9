"""What each known second compiler can compile, as torch-free data: data dtypes, backward,
autocast, and the (op, dtype, mode) cells it does not support.

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

from records.errors import ConfigError

ALL_DTYPES = ("float32", "bfloat16", "float16")
ANY = "*"


@dataclass(frozen=True)
class BackendCaps:
    name: str
    extra: str | None = None  # the optional dependency group that installs it (pyproject.toml)
    modules: tuple[str, ...] = ()  # what it imports
    dtypes: tuple[str, ...] = ALL_DTYPES  # data dtypes it compiles
    backward: bool = True
    autocast: bool = True
    # (op, data dtype or "*", "fwd" | "bwd" | "*"): cells it fails to compile
    unsupported: tuple[tuple[str, str, str], ...] = ()
    measured: str = ""  # where the table comes from

    def allows(self, op: str, dtype: str, backward: bool) -> bool:
        """Whether `op` on a `dtype` input compiles, in a forward-only or a backward graph."""
        if dtype in ALL_DTYPES and dtype not in self.dtypes:
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


# Measured with scripts/probe_backend_ops.py onnxrt on 2026-11-22: torch 2.13.0+cpu,
# onnxruntime 1.31.1, onnxscript 0.7.2, onnx 1.23.2, CPUExecutionProvider. Filled from the probe's
# output (every cell not listed compiled and ran).
ONNXRT = BackendCaps(
    name="onnxrt",
    extra="onnx",
    modules=("onnxruntime", "onnxscript", "onnx"),
    dtypes=ALL_DTYPES,
    backward=True,
    autocast=True,
    unsupported=(),
    measured="scripts/probe_backend_ops.py onnxrt, 2026-11-22, torch 2.13.0+cpu, onnxruntime 1.31.1 (CPU)",
)

# Not measured (no GPU here): Thunder's nvFuser executor is CUDA only, forward and backward; the
# ops it cannot fuse fall back to torch inside Thunder, so none is declared unsupported.
NVFUSER = BackendCaps(
    name="nvfuser",
    extra="nvfuser",
    modules=("nvfuser", "thunder"),
    measured="declared, not measured: needs a CUDA GPU",
)

KNOWN: dict[str, BackendCaps] = {c.name: c for c in (ONNXRT, NVFUSER)}


def capabilities_of(*backends: str | None) -> BackendCaps:
    """What every one of `backends` supports (their intersection); unknown names support all."""
    caps = [KNOWN.get(b, BackendCaps(name=b)) for b in backends if b]
    if not caps:
        return BackendCaps(name="inductor")
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
