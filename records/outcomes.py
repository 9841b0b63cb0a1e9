"""The one table of outcomes: how a case ended (`Status`), what a bucket is for (`FindingKind`),
and which of them are failures of the compiler under test. Torch-free; every layer imports it.

The perf oracle's kinds (`PERF_KINDS`) come only from perf verdicts, the float and integer kinds
only from numeric ones; compiler failures come from either.
Invariant: `COMPILER_FAILURES` maps each status in which the compiler under test failed to its
finding kind, and every other status that has no outputs is in `NO_OUTPUT_STATUSES`; nothing else
in divfuzz lists these kinds again.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    OK = "ok"  # ran on both sides; every output bitwise equal
    DIVERGED = "diverged"  # ran on both sides; some output differs
    NONDETERMINISTIC = "nondeterministic"  # two eager runs differ bitwise: no comparison is meaningful
    EAGER_ERROR = "eager-error"  # the graph fails eagerly: a divfuzz generator bug, counted
    COMPILE_ERROR = "compile-error"  # torch.compile raised while compiling
    RUNTIME_ERROR = "runtime-error"  # the compiled callable raised while running
    CRASH = "crash"  # the worker process died (segfault, abort, CUDA fault, killed)
    HANG = "hang"  # the case exceeded its timeout
    # the backend failed to compile a graph holding an op it declares unsupported (divfuzz.records.backends): not a finding
    UNSUPPORTED = "unsupported"


class FindingKind(str, enum.Enum):
    CRASH = "crash"
    HANG = "hang"
    COMPILE_ERROR = "compile-error"
    RUNTIME_ERROR = "runtime-error"
    TYPE_MISMATCH = "type-mismatch"  # a compiled output of another dtype or shape than eager's, or missing
    NAN_INF = "nan-inf"
    INT_GROSS = "int-gross"
    INT_BOUNDARY = "int-boundary"
    BF16_ULP = "bf16-ulp"
    FP16_ULP = "fp16-ulp"
    FP32_ULP = "fp32-ulp"
    # A returned tensor with other strides than eager's, its values aside (`OutputVerdict.strides`):
    # eager's strides are not every op's documented contract, so it is kept apart and at suspect.
    STRIDE_MISMATCH = "stride-mismatch"
    # A graph compiled for dynamic shapes compiled again on a size it should have served, or gave
    # a size other results after another size ran (`Verdict.dynamic`).
    RECOMPILE = "recompile"
    SLOWER_FWD = "slower-fwd"  # the perf oracle: compiled forward slower than eager's
    SLOWER_BWD = "slower-bwd"  # the perf oracle: compiled forward+backward slower than eager's


# Most severe first: a case lands in the bucket of its most severe finding.
FINDING_KIND_ORDER = tuple(FindingKind)

# The compiler under test failed: the status and the finding kind it opens.
COMPILER_FAILURES: dict[Status, FindingKind] = {
    Status.CRASH: FindingKind.CRASH,
    Status.HANG: FindingKind.HANG,
    Status.COMPILE_ERROR: FindingKind.COMPILE_ERROR,
    Status.RUNTIME_ERROR: FindingKind.RUNTIME_ERROR,
}
ERROR_KINDS = frozenset(COMPILER_FAILURES.values())
# Statuses that carry no output comparisons: the compiler's failures, and eager's own.
NO_OUTPUT_STATUSES = frozenset(COMPILER_FAILURES) | {Status.EAGER_ERROR, Status.UNSUPPORTED}


def ends_group(status: Status | str, *, first: bool) -> bool:
    """Whether a member of a group of input siblings (one graph under several recipes, one
    compile: `divfuzz.fuzzer.engine.execute.execute_group`) with this verdict status is the last
    of its group that runs: any member whose compiler failed (or whose graph the backend does not
    support), and the first member when it reached no compiled result (eager failed or was
    nondeterministic: the siblings would need a compile of their own). A status that is not one
    (a store's text) ends nothing."""
    try:
        status = Status(status)
    except ValueError:
        return False
    if status in COMPILER_FAILURES or status is Status.UNSUPPORTED:
        return True
    return first and status in (Status.EAGER_ERROR, Status.NONDETERMINISTIC)


def error_type_of(e: BaseException) -> str:
    """A verdict's `error_type`: the exception's type, and the inner one a compiler wrapped (`Outer(Inner)`)."""
    inner = getattr(e, "inner_exception", None)
    if inner is not None:
        return f"{type(e).__name__}({type(inner).__name__})"
    return type(e).__name__


def is_compile_error(e: BaseException) -> bool:
    """Whether the compiler failed (Dynamo, Inductor, or a backend's wrapped error) rather than
    the compiled run: `Status.COMPILE_ERROR`, else `Status.RUNTIME_ERROR`. Read by the engine and
    by every repro.py, which carries this module."""
    mod = type(e).__module__ or ""
    return mod.startswith(("torch._dynamo", "torch._inductor")) or getattr(e, "inner_exception", None) is not None


# Words of a runtime error that says the accelerator's context failed rather than the op refused
# its input: CUDA reports an asynchronous fault (an illegal address, a launch failure, a device-side
# assert, an ECC error) at the next call that synchronizes, which may be a later case's; the context
# is then unusable for every case after it, and a machine fault reads the same. Lower case.
DEVICE_FAULT_MARKERS = ("cuda error", "acceleratorerror", "illegal memory access", "unspecified launch failure",
                        "device-side assert", "misaligned address", "ecc error", "cublas_status_execution_failed",
                        "cudnn_status_execution_failed", "an illegal instruction was encountered")


def is_device_fault(error_type: str | None, error_message: str | None) -> bool:
    """Whether a runtime error's type or message names an accelerator fault (`DEVICE_FAULT_MARKERS`):
    one that counts as the compiler's only where the case gives it again in a fresh process."""
    text = f"{error_type or ''} {error_message or ''}".lower()
    return any(marker in text for marker in DEVICE_FAULT_MARKERS)


# What the perf oracle finds (`--oracle perf`): right numbers, computed slower.
PERF_KINDS = frozenset({FindingKind.SLOWER_FWD, FindingKind.SLOWER_BWD})
# The oracles a case can be judged by: eager vs compiled vs fp64 numbers, or eager vs compiled time.
ORACLES = ("numeric", "perf")
# Finding kinds that are wrong answers whatever fp64 says: errors, NaN/Inf placement, integer flips.
DISCRETE_KINDS = ERROR_KINDS | {FindingKind.TYPE_MISMATCH, FindingKind.NAN_INF, FindingKind.INT_GROSS, FindingKind.INT_BOUNDARY}
