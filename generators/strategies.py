"""Public Hypothesis strategies that draw valid graphs: usable from a user's own `@given` tests.

    from divfuzz.generators.strategies import graph_specs
    @given(graph_specs(max_ops=6))
    def test_my_backend(spec): ...

Invariants: every drawn spec passes `validate_spec` and runs eagerly (generation builds valid
graphs, it never filters: each step picks among the ops that accept the values in hand), and
shrinking the draws shrinks the graph (fewer ops, earlier inputs, smaller shapes).

Ops are drawn by weight: each family has a share (`FAMILY_WEIGHTS`), split evenly among its ops,
so the card's families (norms, GELU forms, log2-ceil encodings) keep their share as the registry
grows, and inside them the card's own ops (`CARD_OPS`: GELU, RMSNorm, e8m0) count double. The
weights are constants: a strategy must draw the same way for the same choices, so steering towards
what a campaign drew least is `hypothesis.target` on `divfuzz.generators.coverage.DrawCounts.novelty`.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import replace
from typing import Callable

from hypothesis import reject, strategies as st

from divfuzz.generators.aliasing import shares_storage, writes_in_place
from divfuzz.generators.layouts import LAYOUTS, OVERLAPPING, layout_problem
from divfuzz.generators.node_typing import new_node
from divfuzz.generators.opdef import Meta
from divfuzz.generators.ops import CAST_GUARD, GUARDED_ENCODINGS, cast_guard_params
from divfuzz.generators.registry import all_ops
from divfuzz.generators.shape_siblings import shape_siblings
from divfuzz.generators.surgery import data_inputs
from divfuzz.generators.spec import RECIPE_KINDS, GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.records.dtypes import DATA_DTYPES

ROWS = (4, 16, 32, 64, 128, 256, 512)
MIDDLE = (2, 3, 4, 8)
LAST_DIMS = (8, 24, 40, 64, 96, 100, 128, 160, 200, 257)
MAX_NUMEL = 1 << 17
_FAMILY_ORDER = (
    "norm", "activation", "encoding", "selection", "linear", "cast", "compare", "pointwise", "reduction", "cumulative",
    "statistic", "index", "pool", "resample", "loss", "mutation", "view",
)
# Each family's share of the op draws, split evenly among its ops in the pool drawn from.
FAMILY_WEIGHTS = {
    "norm": 3, "activation": 3, "encoding": 3, "selection": 3, "linear": 1, "cast": 1, "compare": 2, "pointwise": 4,
    "reduction": 2, "cumulative": 2, "statistic": 2, "index": 2, "pool": 2, "resample": 1, "loss": 1,
    "mutation": 2, "view": 3,
}
# Within its family, an op of the card's bug families (GELU forms, RMSNorm, the log2-ceil
# encoding) counts this many times.
CARD_OPS = {"gelu": 2, "gelu_tanh": 2, "gelu_manual": 2, "rms_norm": 2, "rms_norm_manual": 2, "e8m0_encode": 2}
# Weights become integers out of this many for Hypothesis's draw (each at least 1), and the point
# on them is drawn as digits of this base until their span is `SPREAD` times the total.
WEIGHT_RESOLUTION = 100
DIGIT_BASE = 64
SPREAD = 16


def input_recipes(*, kinds: tuple[str, ...] = RECIPE_KINDS, zero_seed: int = 0) -> st.SearchStrategy[InputRecipe]:
    """A named input distribution and its seed. A drawn seed of 0 (Hypothesis's simplest choice,
    where its first examples land whatever its own seed) is `zero_seed` instead: a campaign's seed
    enters its first draws that way (`campaign_recipe_seed`); 0 draws as before."""
    seeds = st.integers(0, 2**31 - 1)
    if zero_seed:
        seeds = seeds.map(lambda drawn: drawn or zero_seed)
    return st.builds(InputRecipe, kind=st.sampled_from(kinds), seed=seeds)


def campaign_recipe_seed(campaign_seed: int) -> int:
    """The recipe seed a campaign of `campaign_seed` draws where Hypothesis draws 0: the seed itself
    inside the recipe's range (1 for a nonzero multiple of it), 0 for seed 0 (its draws unchanged).
    Distinct campaign seeds below 2**31 - 1 give distinct first specs."""
    return campaign_seed % (2**31 - 1) or (1 if campaign_seed else 0)


@st.composite
def data_shapes(draw, *, min_dims: int = 2, max_dims: int = 3, max_numel: int = MAX_NUMEL) -> tuple[int, ...]:
    """Shapes (rows, [middle,] last) whose last dim is often not a power of two."""
    dims = draw(st.integers(min_dims, max_dims))
    last = draw(st.sampled_from(LAST_DIMS))
    shape = (draw(st.sampled_from(ROWS)),) + tuple(draw(st.sampled_from(MIDDLE)) for _ in range(dims - 2)) + (last,)
    while _numel(shape) > max_numel and shape[0] > 1:
        shape = (max(1, shape[0] // 2),) + shape[1:]
    return shape


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@st.composite
def graph_specs(
    draw,
    *,
    min_ops: int = 1,
    max_ops: int = 12,
    dtypes: tuple[str, ...] = DATA_DTYPES,
    ops: tuple[str, ...] | None = None,
    allow_autocast: bool = True,
    allow_backward: bool = True,
    recipes: st.SearchStrategy[InputRecipe] | None = None,
    backward: bool | None = None,
    shapes: st.SearchStrategy[tuple[int, ...]] | None = None,
    first_ops: tuple[str, ...] | None = None,
    allowed: Callable[[str, str, bool], bool] | None = None,
    guard_casts: bool = True,
    op_offset: int = 0,
    zero_recipe_seed: int = 0,
    layouts: bool = True,
    dynamic: bool = True,
    modes: tuple[str, ...] = (),
) -> GraphSpec:
    """A valid graph of `min_ops` to `max_ops` registered ops, its input recipe, autocast and backward.

    The draws come in a fixed order (modes, shape, inputs, then one op at a time, then the recipe),
    so a seed names one graph for as long as the registry is unchanged. `backward` forces the
    training mode on or off (None: drawn, when `allow_backward`); `shapes` replaces the data
    shapes; `first_ops` are the ops the first node is drawn from (by default, any of `ops`).
    `allowed(op, input dtype, backward)` limits each step to what a backend compiles
    (`divfuzz.records.backends.BackendCaps.allows`); None draws from everything (and the same graphs as before it existed).

    `guard_casts` (the default) feeds every float->integer encoding through a `cast_guard` node
    (NaN to 0, clamped to the encoding's range, as real quantizers do), so no drawn graph casts an
    undefined value; the guard takes no draw of its own, so `guard_casts=False` draws the same
    graphs without the guards. A guarded encoding is two nodes: it is drawn only while two fit in
    the drawn op count, or as the first op when nothing else applies. `cast_guard` itself is not
    drawn unless `ops` names it.

    `op_offset` rotates each step's candidate ops (with their weights) by that many places: the
    same ops in the same proportions, but all-zero choices, where Hypothesis starts (its simplest
    example, then short random prefixes extended with zeros), land on another op. A campaign's
    slot `s` draws with `op_offset=s`, so that its slots' first draws differ; 0 draws the same
    graphs as before it existed.

    `zero_recipe_seed` is the input recipe's seed where the draw gives 0 (`input_recipes`): a
    campaign passes its own seed's (`campaign_recipe_seed`), so that its first draws (Hypothesis's
    simplest, the same for every Hypothesis seed) are its own; the later, random draws keep theirs.

    `layouts` (the default) lays out the data inputs of a share of the graphs (`LAYOUT_SHARE`)
    in other layouts than contiguous (`divfuzz.generators.layouts`: transposed, permuted, sliced
    with a step, expanded, channels-last, a storage offset), drawn after the ops, so that the ops
    drawn do not depend on it; a share of the graphs (`FOUR_D_SHARE`) has 4-D data, which
    channels-last needs (drawing from the whole registry only). False draws every input contiguous.

    `dynamic` (the default) compiles a share of the graphs for dynamic shapes (`DYNAMIC_SHARE`:
    `mark_dynamic` on one dim their sizes may vary in, or `dynamic=True`), drawn last; each runs
    with its shape siblings (`divfuzz.generators.shape_siblings`) through one compile.

    `modes` (none by default: a campaign passes them on CUDA with Inductor) are the
    `torch.compile` modes a share of the graphs compile under (`MODE_SHARE`, split among them).
    """
    if not 1 <= min_ops <= max_ops:
        raise ValueError(f"Expected 1 <= min_ops <= max_ops but got min_ops={min_ops!r}, max_ops={max_ops!r}")
    registry = all_ops()
    names = _ops_in_draw_order(registry, ops if ops is not None else tuple(n for n in registry if n != CAST_GUARD))

    autocast = "bfloat16" if allow_autocast and draw(st.integers(0, 9)) < 3 else None
    data_dtype = "float32" if autocast else draw(st.sampled_from(dtypes))
    backward_drawn = allow_backward and draw(st.integers(0, 9)) < 2
    backward = backward_drawn if backward is None else backward
    if shapes is None:
        # 4-D only over the whole registry: a chosen few ops (`ops`) may take no 4-D input
        four_d = layouts and ops is None and first_ops is None and draw(st.integers(0, 99)) < FOUR_D_SHARE
        shapes = data_shapes(min_dims=4, max_dims=4) if four_d else data_shapes()
    shape = draw(shapes)
    n_data = draw(st.integers(1, 2))

    inputs: list[TensorSpec] = [
        TensorSpec(f"x{i}", shape, data_dtype, requires_grad=backward, init="data") for i in range(n_data)
    ]
    values: dict[str, Meta] = {t.name: Meta(shape, data_dtype) for t in inputs}
    base = _base_weights(registry, names)
    consumed: set[str] = set()
    roots = {t.name: t.name for t in inputs}  # each value's storage (`divfuzz.generators.aliasing.alias_roots`)
    nodes: list[Node] = []
    n_ops = draw(st.integers(min_ops, max_ops))
    for step in range(n_ops):
        if len(nodes) >= n_ops:  # cast guards count towards the op count
            break
        # Newest values first, so that shrinking the choice index towards 0 keeps chains.
        floats = [n for n in reversed(list(values)) if values[n].is_float]
        pool = names if step or first_ops is None else _ops_in_draw_order(registry, first_ops)
        usable = {name: _usable(name, floats, values, allowed, backward, guard_casts) for name in pool}
        applicable = [name for name in pool if _candidates(registry[name], usable[name], values, roots)]
        if guard_casts and n_ops - len(nodes) < 2 and nodes:  # no room left for a guard and its encoding
            applicable = [name for name in applicable if name not in GUARDED_ENCODINGS]
        if not applicable:
            break
        shares = base if pool is names else _base_weights(registry, pool)
        turn = op_offset % len(applicable)
        applicable = applicable[turn:] + applicable[:turn]
        op = registry[applicable[_weighted_index(draw, [shares[n] for n in applicable])]]
        node, weights = _draw_node(draw, op, f"v{step + 1}", usable[op.name], values, autocast=autocast, backward=backward,
                                   roots=roots)
        inputs.extend(weights)
        if guard_casts and op.name in GUARDED_ENCODINGS:
            guarded = node.inputs[0]
            guard, _ = new_node(registry[CAST_GUARD], f"g{step + 1}", (guarded,), (values[guarded],),
                                cast_guard_params(op.name, node.kwargs), autocast=autocast, backward=backward)
            nodes.append(guard)
            roots[guard.name] = guard.name
            consumed.add(guarded)
            node = replace(node, inputs=(guard.name,) + node.inputs[1:])
        nodes.append(node)
        consumed.update(node.inputs[: op.arity])
        values[node.name] = Meta(node.shape, node.dtype)
        roots[node.name] = roots[node.inputs[0]] if shares_storage(node) else node.name

    if not nodes and allowed is not None:  # the backend compiles no op on this dtype: draw another
        reject()
    if not nodes:  # no op applies to the inputs (cannot happen with the default registry)
        raise ValueError("no registered op accepts the drawn inputs")
    # Every node not consumed by a later node is an output: no dead code, and integer values
    # (which nothing consumes) are always judged.
    outputs = tuple(n.name for n in nodes if n.name not in consumed)
    recipe = draw(recipes if recipes is not None else input_recipes(zero_seed=zero_recipe_seed))
    if layouts:
        written = {roots[n.inputs[0]] for n in nodes if writes_in_place(n)}
        inputs = _draw_layouts(draw, inputs, written)
    spec = GraphSpec(
        inputs=tuple(inputs),
        nodes=tuple(nodes),
        outputs=outputs,
        recipe=recipe,
        autocast=autocast,
        backward=backward,
    )
    spec = _draw_dynamic(draw, spec) if dynamic else spec
    if modes:
        roll = draw(st.integers(0, 99))
        if roll < MODE_SHARE:
            spec = replace(spec, mode=draw(st.sampled_from(modes)))
    return spec


# Percent of the graphs whose data inputs are drawn in other layouts than contiguous (each input
# then takes one of the layouts its shape allows, contiguous among them), and of those with 4-D data.
LAYOUT_SHARE = 20
FOUR_D_SHARE = 8


def _draw_layouts(draw, inputs: list[TensorSpec], written: set[str]) -> list[TensorSpec]:
    """The data inputs laid out (`LAYOUT_SHARE` of the graphs), weights contiguous; an input the
    graph writes into (`written`) never overlapping (`layouts.OVERLAPPING`)."""
    if draw(st.integers(0, 99)) >= LAYOUT_SHARE:
        return inputs
    out = []
    for t in inputs:
        if t.init == "data":
            fits = [name for name in LAYOUTS if layout_problem(name, t.shape) is None
                    and not (t.name in written and name in OVERLAPPING)]
            # contiguous last: a laid-out graph lays out at least its first input, unless shrunk there
            t = replace(t, layout=draw(st.sampled_from(fits[1:] + fits[:1])))
        out.append(t)
    return out


# Percent of the graphs compiled under one of the `modes` a campaign draws (on CUDA).
MODE_SHARE = 24
# Percent of the graphs compiled with one data dim marked dynamic, and with dynamic=True.
DYNAMIC_SHARE = {"marked": 12, "all": 6}


def _draw_dynamic(draw, spec: GraphSpec) -> GraphSpec:
    """`spec` compiled for dynamic shapes in a share of the draws (`DYNAMIC_SHARE`), where some
    dim's size may vary (a shape sibling exists); else `spec`."""
    roll = draw(st.integers(0, 99))
    if roll >= DYNAMIC_SHARE["marked"] + DYNAMIC_SHARE["all"]:
        return spec
    if roll < DYNAMIC_SHARE["marked"]:
        rank = min(len(t.shape) for t in data_inputs(spec))
        free = [d for d in range(rank) if shape_siblings(replace(spec, dynamic="marked", dynamic_dims=(d,)), 1)]
        return replace(spec, dynamic="marked", dynamic_dims=(draw(st.sampled_from(free)),)) if free else spec
    # dynamic=True: every size a symbol, equal sizes one symbol (duck sizing), so dim 0 varies
    # alone only where no other size of any input equals it
    first = data_inputs(spec)[0].shape[0]
    if any(n == first for t in spec.inputs for i, n in enumerate(t.shape) if not (i == 0 and t in data_inputs(spec))):
        return spec
    candidate = replace(spec, dynamic="all")
    return candidate if shape_siblings(candidate, 1) else spec


