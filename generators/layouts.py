"""Input layouts: how a graph input's values sit in memory (its strides, storage offset, overlap).

A compiled graph is specialised on its inputs' strides as well as their shapes and dtypes, and a
share of torch.compile's wrong-index bugs live there (a transposed view, a slice with a step, an
expanded dim). A `TensorSpec.layout` names one layout of a closed vocabulary (`LAYOUTS`); each is
written once, as a `code` template over the contiguous value `t`, that `divfuzz.generators.build`
compiles to make the input and `divfuzz.reports.repro` and `issue.py` print, so that the engine
and every script lay an input out with one text.

Invariants:
- a layout changes where values sit, never which values the graph reads, except `expanded`,
  whose template repeats the first row along dim 0 (a stride 0 cannot hold other values): the
  template's result is the input, for eager, compiled and the fp64 reference alike;
- the bytes a layout leaves between or before the elements (a slice's step, a storage offset)
  are NaN, so a compiler that reads them shows it;
- `layout_problem(layout, shape)` is None exactly when the template applies to that shape;
- templates print only fixed text and validated ints (`repr`), never text from a spec.
"""

from __future__ import annotations

CONTIGUOUS = "contiguous"
# The vocabulary, in draw order (the simplest first: shrinking goes there).
LAYOUTS = (CONTIGUOUS, "transposed", "permuted", "strided", "expanded", "channels_last", "offset")
# Layouts whose elements overlap in memory: no op may write into such an input or a view of it.
OVERLAPPING = frozenset({"expanded"})
# Elements of NaN in front of an `offset` input's first element.
STORAGE_OFFSET = 3


def layout_problem(layout: str, shape: tuple[int, ...]) -> str | None:
    """Why `layout` cannot lay out a tensor of `shape`, or None when it can."""
    if layout not in LAYOUTS:
        return "is not one of " + ", ".join(LAYOUTS)
    rank = len(shape)
    need = {"transposed": 2, "permuted": 3, "strided": 1, "expanded": 1, "channels_last": 4}.get(layout, 0)
    if layout == "channels_last" and rank != 4:
        return "needs a 4-D shape"
    if rank < need:
        return f"needs at least {need} dims"
    return None


def layout_code(layout: str, t: str, rank: int) -> str:
    """The expression that lays out the contiguous tensor named `t` (of `rank` dims) as `layout`.

    `t` is a validated identifier of the caller's; `rank` an int. The contiguous layout is `t`."""
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"expected an int rank but got {rank!r}")
    if layout == CONTIGUOUS:
        return t
    if layout == "transposed":
        if rank == 2:
            return f"{t}.t().contiguous().t()"
        return f"{t}.transpose(-2, -1).contiguous().transpose(-2, -1)"
    if layout == "permuted":  # the dims reversed in memory: the reversal is its own inverse
        order = repr(tuple(range(rank - 1, -1, -1)))
        return f"{t}.permute{order}.contiguous().permute{order}"
    if layout == "strided":  # every other element of a row twice as long, NaN between
        return f"torch.stack([{t}, torch.full_like({t}, float('nan'))], -1).flatten(-2)[..., ::2]"
    if layout == "expanded":  # dim 0 of stride 0: the first row, repeated
        return f"{t}[:1].expand({t}.shape)"
    if layout == "channels_last":
        return f"{t}.contiguous(memory_format=torch.channels_last)"
    if layout == "offset":  # the elements start STORAGE_OFFSET elements into their storage, NaN before
        return (f"torch.cat([torch.full(({STORAGE_OFFSET!r},), float('nan'), dtype={t}.dtype, device={t}.device), "
                f"{t}.flatten()]).as_strided({t}.shape, {t}.stride(), {STORAGE_OFFSET!r})")
    raise ValueError(f"Expected a layout in {LAYOUTS} but got layout={layout!r}")
