"""The inputs of an `issue.py`, as plain torch lines that make exactly the values divfuzz judged.

Three ways, tried in this order for a spec (`input_lines`):
- every input of at most `LITERAL_MAX` elements is a literal: each value printed as the shortest
  decimal that gives the same bits in its dtype (checked here, value by value), or as integer bit
  patterns viewed as the dtype where a NaN carries other bits than `float('nan')`;
- larger inputs come from one seeded generator line (`g = torch.Generator().manual_seed(SEED)`)
  and one line per input, each the recipe as one expression (`ONE_LINE_RECIPES`, held bitwise
  equal to `divfuzz.generators.recipes` by tests/test_issue_inputs.py);
- a recipe with no one-line form: the exact bytes go to `issue_inputs.bin` beside the script (the
  last resort; `IssueInputs.how` says so).
Values are drawn from one generator in spec order, so every input up to the last large one is
drawn (or read) the same way; the small inputs after it are literals.

Invariant: what reaches the text is an int or float printed with `repr`, a dtype through
`DTYPE_CODE`, a recipe through `ONE_LINE_RECIPES`, and a name checked by `name_problem`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from divfuzz.generators.build import make_inputs
from divfuzz.generators.layouts import CONTIGUOUS, LAYOUTS, layout_code
from divfuzz.generators.ops import DTYPE_CODE
from divfuzz.generators.spec import GraphSpec
from divfuzz.reports.repro import graph_name, int_literal

# Inputs of at most this many elements are written as literal values.
LITERAL_MAX = 16
# The file beside issue.py that holds inputs no one-line recipe makes (little-endian raw bytes).
INPUTS_FILE = "issue_inputs.bin"

# Each recipe and parameter initialisation of `divfuzz.generators.recipes` as one expression of
# `{s}` (the shape), `{r}` (the shape with its last dimension 1) and a generator `g`: the same
# draws in the same order and the same float operations (a product with a sign of +-1 is exact in
# any order). Recipes absent here reuse a drawn tensor and need more than one line.
ONE_LINE_RECIPES: dict[str, str] = {
    "normal": "torch.randn({s}, generator=g)",
    "large_mean": "torch.rand({r}, generator=g) * 400 + 100 + 0.05 * torch.randn({s}, generator=g)",
    "near_constant": "torch.randn({r}, generator=g) + 1e-4 * torch.randn({s}, generator=g)",
    "near_pow2": ("torch.exp2(torch.randint(-6, 7, {s}, generator=g).float()) * (1 + torch.randint(-8, 9, {s}, generator=g)"
                  ".float() * 2.0**-23) * torch.where(torch.rand({s}, generator=g) < 0.5, -1.0, 1.0)"),
    "near_bf16_midpoint": ("(torch.randn({s}, generator=g).to(torch.bfloat16).float().view(torch.int32) + 0x8000"
                           " + torch.randint(-3, 4, {s}, generator=g, dtype=torch.int32)).view(torch.float32)"),
    "log_uniform": "torch.where(torch.rand({s}, generator=g) < 0.5, -1.0, 1.0) * torch.pow(10.0, torch.rand({s}, generator=g) * 12 - 6)",
    "mixed_sign": "torch.where(torch.rand({s}, generator=g) < 0.5, -1.0, 1.0) * torch.exp(torch.randn({s}, generator=g) * 2)",
    "decimal_grid": "torch.randint(-20000, 20001, {s}, generator=g).float() * 0.1",
    "fan_in": "torch.randn({s}, generator=g) / {last} ** 0.5",
    "near_one": "(1 + 0.1 * torch.randn({s}, generator=g)).abs()",
    "near_zero": "0.1 * torch.randn({s}, generator=g)",
}


@dataclass(frozen=True)
class IssueInputs:
    """The input lines of an issue.py, the files they read (name -> bytes), and how the values
    were written, in words for issue.md."""

    lines: tuple[str, ...]
    files: dict[str, bytes] = field(default_factory=dict)
    how: str = ""


def _shape_code(shape: tuple[int, ...]) -> str:
    dims = [int_literal(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _float_text(value: float, dtype: torch.dtype, bits: int, int_view: torch.dtype) -> str | None:
    """The shortest decimal literal whose value, as a tensor of `dtype`, has exactly `bits`; None
    for a NaN (its bits are checked apart)."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "float('inf')" if value > 0 else "-float('inf')"
    for digits in range(1, 18):
        text = repr(float(f"{value:.{digits}g}"))
        if torch.tensor(float(text), dtype=dtype).view(int_view).item() == bits:
            return text
    raise AssertionError(f"no literal gives the bits {bits:#x} of {value!r} in {dtype}")  # repr of a double always does