def _ops_in_draw_order(registry: dict, ops: tuple[str, ...] | None) -> list[str]:
    """The op names to draw from. Hypothesis favours early choices (and shrinks towards them): the
    ops the bug families live in come first."""
    names = sorted(ops if ops is not None else registry, key=lambda n: (_FAMILY_ORDER.index(registry[n].family) if n in registry else 99, n))
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"Expected registered op names but got ops={unknown!r}")
    return names


def _base_weights(registry: dict, names: list[str]) -> dict[str, float]:
    """Each op's share of the draws among `names`: its family's weight split among the family's ops
    there, the card's ops (`CARD_OPS`) counting double."""
    sizes: Counter = Counter()
    for n in names:
        sizes[registry[n].family] += CARD_OPS.get(n, 1)
    return {n: FAMILY_WEIGHTS.get(registry[n].family, 1) * CARD_OPS.get(n, 1) / sizes[registry[n].family] for n in names}


def _weighted_index(draw, weights: list[float]) -> int:
    """An index into `weights`, drawn in proportion to them.

    Hypothesis draws a bounded integer far from uniformly once its range is large (it favours small
    values), so the point on the cumulative weights is drawn as base-`DIGIT_BASE` digits, each a
    small range it draws about uniformly, taken modulo the total (a bias of at most 1/`SPREAD`).
    How many digits depends only on how many choices there are. All digits at 0, where shrinking
    goes, picks the first choice."""
    if len(weights) == 1:
        return 0
    top = max(weights)
    cumulative = list(itertools.accumulate(max(1, round(WEIGHT_RESOLUTION * w / top)) for w in weights))
    value, span = 0, 1
    while span < SPREAD * WEIGHT_RESOLUTION * len(weights):  # the largest total these weights can have
        value = value * DIGIT_BASE + draw(st.integers(0, DIGIT_BASE - 1))
        span *= DIGIT_BASE
    return bisect.bisect_right(cumulative, value % cumulative[-1])


