"""divfuzz's own second compilers, as `torch.compile` backends: ONNX Runtime and nvFuser (Thunder).

`onnxrt`: torch 2.9 and later no longer register a `torch.compile(backend="onnxrt")` (torch 2.13's
`torch/_dynamo/backends/onnxrt.py` is a commented-out placeholder), so divfuzz builds it from the
parts that remain: AOTAutograd splits the graph into aten forward and backward graphs, each is
exported with `torch.onnx.export(..., dynamo=True)` (onnxscript's torchlib) and run by an ONNX
Runtime `InferenceSession` (CUDAExecutionProvider when onnxruntime-gpu is installed, else the CPU).
Where torch still registers `onnxrt` (torch <= 2.8) divfuzz still uses this one, so that a
campaign compiles the same way on every torch.

`nvfuser`: Lightning Thunder's `thunder.dynamo.ThunderCompiler` (nvFuser executor) when
`thunder` and `nvfuser` import; otherwise ConfigError with the exact import error.

`resolve_own_backend(name)` is how `divfuzz.fuzzer.engine.compile.resolve_backend` finds them by plain
name: a stored config keeps the name `onnxrt`, never an import path. What each backend can
compile (ops, dtypes, backward) is declared in `divfuzz.records.backends` and measured by
`scripts/probe_backend_ops.py`.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import logging
import re
from typing import Callable

from divfuzz.records.errors import ConfigError

OWN_BACKENDS = ("onnxrt", "nvfuser")


class BackendCompileError(RuntimeError):
    """A second compiler failed to compile (export or session creation) a graph. `inner_exception`
    carries the original, as Dynamo's BackendCompilerFailed does, so that execute counts it as a
    compile error and names the inner type."""

    def __init__(self, message: str, inner: BaseException):
        super().__init__(message)
        self.inner_exception = inner


class BackendUnsupportedOp(BackendCompileError):
    """The second compiler itself says it has no implementation of an aten op (torch.onnx's
    "No ONNX function found for <OpOverload(...)>"). That is a capability the backend lacks, as a
    declared-unsupported cell in `divfuzz.records.backends` is, not a divergence: the case reads
    `unsupported`. Seen on the H100: torch 2.11 lowers RMSNorm on CUDA to `aten._fused_rms_norm`,
    which torchlib has no function for, while on the CPU (where the table was measured) it
    decomposes and exports."""

    def __init__(self, message: str, inner: BaseException, op: str):
        super().__init__(message, inner)
        self.op = op


_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([A-Za-z0-9_.]+)'")


def backend_compile_error(message: str, e: BaseException) -> BackendCompileError:
    """`e` from exporting or loading a graph, as the error execute files: BackendUnsupportedOp when
    the exporter names an op it has no function for, else BackendCompileError."""
    found = _NO_FUNCTION.search(" ".join(str(e).split()))
    if found:
        return BackendUnsupportedOp(message, e, found.group(1))
    return BackendCompileError(message, e)


def unsupported_op_of(e: BaseException) -> str | None:
    """The aten op a second compiler declared it cannot compile, anywhere in `e`'s chain of
    inner exceptions and causes (Dynamo wraps a backend's error), else None."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BackendUnsupportedOp):
            return e.op
        e = getattr(e, "inner_exception", None) or e.__cause__
    return None


def missing_requirement(name: str) -> str | None:
    """Why the backend `name` cannot load here (the exact import error), or None when it can."""
    # Each entry: alternatives, any one of which will do (nvFuser's wheels ship `nvfuser_direct`,
    # older ones `nvfuser`; Thunder takes either).
    modules = {"onnxrt": (("onnxruntime",), ("onnxscript",), ("onnx",)),
               "nvfuser": (("nvfuser_direct", "nvfuser"), ("thunder",))}[name]

    extra = {"onnxrt": "pip install 'divfuzz[onnx]'", "nvfuser": "pip install 'divfuzz[nvfuser]'; see scripts/try_nvfuser.sh"}[name]
    for alternatives in modules:
        errors = []
        for module in alternatives:
            try:
                importlib.import_module(module)
                break
            except Exception as e:  # ImportError, or an OSError/RuntimeError from a shared library (ABI)
                errors.append(f"cannot import {module!r}: {type(e).__name__}: {e}")
        else:
            return "; ".join(errors) + f" ({extra})"
    return None


def resolve_own_backend(name: str) -> Callable | None:
    """The callable for one of divfuzz's own backend names, None for any other name; ConfigError
    naming the import error when its optional extra is not installed."""
    if name not in OWN_BACKENDS:
        return None
    reason = missing_requirement(name)
    if reason is not None:
        raise ConfigError(f"backend {name!r} needs its optional extra: {reason}")
    return {"onnxrt": onnxrt_backend, "nvfuser": nvfuser_backend}[name]


# ---- ONNX Runtime ---------------------------------------------------------------------------------


def _export_in_fresh_thread(fn: Callable):
    """Run `fn` on a new thread: the compiled forward first runs inside AOTAutograd's runtime
    (an autograd.Function, functionalization), and `torch.export` refuses those thread-local modes
    ("Attempting to use FunctionalTensor on its own"). A fresh thread starts without them."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="divfuzz-onnx-export") as pool:
        return pool.submit(fn).result()


def _ort_graph(gm, example_inputs):
    """One aten graph (forward, backward or inference) compiled for ONNX Runtime at its first call,
    with that call's real tensors (AOTAutograd's example inputs are fake). A graph compiled with
    dynamic shapes takes its sizes as Python ints beside the tensors: the ONNX model takes only the
    tensors, with the ints bound as constants, one model per distinct tuple of ints (torch.export
    specialises an int argument, so a model built for one size must never run another)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    programs: dict[tuple, dict] = {}

    def first_call(args, ints: tuple) -> dict:
        outs = gm(*args)  # eager once: which outputs are tensors (a backward returns None for frozen inputs)
        single = not isinstance(outs, (tuple, list))
        outs = [outs] if single else list(outs)
        # An output that is an input (a backward that passes its cotangent through) is not exported:
        # ONNX Runtime refuses a model whose output is its input. It is handed back as is.
        passthrough = {i: j for i, o in enumerate(outs) for j, a in enumerate(args) if isinstance(o, torch.Tensor) and o is a}
        keep = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and i not in passthrough]
        # A size a forward returns for its backward (an int of a dynamic graph) is fixed by the ints
        # the model is built for: kept from this eager call.
        sizes = {i: o for i, o in enumerate(outs) if o is not None and not isinstance(o, torch.Tensor)}
        slots = [isinstance(a, torch.Tensor) for a in args]

        class TensorOutputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.gm = gm

            def forward(self, *tensors):
                given, bound = iter(tensors), iter(ints)
                o = self.gm(*(next(given) if is_tensor else next(bound) for is_tensor in slots))
                o = [o] if single else list(o)
                return tuple(o[i] for i in keep)

        # Exported on the inputs' own device: an AOTAutograd graph keeps the device of the tensors it
        # makes (`full`, `scalar_tensor`, ... on cuda), and tracing it on CPU copies of CUDA inputs
        # fails in fake-tensor device propagation ("found two different devices cuda:0, cpu"): 28
        # of 379 cases of a 5-minute H100 campaign were lost to that as compile errors.
        export_args = tuple(a.detach() for a in args if isinstance(a, torch.Tensor))
        for name in ("torch.onnx", "onnxscript"):
            logging.getLogger(name).setLevel(logging.ERROR)
        program = None
        if keep:
            try:
                program = _export_in_fresh_thread(lambda: _onnx_export(TensorOutputs(), export_args))
                program.initialize_inference_session()
            except Exception as e:
                raise backend_compile_error(f"onnxrt: {type(e).__name__}: {_first_lines(e)}", e) from e
        return dict(program=program, single=single, keep=keep, passthrough=passthrough, sizes=sizes, n=len(outs))

    def run(*args):
        ints = tuple(a for a in args if not isinstance(a, torch.Tensor))
        if ints not in programs:
            programs[ints] = first_call(args, ints)
        state = programs[ints]
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        full: list = [None] * state["n"]
        if state["program"] is not None:
            # CPU copies held here for the whole call: `ONNXProgram.__call__` wraps each input with
            # `OrtValue.ortvalue_from_numpy(t.numpy(force=True))`, which does not copy and keeps no
            # reference, so for a CUDA tensor the temporary CPU copy can be freed and reused before
            # ONNX Runtime reads it. Measured on the H100 (torch 2.11, onnxruntime 1.30): LayerNorm
            # backward's grad:x RMSE vs fp64 was 7.7e-4 with CUDA inputs, 7.6e-8 with these copies.
            host_args = [a.detach().cpu() for a in args if isinstance(a, torch.Tensor)]
            results = state["program"](*host_args)
            for i, r in zip(state["keep"], results):
                full[i] = r.to(device)
        for i, j in state["passthrough"].items():
            full[i] = args[j]
        for i, size in state["sizes"].items():
            full[i] = size
        return full[0] if state["single"] else tuple(full)

    return run


