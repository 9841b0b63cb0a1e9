"""issue.py's inputs are the values divfuzz judged, bit for bit: literals up to 16 elements, one
seeded generator line per larger input, and a file beside the script only where a recipe has no
one-line form (`divfuzz.reports.issue_inputs`). Fast: no compile."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from divfuzz.generators import recipes
from divfuzz.generators.build import make_inputs
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.reports.issue_inputs import INPUTS_FILE, LITERAL_MAX, ONE_LINE_RECIPES, input_lines, literal_code, recipe_code
from divfuzz.reports.issue_script import SCRIPT_NAMES, _names

_FUNCS = {**recipes.RECIPES, **recipes.INITS}
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return torch.equal(a.contiguous().view(_BITS[a.dtype]), b.contiguous().view(_BITS[b.dtype]))
    return torch.equal(a, b)


@pytest.mark.parametrize("kind", sorted(ONE_LINE_RECIPES))
@pytest.mark.parametrize("shape", [(17,), (3, 7), (2, 3, 5)])
def test_each_one_line_recipe_draws_the_recipes_values_and_leaves_the_generator_where_it_does(kind, shape):
    g = torch.Generator().manual_seed(2024)
    want, after = _FUNCS[kind](shape, g), torch.randn(4, generator=g)
    g = torch.Generator().manual_seed(2024)
    got = eval(recipe_code(kind, shape), {"torch": torch, "g": g})
    assert _same_bits(want, got)
    assert torch.equal(after, torch.randn(4, generator=g))  # the next input draws from the same place


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_literals_keep_every_bit_of_special_values(dtype):
    info = torch.finfo(dtype)
    values = torch.tensor([0.0, -0.0, info.tiny, -info.tiny / 4, info.max, -info.max, float("inf"), -float("inf"),
                           float("nan"), 0.1, 1 / 3, info.eps], dtype=torch.float64).to(dtype)
    code = literal_code(values, "cpu")
    assert _same_bits(values, eval(code, {"torch": torch}))
    assert "view(" not in code  # all readable: the only NaN is float('nan')'s


def test_a_nan_of_other_bits_is_written_as_its_bit_pattern():
    values = torch.tensor([1.5, float("nan"), -2.0])
    values.view(torch.int32)[1] = -4194304  # 0xffc00000: the NaN x86 arithmetic makes (sign bit set)
    code = literal_code(values.reshape(3, 1), "cpu")
    assert ".view(torch.float32)" in code
    assert _same_bits(values.reshape(3, 1), eval(code, {"torch": torch}))


def _spec(inputs, recipe="normal", seed=7):
    """A spec whose graph adds its data inputs (only the inputs matter here)."""
    node_in = tuple(t.name for t in inputs if t.init == "data")[:1] * 2
    shape = next(t.shape for t in inputs if t.init == "data")
    return GraphSpec(inputs=tuple(inputs), nodes=(Node("v1", "add", node_in, (), inputs[0].dtype, shape),), outputs=("v1",),
                     recipe=InputRecipe(recipe, seed))


def _made(spec, tmp_path: Path):
    """The inputs issue.py's lines make (run as the script runs them), in spec order."""
    made = input_lines(spec, "cpu")
    for name, data in made.files.items():
        (tmp_path / name).write_bytes(data)
    scope = {"torch": torch, "Path": Path, "__file__": str(tmp_path / "issue.py")}
    exec("\n".join(made.lines), scope)
    return made, [scope[t.name] for t in spec.inputs]


@pytest.mark.parametrize("recipe", sorted(recipes.RECIPES))
def test_input_lines_make_the_spec_inputs_bit_for_bit(recipe, tmp_path):
    spec = _spec([
        TensorSpec("x0", (4, 8), "bfloat16"),
        TensorSpec("w_small", (LITERAL_MAX,), "float32", requires_grad=True, init="near_one"),
        TensorSpec("w_big", (3, 8), "float16", init="fan_in"),
        TensorSpec("b_after", (5,), "float32", init="near_zero"),  # after the last large input: a literal
    ], recipe=recipe)
    made, got = _made(spec, tmp_path)
    for want, have in zip(make_inputs(spec, "cpu"), got):
        assert _same_bits(want.detach(), have.detach()) and want.requires_grad == have.requires_grad
    assert made.lines[-1].startswith("b_after = torch.tensor(")
    if recipe in ONE_LINE_RECIPES:
        assert made.lines[0].startswith("g = torch.Generator().manual_seed(7)") and not made.files
        assert len(made.lines) == 1 + len(spec.inputs)
    else:
        assert set(made.files) == {INPUTS_FILE} and INPUTS_FILE in made.how


def test_small_inputs_alone_are_all_literals(tmp_path):
    spec = _spec([TensorSpec("x0", (2, 3), "float32"), TensorSpec("x1", (), "float16")], recipe="subnormal")
    made, got = _made(spec, tmp_path)
    assert not made.files and all(" = torch.tensor(" in line for line in made.lines)
    for want, have in zip(make_inputs(spec, "cpu"), got):
        assert _same_bits(want, have)


def test_graph_names_that_the_script_binds_are_renamed():
    spec = GraphSpec(inputs=(TensorSpec("bad", (4,), "float32"), TensorSpec("bad_", (4,), "float32")),
                     nodes=(Node("tol", "add", ("bad", "bad_"), (), "float32", (4,)),), outputs=("tol",))
    names = _names(spec)
    assert not set(names.values()) & SCRIPT_NAMES
    assert len(set(names.values())) == 3 and names["bad_"] == "bad_"