def _draw_node(draw, op, name: str, floats: list[str], values: dict[str, Meta], *, autocast: str | None,
               backward: bool, roots: dict[str, str]) -> tuple[Node, tuple[TensorSpec, ...]]:
    """One node of `op` on values in hand (its data arguments, params, and the weight inputs it
    needs), typed by `divfuzz.generators.node_typing`. An in-place op writes into a copy in a
    backward graph (its `clone` param) and never reads the storage it writes into
    (`divfuzz.generators.aliasing.aliasing_problem`)."""
    if op.arity == 1:
        args = [draw(st.sampled_from([n for n in floats if op.accepts((values[n],))]))]
    else:
        firsts = [n for n in floats if any(_pair_fits(op, n, m, values, roots) for m in floats)]
        a = draw(st.sampled_from(firsts))
        b = draw(st.sampled_from([m for m in floats if _pair_fits(op, a, m, values, roots)]))
        args = [a, b]
    metas = tuple(values[a] for a in args)
    params = op.draw_params(draw, metas)
    if op.mutates and backward:
        params = {**params, "clone": True}
    return new_node(op, name, tuple(args), metas, params, autocast=autocast, backward=backward)


def _pair_fits(op, a: str, b: str, values: dict[str, Meta], roots: dict[str, str]) -> bool:
    """Whether a binary `op` takes (a, b): accepted, and for an in-place op, storages apart or one value."""
    return op.accepts((values[a], values[b])) and not (op.mutates and roots[a] == roots[b] and a != b)


