"""Planted-bug backends: torch.compile backends with one known defect each.

They prove the oracles and the engine catch what they must (`--backend divfuzz.fuzzer.engine.planted:ulp_bump`),
and give a user a self-test of their set-up. Each wraps the FX graph eagerly (so nothing else
differs) and plants exactly one defect:
- `eager_in_disguise`: none; a campaign with it must find nothing;
- `ulp_bump`: one bfloat16 ULP added to element 0 of the first bfloat16 output;
- `uint8_flip`: element 0 of the first uint8 output increased by one (mod 256);
- `drift`: the first floating output scaled by 1 + 2^-5 (always further from fp64, for `--against`);
- `nan_first`: element 0 of the first floating output becomes NaN (a `bug` wherever eager is finite);
- `inductor_nan_first`: the real Inductor (its kernels, logs and warnings), then `nan_first`'s defect;
- `one_thread_nan`: `nan_first`'s defect only while torch runs one CPU thread (the count its call
  sees): a bug whose script fails only where it pins the thread count, as a CPU kernel's bits
  that follow the count do;
- `wrong_dtype`: the first floating output comes back in another floating dtype (float32, or float64
  for a float32 output), its values unchanged: a type mismatch, judged before any value;
- `flush_subnormals`: every value of the graph (its inputs and each op's result, and the gradients
  flowing back through them) with float32-subnormal values flushed to signed zero, as kernels
  compiled with flush-to-zero compute: a documented default, never a bug
  (`divfuzz.fuzzer.engine.explain` must explain it);
- `flush_first_output`: the first output computed as `flush_subnormals` computes it, the others
  exactly as eager (kernels differ in what they flush: on the H100 a `ceil` flushed its
  subnormal input while a `remainder` beside it kept its own); the flush must still explain it;
- `flush_and_nan`: `flush_subnormals` plus `nan_first`'s defect: the flush must not explain the NaN;
- `split_ties`: `torch.max(x, dim)` computed as `amax` (its gradient shared evenly among tied
  maxima, where eager's goes to the one index max returns): differs only at ties;
- `reassociate_scans`: `torch.cumprod` and `torch.cumsum` computed in log-depth order (each step
  combines a value with the one `d` places before it, d = 1, 2, 4, ...), as a parallel scan
  does: the same sums and products in another order, whose partial results may leave the float
  range where eager's do not (`divfuzz.fuzzer.engine.explain` must explain that as range-edge);
- `ignores_strides`: every input that is not contiguous from its storage's start read as if it
  were (a transposed input read row by row, a slice's gaps and a storage offset's leading
  elements read as elements, what lies past an expanded input's storage read as NaN), as a kernel
  that ignores strides and storage offsets does;
- `stale_second_call`: every call after the first returns the first call's outputs, whatever its
  inputs: a reused static buffer that a new run should have overwritten (CUDA graphs);
- `order_dependent`: right until it has run on inputs of another shape; then the first shape's
  first floating output comes back scaled by 1 + 2^-5 (a dynamic compile whose result depends on
  which size ran first);
- `forgets_mutation`: the graph run on copies of its inputs, so an in-place update of an input
  never reaches the caller's tensor (returned outputs are right);
- `compile_error`: raises `PlantedCompileError` while compiling;
- `inductor_assertion`: real Inductor with its own test fault on (`_raise_error_for_testing`): every
  graph fails Inductor's own assertion at one site in `compile_fx`, whatever its ops;
- `kill_worker`: the process kills itself with SIGKILL while compiling;
- `device_fault`: the compiled graph raises CUDA's illegal-address error when it runs (a fault
  that repeats: the compiler's finding); `device_fault_once`: the same, but only until the file
  `$DIVFUZZ_PLANTED_FAULT_MARK` exists, which its first fault makes (a fault that does not repeat
  in a fresh worker: an earlier case's asynchronous fault, or the machine's);
- `hang`: sleeps for an hour when the compiled graph first runs;
- `slow_forward` / `slow_backward`: right numbers, but the forward (or the backward) graph runs
  `SLOW_REPEATS` more times per call, its results discarded: slow kernels planted for the perf
  oracle (`--oracle perf` must find `slower-fwd` / `slower-bwd`).
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import compile_fx


class PlantedCompileError(RuntimeError):
    """Raised by the `compile_error` planted backend."""


def eager_in_disguise(gm: torch.fx.GraphModule, example_inputs):
    return gm.forward


def _bump_first(outputs, dtype: torch.dtype, bump):
    """Apply `bump` to the first output of `dtype`, keeping autograd's view of it intact."""
    single = not isinstance(outputs, (tuple, list))
    outs = [outputs] if single else list(outputs)
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and o.dtype == dtype and o.numel() > 0:
            with torch.no_grad():
                changed = bump(o.detach().clone())
            outs[i] = o + (changed - o.detach()) if o.requires_grad else changed
            break
    return outs[0] if single else type(outputs)(outs)