_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def literal_code(t: torch.Tensor, device: str) -> str:
    """`t` (on the CPU) as a torch expression that makes the same bits on `device`."""
    dtype_code = DTYPE_CODE[str(t.dtype).removeprefix("torch.")]
    where = "" if device == "cpu" else f", device={device!r}"
    shape = tuple(t.shape)
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return f"torch.empty({_shape_code(shape)}, dtype={dtype_code}{where})"
    if t.is_floating_point():
        view = _INT_VIEW[t.dtype]
        bits = flat.view(view).tolist()
        nan_bits = torch.tensor(float("nan"), dtype=t.dtype).view(view).item()
        texts = [_float_text(v, t.dtype, b, view) for v, b in zip(flat.double().tolist(), bits)]
        if any(text is None and b != nan_bits for text, b in zip(texts, bits)):  # a NaN of other bits: write the bits
            body = ", ".join(repr(int(b)) for b in bits)
            code = f"torch.tensor([{body}], dtype={DTYPE_CODE[str(view).removeprefix('torch.')]}).view({dtype_code})"
            code += "" if device == "cpu" else f".to({device!r})"
            return code + ("" if len(shape) == 1 else f".reshape({_shape_code(shape)})")
        body = ", ".join("float('nan')" if text is None else text for text in texts)
    else:
        body = ", ".join(repr(int(v)) for v in flat.tolist())
    if len(shape) == 0:
        return f"torch.tensor({body}, dtype={dtype_code}{where})"
    code = f"torch.tensor([{body}], dtype={dtype_code}{where})"
    return code if len(shape) == 1 else code + f".reshape({_shape_code(shape)})"


def recipe_code(kind: str, shape: tuple[int, ...]) -> str | None:
    """The one-line form of recipe `kind` for `shape` (drawing from `g`), or None."""
    template = ONE_LINE_RECIPES.get(kind)
    if template is None or not shape:
        return None
    rows = tuple(shape[:-1]) + (1,)
    return template.format(s=_shape_code(tuple(shape)), r=_shape_code(rows), last=int_literal(int(shape[-1])))


def _operand(code: str) -> str:
    """`code` ready for a method call after it: parenthesised unless it is one call from its
    first parenthesis to its last character (our templates' text: no strings inside)."""
    depth, first_close = 0, None
    for i, ch in enumerate(code):
        depth += (ch == "(") - (ch == ")")
        if ch == ")" and depth == 0 and first_close is None:
            first_close = i
    one_call = code.startswith("torch.") and first_close == len(code) - 1
    return code if one_call else f"({code})"


def _tail(t, dtype: str, device: str, *, grad: bool = True) -> str:
    """What follows a float32 recipe value: its dtype, device and (with `grad`) requires_grad."""
    out = "" if dtype == "float32" else f".to({DTYPE_CODE[dtype]})"
    out += "" if device == "cpu" else f".to({device!r})"
    return out + (".requires_grad_()" if t.requires_grad and grad else "")


def input_lines(spec: GraphSpec, device: str) -> IssueInputs:
    """The lines that make `spec`'s inputs on `device`, bit for bit as divfuzz made them."""
    values = make_inputs(spec, "cpu")
    large = [i for i, t in enumerate(spec.inputs) if math.prod(t.shape) > LITERAL_MAX]
    drawn = set(range(large[-1] + 1)) if large else set()
    kinds = {i: spec.recipe.kind if spec.inputs[i].init == "data" else spec.inputs[i].init for i in drawn}
    one_line = all(recipe_code(kinds[i], tuple(spec.inputs[i].shape)) is not None for i in drawn)
    lines: list[str] = []
    files: dict[str, bytes] = {}
    if drawn and one_line:
        lines.append(f"g = torch.Generator().manual_seed({int_literal(spec.recipe.seed)})")
        how = "drawn from one seeded generator (the values divfuzz used, bit for bit)"
    elif drawn:
        lines.append(f"raw = (Path(__file__).parent / {INPUTS_FILE!r}).read_bytes()  # exact values (little-endian)")
        how = (f"read from `{INPUTS_FILE}` beside the script: the `{spec.recipe.kind}` inputs divfuzz draws take more "
               "than one line of torch, so their exact bytes are in that file")
    else:
        how = "written as literals (the exact bits divfuzz used)"
    blob = bytearray()
    for i, (t, value) in enumerate(zip(spec.inputs, values)):
        name = graph_name(t.name)
        laid_out = t.layout != CONTIGUOUS
        grad = ".requires_grad_()" if t.requires_grad and not laid_out else ""
        if i not in drawn:
            lines.append(f"{name} = {literal_code(value, device)}{grad}")
        elif one_line:
            code, tail = recipe_code(kinds[i], tuple(t.shape)), _tail(t, t.dtype, device, grad=not laid_out)
            lines.append(f"{name} = {_operand(code) if tail else code}{tail}")
        else:
            data = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            start, end = len(blob), len(blob) + len(data)
            blob += data
            where = "" if device == "cpu" else f".to({device!r})"
            lines.append(f"{name} = torch.frombuffer(bytearray(raw[{start}:{end}]), dtype={DTYPE_CODE[t.dtype]})"
                         f".reshape({_shape_code(tuple(t.shape))}){where}{grad}")
        if laid_out:  # the values as divfuzz laid them out: its layout's own template
            layout = _LAYOUT_NAMES[t.layout]
            lines.append(f"{name} = {layout_code(layout, name, len(t.shape))}{'.requires_grad_()' if t.requires_grad else ''}"
                         f"  # {layout} layout")
    if blob:
        files[INPUTS_FILE] = bytes(blob)
    return IssueInputs(tuple(lines), files, how)


_LAYOUT_NAMES = {name: name for name in LAYOUTS}  # a layout reaches the text only through this table