def _usable(name: str, floats: list[str], values: dict[str, Meta], allowed, backward: bool, guard_casts: bool) -> list[str]:
    """The float values `name` may take as input: all of them, or those the backend compiles it on
    (and, for a guarded encoding, its guard too)."""
    if allowed is None:
        return floats
    needs = (name, CAST_GUARD) if guard_casts and name in GUARDED_ENCODINGS else (name,)
    return [n for n in floats if all(allowed(op, values[n].dtype, backward) for op in needs)]


def _candidates(op, floats: list[str], values: dict[str, Meta], roots: dict[str, str]) -> bool:
    if op.arity == 1:
        return any(op.accepts((values[n],)) for n in floats)
    return any(_pair_fits(op, a, b, values, roots) for a in floats for b in floats)


# The perf oracle's graphs: training-like norm blocks (a norm first, then up to three of the ops
# around it in a transformer block), in bf16, forward and backward, at the sizes where kernels
# (not launch overhead) decide: hidden 512 to 8192, tokens 1k to 64k on a GPU, a CPU-sized range
# on the CPU. tokens x hidden stays within `PERF_MAX_ROW_ELEMENTS` (halving tokens), which keeps a
# block of four nodes inside the spec caps of `divfuzz.generators.validate`.
PERF_NORMS = ("rms_norm", "rms_norm_manual", "layer_norm", "layer_norm_manual")
PERF_OPS = PERF_NORMS + ("add", "mul", "gate", "silu", "gelu", "gelu_tanh", "relu", "sigmoid")
PERF_HIDDEN = (512, 768, 1024, 2048, 4096, 8192)
PERF_TOKENS = {"cuda": (1024, 2048, 4096, 8192, 16384, 32768, 65536), "cpu": (1024, 2048, 4096)}
PERF_MAX_ROW_ELEMENTS = {"cuda": 1 << 23, "cpu": 1 << 21}


