"""An eager run of a captured aten graph with its order-free ops accumulating in another order.

A sum, a mean, a variance, a softmax's denominator, a layer norm's statistics and a matmul's inner
dim give the same mathematical result for any order of the elements they accumulate, and a scan
(cumsum, cumprod, logcumsumexp) for any association of its prefix; neither eager nor a compiler
defines that order. `run_reordered(gm, inputs, order)` runs `gm` eagerly with
each such op's reduced dims permuted (`divfuzz.generators.build.last_dim_permutation`: reversed,
rolled, interleaved) in its inputs, and a kept dim permuted back in its output: values eager's own
kernels give in another order. `minimize --module` asks whether they account for a bug
candidate (the reduction-order mechanism, `divfuzz.oracles.mechanisms`), as the campaign does with
`divfuzz.fuzzer.engine.explain`.

Invariant: every rewrite is exact in real arithmetic (a permutation of summed terms, or of a
normalised row and its weights); ops not listed run as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.fx

from divfuzz.generators.build import last_dim_permutation, log_depth_scan

aten = torch.ops.aten


def _dims(x: torch.Tensor, dims) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(x.dim()))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted({d % x.dim() for d in dims}) if x.dim() else []


def _permute(t: torch.Tensor, dims: Sequence[int], order: str, *, inverse: bool = False) -> torch.Tensor:
    for d in dims:
        n = t.shape[d]
        if n < 2:
            continue
        perm = last_dim_permutation(n, order, t.device)
        t = t.index_select(d, torch.argsort(perm) if inverse else perm)
    return t


def _reduction(dims_at: int) -> Callable:
    """A reduction whose result does not depend on the order along its dims (arg `dims_at`)."""
    def rewrite(target, args, kwargs, order):
        x = args[0]
        dims = _dims(x, args[dims_at] if len(args) > dims_at else kwargs.get("dim"))
        return target(_permute(x, dims, order), *args[1:], **kwargs)
    return rewrite


def _along_dim(target, args, kwargs, order):
    """softmax / log_softmax along args[1]: permute the row, then put the result back."""
    x, dim = args[0], args[1]
    dims = _dims(x, dim)
    return _permute(target(_permute(x, dims, order), *args[1:], **kwargs), dims, order, inverse=True)


def _layer_norm(target, args, kwargs, order):
    """native_layer_norm(x, shape, weight, bias, eps) -> (out, mean, rstd): the normalised dims of x
    and of the weight and bias permuted alike, out put back (mean and rstd are per row)."""
    x, shape, weight, bias = args[0], args[1], args[2], args[3]
    k = len(shape)
    dims = list(range(x.dim() - k, x.dim()))
    wdims = list(range(k))
    moved = [_permute(x, dims, order), shape,
             _permute(weight, wdims, order) if isinstance(weight, torch.Tensor) else weight,
             _permute(bias, wdims, order) if isinstance(bias, torch.Tensor) else bias, *args[4:]]
    out, mean, rstd = target(*moved, **kwargs)
    return _permute(out, dims, order, inverse=True), mean, rstd


def _group_norm(target, args, kwargs, order):
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd): the last
    dim past the channels permuted (the group's statistics run over it), out put back; a 2-d
    input has no such dim and runs as it is."""
    x = args[0]
    if x.dim() < 3:
        return target(*args, **kwargs)
    out, mean, rstd = target(_permute(x, [x.dim() - 1], order), *args[1:], **kwargs)
    return _permute(out, [x.dim() - 1], order, inverse=True), mean, rstd


def _scan(combine: str) -> Callable:
    """cumsum / cumprod / logcumsumexp along args[1], associated as a log-depth parallel prefix in
    float32 for a bfloat16 or float16 input (`divfuzz.generators.build.log_depth_scan`)."""
    def rewrite(target, args, kwargs, order):
        x, dim = args[0], args[1] if len(args) > 1 else kwargs.get("dim")
        dtype = kwargs.get("dtype") or (args[2] if len(args) > 2 else None)
        if not isinstance(dim, int) or x.dim() == 0:
            return target(*args, **kwargs)
        out_dtype = dtype or x.dtype
        work = x.to(out_dtype)
        if work.dtype in (torch.bfloat16, torch.float16):
            work = work.float()
        return log_depth_scan(work.movedim(dim, -1), combine).movedim(-1, dim).to(out_dtype)
    return rewrite


def _mm(target, args, kwargs, order):
    """mm(a, b) / bmm(a, b): the inner dim, a's last and b's second-to-last, permuted alike."""
    a, b = args[0], args[1]
    return target(_permute(a, [a.dim() - 1], order), _permute(b, [b.dim() - 2], order), *args[2:], **kwargs)


def _addmm(target, args, kwargs, order):
    bias, a, b = args[0], args[1], args[2]
    return target(bias, _permute(a, [a.dim() - 1], order), _permute(b, [b.dim() - 2], order), *args[3:], **kwargs)


# aten overload packets whose order of accumulation is free, and how each is rewritten.
ORDER_FREE: dict = {
    aten.sum: _reduction(1), aten.mean: _reduction(1), aten.var: _reduction(1), aten.std: _reduction(1),
    aten.var_mean: _reduction(1), aten.std_mean: _reduction(1), aten.amax: _reduction(1), aten.amin: _reduction(1),
    aten.logsumexp: _reduction(1),
    aten._softmax: _along_dim, aten._log_softmax: _along_dim, aten.softmax: _along_dim, aten.log_softmax: _along_dim,
    aten.native_layer_norm: _layer_norm, aten.native_group_norm: _group_norm,
    aten.mm: _mm, aten.bmm: _mm, aten.addmm: _addmm,
    aten.cumsum: _scan("add"), aten.cumprod: _scan("mul"), aten.logcumsumexp: _scan("logaddexp"),
}


def order_free_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes `run_reordered` rewrites."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and getattr(n.target, "overloadpacket", None) in ORDER_FREE]


class _Reordered(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, order: str):
        super().__init__(gm)
        self.order = order

    def call_function(self, target, args, kwargs):
        rewrite = ORDER_FREE.get(getattr(target, "overloadpacket", None))
        if rewrite is None or not args or not isinstance(args[0], torch.Tensor):
            return super().call_function(target, args, kwargs)
        return rewrite(target, args, kwargs, self.order)


def run_reordered(gm: torch.fx.GraphModule, inputs: Sequence, order: str):
    """`gm`'s outputs, run eagerly with every order-free op's dims taken in `order`."""
    with torch.no_grad():
        return _Reordered(gm, order).run(*inputs)