@functools.lru_cache(maxsize=1)
def _torchlib_registry():
    """torchlib's op table, built once per process: `torch.onnx.export` rebuilds it on every call
    (about 7 of a small graph's 10 s of export on this CPU)."""
    # lazy: optional extra [onnx]: torch.onnx's exporter needs onnxscript
    from torch.onnx._internal.exporter import _registration

    return _registration.ONNXRegistry.from_torchlib()


def _onnx_export(module, args):
    """`torch.onnx.export(module, args, dynamo=True, optimize=False)`, with the torchlib registry
    cached (through the exporter's `_core.export`, which takes it; the public call where absent)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    try:
        # lazy: optional extra [onnx]: torch.onnx's exporter needs onnxscript
        from torch.onnx._internal.exporter import _core

        registry = _torchlib_registry()
    except (ImportError, AttributeError):
        return torch.onnx.export(module, args, dynamo=True, verbose=False, optimize=False, report=False)
    return _core.export(module, args, registry=registry, verbose=False, optimize=False, report=False)


def _first_lines(e: BaseException, limit: int = 600) -> str:
    text = " ".join(str(e).split())
    summary = text.find("Exception summary")
    return (text[summary:] if summary >= 0 else text)[:limit]


def onnxrt_backend(gm, example_inputs):
    """`torch.compile(fn, backend=onnxrt_backend)`: forward and backward through ONNX Runtime."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_ort_graph, bw_compiler=_ort_graph)(gm, example_inputs)


# ---- nvFuser through Thunder ----------------------------------------------------------------------


def nvfuser_backend(gm, example_inputs):
    """`torch.compile(fn, backend=nvfuser_backend)`: Lightning Thunder's Dynamo backend with its
    nvFuser executor (CUDA only). ConfigError with the exact import error when it cannot load."""
    reason = missing_requirement("nvfuser")
    if reason is not None:
        raise ConfigError(f"backend 'nvfuser': {reason}")
    # lazy: optional extra [nvfuser]
    from thunder.dynamo import ThunderCompiler

    return ThunderCompiler()(gm, example_inputs)