@st.composite
def perf_shapes(draw, device_type: str = "cuda") -> tuple[int, int]:
    """(tokens, hidden) for a perf case on `device_type` ("cuda" or "cpu")."""
    tokens = draw(st.sampled_from(PERF_TOKENS[device_type]))
    hidden = draw(st.sampled_from(PERF_HIDDEN))
    while tokens * hidden > PERF_MAX_ROW_ELEMENTS[device_type] and tokens > 1:
        tokens //= 2
    return (tokens, hidden)


def perf_graph_specs(*, device_type: str = "cuda", dtypes: tuple[str, ...] = ("bfloat16",), max_ops: int = 4,
                     ops: tuple[str, ...] | None = None, op_offset: int = 0,
                     zero_recipe_seed: int = 0) -> st.SearchStrategy[GraphSpec]:
    """Training-like norm blocks for the perf oracle (`--oracle perf`): backward always on
    (`op_offset`, `zero_recipe_seed`: as for `graph_specs`)."""
    return graph_specs(
        min_ops=1, max_ops=max(1, min(max_ops, 4)), dtypes=dtypes, ops=ops or PERF_OPS, allow_autocast=False,
        backward=True, shapes=perf_shapes(device_type),
        first_ops=tuple(n for n in PERF_NORMS if ops is None or n in ops) or None, op_offset=op_offset,
        zero_recipe_seed=zero_recipe_seed,
        layouts=False, dynamic=False,
    )