def _one_ulp_up(t: torch.Tensor) -> torch.Tensor:
    # bfloat16 is sign-magnitude: one more in the low bits is one ULP further from zero.
    t = t.contiguous()  # an output of another layout (a transposed input's) has no flat view
    t.view(-1).view(torch.int16)[0] += 1
    return t


def _flip_uint8(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()  # an output of another layout (a transposed input's) has no flat view
    t.view(-1)[0] += 1
    return t


def ulp_bump(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return _bump_first(gm.forward(*args), torch.bfloat16, _one_ulp_up)

    return run


def _eight_ulps_up(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()  # an output of another layout (a transposed input's) has no flat view
    t.view(-1).view(torch.int16)[0] += 8
    return t


def eight_ulps_up(gm: torch.fx.GraphModule, example_inputs):
    """The first bf16 output's first element 8 ULPs further from zero: more than a few ULPs
    (`severity_policy.FEW_ULPS`), short of grossly worse (16 ULPs in bf16)."""
    def run(*args):
        return _bump_first(gm.forward(*args), torch.bfloat16, _eight_ulps_up)

    return run


def uint8_flip(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return _bump_first(gm.forward(*args), torch.uint8, _flip_uint8)

    return run


def _first_float(outputs, bump):
    """Apply `bump` to the first floating output, whatever its dtype."""
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    dtype = next((o.dtype for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel()), None)
    return outputs if dtype is None else _bump_first(outputs, dtype, bump)


def _scale_up(t: torch.Tensor) -> torch.Tensor:
    return t.mul_(1 + 2**-5)


def drift(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return _first_float(gm.forward(*args), _scale_up)

    return run


def _nan_first(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()  # an output of another layout (a transposed input's) has no flat view
    t.view(-1)[0] = float("nan")
    return t


def nan_first(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return _first_float(gm.forward(*args), _nan_first)

    return run


def inductor_nan_first(gm: torch.fx.GraphModule, example_inputs):
    compiled_fn = compile_fx(gm, example_inputs)

    def run(*args):
        return _first_float(compiled_fn(*args), _nan_first)

    return run


def one_thread_nan(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        outputs = gm.forward(*args)
        return _first_float(outputs, _nan_first) if torch.get_num_threads() == 1 else outputs

    return run


def _inf_to_nan(t: torch.Tensor) -> torch.Tensor:
    return t.masked_fill_(t.isinf(), float("nan"))


def inf_to_nan(gm: torch.fx.GraphModule, example_inputs):
    """A bug only some inputs meet: the first floating output's infinities come out NaN (finite
    values are untouched), so a graph whose drawn inputs give no infinity hides it."""
    def run(*args):
        return _first_float(gm.forward(*args), _inf_to_nan)

    return run


def _widened(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64 if t.dtype == torch.float32 else torch.float32)


def wrong_dtype(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        out = gm.forward(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        i = next((i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.is_floating_point()), None)
        if i is not None:
            outs[i] = _widened(outs[i])
        return type(out)(outs) if isinstance(out, (tuple, list)) else outs[0]

    return run


_FLOAT32_TINY = torch.finfo(torch.float32).tiny


def _flushed(x):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == torch.float64:
        return x
    return torch.where((x != 0) & (x.abs() < _FLOAT32_TINY), x * 0, x)


# Written apart from `divfuzz.fuzzer.engine.explain`'s flush on purpose: the planted backend is the
# behaviour the experiment must recognise, so it must not share the experiment's code (a shared bug
# would make both agree and the test pass for nothing).
class _FlushToZero(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _flushed(x)

    @staticmethod
    def backward(ctx, grad):
        return _flushed(grad)


class _FlushingInterpreter(torch.fx.Interpreter):
    def run_node(self, n):
        value = super().run_node(n)
        if n.op in ("placeholder", "call_function", "call_method", "call_module") and isinstance(value, torch.Tensor) \
                and value.is_floating_point() and value.dtype != torch.float64:
            return _FlushToZero.apply(value)
        return value


def flush_subnormals(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return _FlushingInterpreter(gm).run(*args)

    return run


def flush_first_output(gm: torch.fx.GraphModule, example_inputs):
    flushing = flush_subnormals(gm, example_inputs)

    def run(*args):
        flushed, plain = flushing(*args), gm.forward(*args)
        if isinstance(flushed, torch.Tensor):
            return flushed
        return type(flushed)([flushed[0], *plain[1:]])

    return run


def flush_and_nan(gm: torch.fx.GraphModule, example_inputs):
    flushing = flush_subnormals(gm, example_inputs)

    def run(*args):
        return _first_float(flushing(*args), _nan_first)

    return run


def _max_sharing_ties(x, dim, keepdim=False):
    values = torch.amax(x, dim, keepdim=keepdim)
    return torch.return_types.max((values, torch.argmax(x, dim, keepdim=keepdim)))


def split_ties(gm: torch.fx.GraphModule, example_inputs):
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.max and len(node.args) + len(node.kwargs) >= 2:
            node.target = _max_sharing_ties
    gm.recompile()
    return gm.forward


def _log_depth_scan(combine):
    def scan(x, dim, *, dtype=None):
        y = (x if dtype is None else x.to(dtype)).movedim(dim, -1)
        step = 1
        while step < y.shape[-1]:
            y = torch.cat([y[..., :step], combine(y[..., step:], y[..., :-step])], -1)
            step *= 2
        return y.movedim(-1, dim)

    return scan


_REASSOCIATED = {torch.cumprod: _log_depth_scan(torch.mul), torch.cumsum: _log_depth_scan(torch.add)}


def reassociate_scans(gm: torch.fx.GraphModule, example_inputs):
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _REASSOCIATED:
            node.target = _REASSOCIATED[node.target]
    gm.recompile()
    return gm.forward


def _reversed_last_dim(reduce):
    def reduced(x, *args, **kwargs):
        dim = args[0] if args else kwargs.get("dim")
        return reduce(x.flip(-1) if dim in (-1, x.dim() - 1) else x, *args, **kwargs)

    return reduced


_REVERSED = {torch.sum: _reversed_last_dim(torch.sum), torch.mean: _reversed_last_dim(torch.mean)}


def reversed_sums(gm: torch.fx.GraphModule, example_inputs):
    """Every sum and mean over the last dim accumulated backwards: the same sum in another order,
    the freedom any compiler has (the reduction-order mechanism must explain what this changes)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _REVERSED:
            node.target = _REVERSED[node.target]
    gm.recompile()
    return gm.forward


def _as_if_contiguous(x):
    """`x`'s storage read as a contiguous tensor of its shape from the storage's first element,
    NaN past the storage's end; `x` itself when it is contiguous and starts there (or is not a tensor)."""
    if not isinstance(x, torch.Tensor) or (x.is_contiguous() and x.storage_offset() == 0) or x.numel() == 0:
        return x
    have = x.untyped_storage().nbytes() // x.element_size()
    flat = torch.as_strided(x, (have,), (1,), 0)
    if x.numel() > have:
        flat = torch.cat([flat, torch.full((x.numel() - have,), float("nan"), dtype=x.dtype, device=x.device)])
    return flat[:x.numel()].view(x.shape)


def ignores_strides(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return gm.forward(*[_as_if_contiguous(a) for a in args])

    return run


def stale_second_call(gm: torch.fx.GraphModule, example_inputs, mode=None):
    # `mode`: torch.compile hands a backend other than Inductor the mode it was asked for; this one
    # plants what a CUDA-graphs mode's replay can do wrong, so it takes any mode and ignores it.
    first: list = []

    def run(*args):
        if not first:
            out = gm.forward(*args)
            first.append(tuple(o.detach().clone() if isinstance(o, torch.Tensor) else o for o in out)
                         if isinstance(out, (tuple, list)) else out.detach().clone())
            return out
        stale = first[0]
        return type(stale)(o.clone() if isinstance(o, torch.Tensor) else o for o in stale) if isinstance(stale, tuple) \
            else stale.clone()

    return run


def order_dependent(gm: torch.fx.GraphModule, example_inputs):
    """Right until it has run on inputs of another shape than its first call's: after that, a call
    with the first shapes comes back with its first floating output scaled by 1 + 2^-5 (what the
    other sizes left behind): a result that depends on which size ran first."""
    shapes: list = []

    def run(*args):
        key = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        if not shapes:
            shapes.append(key)
        elif key != shapes[0]:
            shapes.append(key)
        out = gm.forward(*args)
        return _first_float(out, _scale_up) if key == shapes[0] and len(shapes) > 1 else out

    return run


def forgets_mutation(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        return gm.forward(*[a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a for a in args])

    return run


def compile_error(gm: torch.fx.GraphModule, example_inputs):
    raise PlantedCompileError("planted: this backend always fails to compile")


def inductor_assertion(gm: torch.fx.GraphModule, example_inputs):
    with inductor_config.patch(_raise_error_for_testing=True):
        return compile_fx(gm, example_inputs)


def kill_worker(gm: torch.fx.GraphModule, example_inputs):
    os.kill(os.getpid(), signal.SIGKILL)
    return gm.forward


FAULT_MARK_ENV = "DIVFUZZ_PLANTED_FAULT_MARK"
_ILLEGAL_ADDRESS = "CUDA error: an illegal memory access was encountered"


def device_fault(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        raise RuntimeError(_ILLEGAL_ADDRESS)

    return run


def device_fault_once(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        mark = os.environ.get(FAULT_MARK_ENV)
        if mark and not os.path.exists(mark):
            with open(mark, "w"):
                pass
            raise RuntimeError(_ILLEGAL_ADDRESS)
        return gm.forward(*args)

    return run


def hang(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        time.sleep(3600)
        return gm.forward(*args)

    return run


def slow_to_run(gm: torch.fx.GraphModule, example_inputs):
    """Eager's numbers, each call 2 s late: a test's window to act while a case (or a group's
    sibling) runs in the worker."""
    def run(*args):
        time.sleep(2.0)
        return gm.forward(*args)

    return run


# How many times more the slow planted backends run their graph per call (results discarded):
# the slowed side costs about 1 + SLOW_REPEATS times its own work, on any device and any size,
# so a perf oracle that misses it is broken, not unlucky.
SLOW_REPEATS = 2


def _slowed(gm: torch.fx.GraphModule, example_inputs):
    def run(*args):
        out = gm(*args)
        with torch.no_grad():
            for _ in range(SLOW_REPEATS):
                gm(*args)
        return out

    return run


def _plain(gm: torch.fx.GraphModule, example_inputs):
    return gm


def slow_forward(gm: torch.fx.GraphModule, example_inputs):
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_slowed, bw_compiler=_plain)(gm, example_inputs)


def slow_backward(gm: torch.fx.GraphModule, example_inputs):
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_plain, bw_compiler=_slowed)(gm, example_inputs)
