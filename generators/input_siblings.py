"""More inputs for one compiled graph: a drawn spec's siblings under other input recipes.

A case's compile is nearly all of its cost on a GPU host (97% of a case's worker time in a 420 s
H100 campaign), and a compiled graph is specialised on its inputs' shapes, dtypes and strides,
never on their values. A spec and a copy of it with another `InputRecipe` therefore run through
the same compiled code: the copy costs an eager run, a compiled run and its judgement, not a
compile. Many of the divergences divfuzz hunts are a matter of the values (a rounding boundary, a
signed zero, an infinity, a range's edge), so each compiled graph meets several distributions.

Invariants:
- a sibling is the drawn spec with only its recipe replaced: the same graph, so the same compile;
- the siblings are a pure function of the spec: the same spec gives the same siblings on any
  machine, in any run (a resumed campaign finds them where it stored them);
- each sibling's recipe kind differs from the spec's and from every other sibling's, and keeps
  the spec's seed.
"""

from __future__ import annotations

import random
from dataclasses import replace

from divfuzz.generators.spec import RECIPE_KINDS, GraphSpec, InputRecipe

# The most inputs one compile serves: the drawn recipe and every other kind once.
MAX_INPUTS_PER_COMPILE = len(RECIPE_KINDS)
# A campaign's default (`divfuzz fuzz --inputs-per-compile`): the drawn recipe and 3 others. A
# sibling costs its eager runs, a compiled run and its judgement (tens of milliseconds), a
# compile 1-2 s on the H100 host (figures: DESIGN.md, "One compile, several inputs").
DEFAULT_INPUTS_PER_COMPILE = 4


def input_siblings(spec: GraphSpec, inputs_per_compile: int) -> tuple[GraphSpec, ...]:
    """The `inputs_per_compile - 1` siblings of `spec`: copies under other recipe kinds, picked
    by a generator seeded from the spec's digest, in the order they are to run."""
    if not 1 <= inputs_per_compile <= MAX_INPUTS_PER_COMPILE:
        raise ValueError(f"Expected inputs_per_compile in 1..{MAX_INPUTS_PER_COMPILE} but got {inputs_per_compile!r}")
    others = [kind for kind in RECIPE_KINDS if kind != spec.recipe.kind]
    kinds = random.Random(int(spec.digest()[:16], 16)).sample(others, inputs_per_compile - 1)
    return tuple(replace(spec, recipe=InputRecipe(kind=kind, seed=spec.recipe.seed)) for kind in kinds)


def same_graph(a: GraphSpec, b: GraphSpec) -> bool:
    """Whether `a` and `b` differ at most in their input recipe (so one compile serves both)."""
    return replace(a, recipe=b.recipe) == b
