"""`divfuzz minimize --module file.py:NAME`: a user's own model, captured, judged, reduced, attributed.

`NAME()` returns `(model_or_function, example_inputs)`. Loading the file runs the user's own code
(that is what they asked for); spec files are never executed. Everything here runs inside a
worker process (`Worker.call` -> `minimize_module_in_worker`), so a compiler crash ends the
worker, not the CLI.

Steps: `module_capture` judges the whole model (eager vs compiled vs fp64), captures the graphs
Dynamo hands the compiler and lowers the one that introduces the divergence to aten with `make_fx`
(autocast becomes explicit casts); then walk the stage
ladder eager -> aot_eager -> aot_eager_decomp_partition -> inductor and, for every rung whose output
differs from the rung before it (a separate root cause each), reduce the graph with torch's
`fx_minifier` using "this rung still differs from the one before" as the predicate, alternated
with `fx_bypass` (which removes nodes from the middle of a chain) under the time budget, and name the
culprit with `compiler_bisector`. Each root cause gets a folder with `repro.py`, the inputs as raw
bytes (`inputs.bin`) described by `inputs.json` (dtype and shape: no pickle, nothing to execute),
and `culprit.json`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import sys
import time
from pathlib import Path

RUNGS = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")


def load_user_module(ref: str):
    """`path/to/file.py:NAME` -> NAME() (the user's own code runs here, by their request)."""
    from fuzzer.errors import ConfigError

    path, sep, name = ref.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise ConfigError(f"Expected --module path/to/file.py:NAME but got {ref!r}")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--module {ref!r}: no file {path}")
    spec = importlib.util.spec_from_file_location(f"divfuzz_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise ConfigError(f"--module {ref!r}: {path} has no {name}")
    return getattr(module, name)()


def _flat(out):
    import torch
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _run(gm, inputs, rung: str):
    import torch

    with torch.no_grad():
        if rung == "eager":
            return _flat(gm(*inputs))
        torch._dynamo.reset()
        return _flat(torch.compile(gm, backend=rung)(*inputs))


def _differs(a, b) -> bool:
    """A finding-worthy difference, as divfuzz's oracles bucket them: any bf16/fp16 ULP or integer
    flip. fp32 bit differences alone are rounding noise without an fp64 reference, so they do
    not count (they would let the minifier wander to a different, fp32-only graph)."""
    import torch

    from oracles.ulp import bitwise_equal

    if len(a) != len(b):
        return True
    return any(
        not bitwise_equal(x, y) for x, y in zip(a, b) if x.dtype not in (torch.float32, torch.float64)
    )


def _n_differ(a, b) -> int:
    """Elements that differ, NaN in both counting as equal (as `repro.py` counts them)."""
    diff = a != b
    if a.is_floating_point():
        diff &= ~(a.isnan() & b.isnan())
    return int(diff.sum())


def _judge(model, inputs, compiled_out, eager_out, device: str) -> list[str]:
    """One line per output: divfuzz's oracles, eager and compiled each against fp64."""
    import torch

    from oracles.compare import compare_float, compare_int

    ref_model = copy.deepcopy(model).to(torch.float64) if isinstance(model, torch.nn.Module) else model
    ref_in = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    try:
        with torch.no_grad():
            ref = _flat(ref_model(*ref_in))
    except Exception:  # a model that does not run in float64: judge without a reference
        ref = [e.double() for e in eager_out]
    lines = []
    for i, (e, c, r) in enumerate(zip(eager_out, compiled_out, ref)):
        if e.is_floating_point():
            fc = compare_float(e, c, r.to(e.device))
            lines.append(f"output {i}: {fc.dtype} {fc.n_diff}/{fc.numel} differ, max {fc.max_ulp} ULP, fp64 triage {fc.triage}")
        else:
            ic = compare_int(e, c, None)
            lines.append(f"output {i}: {ic.dtype} {ic.flips}/{ic.numel} flip, max step {ic.max_step}")
    return lines


def _bisect(gm, inputs, rung: str, ref) -> str | None:
    """Bisect the cause that appears at `rung`: earlier backends count as good. `ref` is the output
    of the rung before it (already computed by the caller)."""
    import torch
    from torch._inductor.compiler_bisector import CompilerBisector

    def good() -> bool:
        backend = CompilerBisector.get_backend()
        if backend in RUNGS and RUNGS.index(backend) < RUNGS.index(rung):
            return True
        torch._dynamo.reset()
        try:
            with torch.no_grad():
                return not _differs(_flat(torch.compile(gm)(*inputs)), ref)
        except Exception:  # this configuration does not compile: it must not take the blame
            return False

    with contextlib.redirect_stdout(io.StringIO()):
        res = CompilerBisector.do_bisect(good)
    return None if res is None else repr(res)


def _summary(rung: str, bisect: str | None) -> str:
    from fuzzer.attribute import _readable_detail

    if bisect and "subsystem='decomposition'" in bisect:
        return f"decomposition of {_readable_detail('decomposition', bisect)}"
    if bisect and "subsystem='inductor_" in bisect:
        name = bisect.split("subsystem='inductor_", 1)[1].split("'", 1)[0]
        return f"inductor: {name} removes it"
    if bisect and "subsystem='lowerings'" in bisect:
        return f"inductor lowering ({bisect[:120]})"
    return f"{rung} (no single subsystem)"


_REPRO = '''#!/usr/bin/env python3
"""divfuzz repro from a user module: {title}

{notes}
Run: python repro.py. Exits 1 while {before} and {rung} differ, 0 once they agree.
"""
import sys

import torch
from torch import device  # noqa: F401  (captured graphs may name devices)

{code}

def load_inputs(device):
    """Raw little-endian bytes described by inputs.json (next to this file): no pickle, nothing executed."""
    import json
    from pathlib import Path
    here = Path(__file__).resolve().parent
    blob = (here / "inputs.bin").read_bytes()
    tensors, offset = [], 0
    for meta in json.loads((here / "inputs.json").read_text()):
        dtype = getattr(torch, meta["dtype"])
        n = meta["nbytes"]
        flat = torch.frombuffer(bytearray(blob[offset:offset + n]), dtype=torch.uint8)
        tensors.append(flat.view(dtype).reshape(meta["shape"]).to(device))
        offset += n
    return tensors


inputs = load_inputs({device!r})
print(f"torch {{torch.__version__}}")
with torch.no_grad():
    model = Repro()
    torch._dynamo.reset()
    a = model(*inputs) if {before!r} == "eager" else torch.compile(model, backend={before!r})(*inputs)
    torch._dynamo.reset()
    b = torch.compile(model, backend={rung!r})(*inputs)
a = a if isinstance(a, (tuple, list)) else (a,)
b = b if isinstance(b, (tuple, list)) else (b,)
bad = 0
for x, y in zip(a, b):
    diff = x != y
    if x.is_floating_point():
        diff &= ~(x.isnan() & y.isnan())
    n = int(diff.sum())
    print(f"{{n}}/{{x.numel()}} elements differ ({before} vs {rung})")
    bad += n
sys.exit(1 if bad else 0)
'''


def _repro_code(gm) -> str:
    body = gm.code.strip().replace("def forward(self, ", "def forward(self, ")
    return "class Repro(torch.nn.Module):\n" + "\n".join("    " + line for line in body.splitlines())


def _save_inputs(tensors, folder: Path) -> None:
    """Inputs as raw bytes plus a JSON description (the format `repro.py`'s `load_inputs` reads)."""
    import torch

    metas, blobs = [], []
    for t in tensors:
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        metas.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": len(raw)})
        blobs.append(raw)
    (folder / "inputs.bin").write_bytes(b"".join(blobs))
    (folder / "inputs.json").write_text(json.dumps(metas) + "\n")


def _reduce_and_name(gm, inputs, before, rung, peeled, ref, device, verdict_lines, out: Path, number: int, max_granularity, budget_s: float):
    """Shrink the graph to what still makes `rung` differ from `before`, name it, write its folder."""
    import torch
    from torch._functorch.fx_minifier import minifier

    from fuzzer.attribute import _readable_detail
    from fuzzer.fx_bypass import bypass_reduce, count_ops

    def fails(g, inps) -> bool:
        try:
            return _differs(_run(g, inps, before), _run(g, inps, rung))
        except Exception:
            return False

    def minify(g, inps):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return minifier(g, list(inps), fails, dump_state=lambda g, i: None, max_granularity=max_granularity)

    # fx_minifier cuts nodes into inputs; bypassing removes nodes from the middle of a chain.
    # Alternate the two until neither shrinks the graph (or the budget is spent).
    deadline = time.monotonic() + budget_s
    small, small_inputs = minify(gm, inputs)
    passes = ["fx_minifier"]
    while time.monotonic() < deadline:
        size = count_ops(small)
        small, small_inputs, _ = bypass_reduce(small, small_inputs, fails, deadline)
        if count_ops(small) == size:
            break
        passes.append("bypass")
        small, small_inputs = minify(small, small_inputs)
        passes.append("fx_minifier")
    with torch.no_grad():
        before_out = _run(small, small_inputs, before)
        shown = list(zip(before_out, _run(small, small_inputs, rung)))
    bisect = _bisect(small, list(small_inputs), rung, before_out)
    summary = _summary(rung, bisect)
    decomposition = _readable_detail("decomposition", bisect) if bisect and "subsystem='decomposition'" in bisect else None
    folder = out / f"{number:02d}-{rung}"
    folder.mkdir(parents=True, exist_ok=True)
    _save_inputs([t.detach().cpu().contiguous() for t in small_inputs], folder)
    removed = f"Decompositions removed first (earlier causes): {', '.join(peeled)}" if peeled else ""
    notes = "\n".join([f"Culprit: {summary}", f"compiler_bisector: {bisect}", removed, *verdict_lines])
    (folder / "repro.py").write_text(
        _REPRO.format(title=f"{ref}: {summary}", notes=notes, before=before, rung=rung, code=_repro_code(small), device=device)
    )
    cause = {
        "rung": rung,
        "compared_to": before,
        "summary": summary,
        "bisect": bisect,
        "decomposition": decomposition,
        "with_decompositions_removed": list(peeled),
        "ops": count_ops(small),
        "ops_before": count_ops(gm),
        "passes": passes,
        "outputs": [f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}" for a, _ in shown],
        "differing": [_n_differ(a, b) for a, b in shown],
        "folder": str(folder),
    }
    (folder / "culprit.json").write_text(json.dumps(cause, indent=2) + "\n")
    return cause


def minimize_module_in_worker(*, ref: str, device: str, out_dir: str, autocast: str | None = None, dtype: str | None = None, max_granularity: int | None = None, budget_s: float = 300.0, train: bool = False) -> dict:
    """The whole `--module` pipeline; returns a JSON-able summary (runs in a worker)."""
    from fuzzer.attribute import decompositions_removed
    from fuzzer.module_capture import capture_user_case, write_capture

    # Capture through Dynamo, judge the whole model, pick the graph that introduces the divergence.
    cap = capture_user_case(load_user_module(ref), ref=ref, device=device, dtype=dtype, autocast=autocast, train=train, differs=_differs)
    verdict_lines, gm, inputs = cap.verdict_lines, cap.target_gm, cap.target_inputs
    write_capture(cap, Path(out_dir))
    if gm is None:
        return {"verdict": verdict_lines, "causes": [], "checks": [], "capture": cap.summary()}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    causes: list[dict] = []
    peeled: list[str] = []  # decompositions already named as a cause, removed to see what else differs
    checks: list[dict] = []  # every ladder comparison made, for the record (ladder.json)
    for before, rung in zip(RUNGS, RUNGS[1:]):
        while True:
            with decompositions_removed(peeled):
                try:
                    differs = _differs(_run(gm, inputs, before), _run(gm, inputs, rung))
                except Exception as e:
                    if not peeled:
                        raise
                    # Some decompositions cannot go (e.g. batch norm's makes the graph functional):
                    # keep it, and stop peeling at this rung.
                    checks.append({"compared": [before, rung], "removed": list(peeled), "outcome": f"{type(e).__name__}: {str(e)[:300]}"})
                    peeled.pop()
                    break
                checks.append({"compared": [before, rung], "removed": list(peeled), "outcome": "differs" if differs else "equal"})
                if not differs:
                    break
                cause = _reduce_and_name(gm, inputs, before, rung, peeled, ref, device, verdict_lines, out, len(causes) + 1, max_granularity, budget_s)
            causes.append(cause)
            op = cause.get("decomposition")
            if not op or op in peeled:
                break
            peeled.append(op)
    (out / "ladder.json").write_text(json.dumps(checks, indent=2) + "\n")
    return {"verdict": verdict_lines, "causes": causes, "checks": checks, "capture": cap.summary()}