def op_params(op_name: str, metas: tuple[Meta, ...]) -> st.SearchStrategy[dict]:
    """The params `op_name` draws on inputs of `metas` (its own `draw_params`, inside its schema)."""
    op = all_ops()[op_name]
    return st.composite(lambda draw: op.draw_params(draw, metas))()


def op_spec(op_name: str, params: list[dict], dtype: str, shape: tuple[int, ...], *, recipe: InputRecipe = InputRecipe(),
            backward: bool = False) -> GraphSpec:
    """One op applied to the same data inputs once per params set, every node an output: the graph
    a probe or a test runs an op alone in. Weights are made in `dtype`; `validate_spec` passes it
    when every params set fits `shape`."""
    op = all_ops()[op_name]
    backward = backward and op.differentiable
    metas = tuple(Meta(shape, dtype) for _ in range(op.arity))
    data = [TensorSpec(f"x{i}", shape, dtype, requires_grad=backward) for i in range(op.arity)]
    weights: list[TensorSpec] = []
    nodes: list[Node] = []
    for p in params:
        if op.mutates and backward:  # a backward graph's in-place ops write into copies (`aliasing_problem`)
            p = {**p, "clone": True}
        node, ws = new_node(op, f"v{len(nodes) + 1}", tuple(t.name for t in data), metas, p, autocast=None, backward=backward)
        weights += ws
        nodes.append(node)
    return GraphSpec(inputs=tuple(data + weights), nodes=tuple(nodes), outputs=tuple(n.name for n in nodes),
                     recipe=recipe, backward=backward)
