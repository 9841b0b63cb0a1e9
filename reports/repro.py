"""Writing a spec as a standalone `repro.py` that needs only torch.

The script builds the inputs with plain torch code (the recipe functions' own source), runs the
graph eagerly, compiled and in float64, prints versions, max ULP, differing elements, integer
flips and the fp64 triage, and exits 1 while eager and compiled differ (or compiling fails), 0
once they agree.

One source for what it runs and how it judges:
- the graph is each op's `code` template, the very text `divfuzz.generators.build` compiles to run it;
- the judging is the engine's own oracles (`oracles/ulp.py`, `oracles/boundary.py`,
  `oracles/compare.py`), carried by source into the script's `compare` (`carried_oracles`).
`tests/test_repro_numbers.py` checks that the numbers it prints equal the engine's verdict.
Not carried: rounding boundaries (an integer output's flips are not split into boundary and
gross, and none is known to be an undefined cast).

Invariant: nothing from a spec or a store reaches the script as raw text. Names are checked
again here (`divfuzz.generators.validate.name_problem`) and printed as they are; numbers are printed
with `repr` of an int or float; dtypes, recipes and autocast go through lookup tables; every
string (title, notes, outputs, backend, config) is a `repr` or an escaped docstring.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import ModuleType
from typing import TYPE_CHECKING

from divfuzz.generators import recipes, runtime
from divfuzz.generators.build import reference_params
from divfuzz.oracles import boundary as boundary_oracle
from divfuzz.oracles import compare as compare_oracle
from divfuzz.oracles import ulp as ulp_oracle
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import name_problem
from divfuzz.records.config import COMPARED_COMPILE

if TYPE_CHECKING:  # a config is read, never built here
    from divfuzz.records.config import CompileConfig

# The engine's oracles, in dependency order: each module uses only names of those before it.
CARRIED_ORACLES: tuple[ModuleType, ...] = (ulp_oracle, boundary_oracle, compare_oracle)


def carried_runtime() -> str:
    """`divfuzz.generators.runtime`'s source, as every generated script carries it (cotangents, backend lookup)."""
    return _CARRIED_RUNTIME


def carried_source(module: ModuleType) -> str:
    """A module's own source minus its docstring and imports (comments kept): the names it imports
    are defined by the modules carried before it, or by `compare`'s preamble. It parses Python
    (`ast.parse`), which is not thread-safe in CPython 3.11: call it at import time only (the
    texts every script carries are computed below, once, when this module is imported)."""
    source = inspect.getsource(module)
    tree = ast.parse(source)
    drop: set[int] = set()
    for i, stmt in enumerate(tree.body):
        is_doc = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if is_doc or isinstance(stmt, (ast.Import, ast.ImportFrom)):
            drop.update(range(stmt.lineno, stmt.end_lineno + 1))
    lines = [line for n, line in enumerate(source.splitlines(), start=1) if n not in drop]
    return "\n".join(lines).strip("\n")


def carried_oracles() -> str:
    """The oracle modules' source, indented to sit inside the repro's `compare`."""
    return _CARRIED_ORACLES


# Computed once, here, at import. Parsing Python source is not thread-safe in CPython 3.11: the
# AST constructor keeps its recursion depth in interpreter-wide state, so two threads parsing at
# once can fail with "SystemError: AST constructor recursion depth mismatch" (issue 40: 2 of 3
# two-slot campaigns aborted, a slot writing a bucket's repro while Hypothesis, drawing in the
# other slot, parsed newly imported modules for its constants). Module import is serialized and
# a campaign imports this module before its first thread starts (through `divfuzz.reports.files`),
# so no slot, pool or report thread ever parses Python to write a script.
_CARRIED_RUNTIME = ("# divfuzz's generators/runtime.py (docstring and imports left out): what the engine runs too.\n"
                    + carried_source(runtime))
_CARRIED_ORACLES = textwrap.indent("\n\n".join(carried_source(m) for m in CARRIED_ORACLES), "    ", lambda line: bool(line.strip()))


_COMPARE = '''
def compare(names, eager, compiled, reference):
    """Judge each output with divfuzz's own oracles and print its numbers; True when any differs.

    What follows, down to the loop, is divfuzz's oracles/ulp.py, oracles/boundary.py and
    oracles/compare.py verbatim (imports and docstrings left out), so this script judges exactly
    as the engine. Their frozen verdict records are plain dicts here.
    """
    FloatComparison = IntComparison = dict

%(oracles)s

    diverged = False
    for name, e, c, r in zip(names, eager, compiled, reference):
        if e.is_floating_point():
            v = compare_float(e, c, r)
            line = (f"{name}: {v['dtype']} {v['n_diff']}/{v['numel']} elements differ, max {v['max_ulp']} ULP, "
                    f"NaN/Inf placement differs at {v['nan_inf_mismatch']}; fp64 triage: {v['triage']}")
            if v["n_diff"]:
                line += (f" (RMSE vs fp64: eager {v['rmse_eager']:.3g}, compiled {v['rmse_compiled']:.3g}; "
                         f"{v['n_gross_worse']} elements grossly worse)")
            diverged |= bool(v["n_diff"] or v["nan_inf_mismatch"])
        else:
            v = compare_int(e, c, None, reference=r)
            line = (f"{name}: {v['dtype']} {v['flips']}/{v['numel']} elements flip, max step {v['max_step']}; "
                    f"fp64 triage: compiled right {v['compiled_correct']}, eager right {v['eager_correct']}, "
                    f"neither {v['neither_correct']}")
            diverged |= bool(v["flips"])
        print(line)
    return diverged
'''

def compared_compile_code() -> str:
    """Script text defining `COMPARED_COMPILE` (`divfuzz.records.config`: what divfuzz compiles a
    compared case under) and `compile_settings(overrides)`, for a script to patch Inductor with,
    so that it compiles the kernels divfuzz judged. Shared by repro.py and a module's repro."""
    return _COMPARED_COMPILE_CODE % {"settings": repr(dict(COMPARED_COMPILE))}


_COMPARED_COMPILE_CODE = '''
# divfuzz compiled with these Inductor settings beneath the case's own: no pointwise autotuning,
# and one config per reduction (the one Inductor's deterministic mode picks, not the fastest at
# the first call), so the bits do not follow a timing.
COMPARED_COMPILE = %(settings)s


def compile_settings(overrides=None):
    """COMPARED_COMPILE (the keys this torch's Inductor has), then `overrides` over it."""
    def has(key):
        obj = torch._inductor.config
        *parts, last = key.split(".")
        for part in parts:
            obj = getattr(obj, part, None)
            if obj is None:
                return False
        return hasattr(obj, last)

    return {key: value for key, value in COMPARED_COMPILE.items() if has(key)} | dict(overrides or {})
'''.strip()


_RUNTIME = '''
def run(fn, inputs, cots=None):
    """Outputs, then gradients of every input that requires grad (fixed random output grads)."""
    if not BACKWARD:
        with torch.no_grad():
            return list(fn(*inputs)), None
    outs = fn(*inputs)
    if cots is None:
        cots = cotangents(outs, SEED)
    pairs = [(o, c) for o, c in zip(outs, cots) if c is not None and o.requires_grad]
    targets = [x for x in inputs if x.requires_grad]
    result = [o.detach() for o in outs]
    if pairs and targets:
        grads = torch.autograd.grad([o for o, _ in pairs], targets, [c.to(o.dtype) for o, c in pairs],
                                    allow_unused=True)
        result += [g for g in grads if g is not None]
    return result, cots


def type_changes(names, eager, compiled):
    """One line naming the outputs whose dtype, shape or count compiled changed, or None: such
    outputs have no values to compare."""
    if len(compiled) != len(eager):
        return f"outputs changed: eager returns {len(eager)}, compiled {len(compiled)}"
    kind = lambda e, c: "dtype" if e.dtype != c.dtype else "shape"
    changed = [(kind(e, c), f"{n}: eager {str(e.dtype)[6:]} {list(e.shape)}, compiled {str(c.dtype)[6:]} {list(c.shape)}")
               for n, e, c in zip(names, eager, compiled) if e.dtype != c.dtype or e.shape != c.shape]
    if not changed:
        return None
    return f"{changed[0][0]} changed: " + "; ".join(text for _, text in changed)


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else DEVICE
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, lambda *a: (print(f"compiled run did not finish in {TIMEOUT_S} s"), os._exit(1)))
        signal.alarm(TIMEOUT_S)
    print(f"torch {torch.__version__}, python {platform.python_version()}, device {device}"
          + (f" ({torch.cuda.get_device_name()}, CUDA {torch.version.cuda})" if device.startswith("cuda") else ""))
    try:
        import triton
        print(f"triton {triton.__version__}")
    except ImportError:
        pass
    global DEVICE_TYPE, REF_ON_CPU
    DEVICE_TYPE = torch.device(device).type
    REF_ON_CPU = DEVICE_TYPE == "cpu"  # eager rounds some scalars on the CPU only (divfuzz.records.reference_rules)
    inputs = make_inputs(device)
    eager, cots = run(model, inputs)
    ref_inputs = [x.detach().double().requires_grad_(x.requires_grad) if x.is_floating_point() else x for x in inputs]
    reference, _ = run(lambda *a: model(*a, ref=True), ref_inputs,
                       [c.double() if c is not None else None for c in cots] if cots else None)
    backend = import_backend(BACKEND)
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(compile_settings(INDUCTOR_CONFIG)):
            compiled, _ = run(torch.compile(model, backend=backend, dynamic=DYNAMIC, mode=MODE), inputs, cots)
    except Exception as e:
        # One line: the message's lines up to torch's hints on how to debug it.
        lines = [line.strip() for line in str(e).split("Set TORCHDYNAMO_VERBOSE")[0].splitlines() if line.strip()]
        print(f"compile error: {type(e).__name__}: {' '.join(lines)[:300]}")
        return 1
    names = OUTPUTS + [f"grad:{n}" for n, x in zip(INPUT_NAMES, inputs) if x.requires_grad]
    changed = type_changes(names, eager, compiled)
    if changed:
        print(changed)
        return 1
    diverged = compare(names, eager, compiled, reference)
    print("DIVERGES" if diverged else "eager and compiled agree")
    return 1 if diverged else 0


if __name__ == "__main__":
    sys.exit(main())
'''


_DTYPE_CODE = {d: f"torch.{d}" for d in ("float32", "bfloat16", "float16", "float64")}
_RECIPE_FUNCS = {name: name for name in (*recipes.RECIPES, *recipes.INITS)}


def graph_name(name: str) -> str:
    """A graph value's name, printed only once it is a safe identifier."""
    problem = name_problem(name)
    if problem:
        raise ValueError(f"refusing to print graph value name {name!r} as code: it {problem}")
    return name


def int_literal(v) -> str:
    """An integer as Python source; anything else (a bool, a float, a string from a file) raises."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer for generated code but got {v!r}")
    return repr(v)


def docstring_literal(text: str) -> str:
    """`text` as the body of a triple-quoted docstring: backslashes, quotes and control characters
    are escaped, so no title or note can end the string or hold a NUL."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append(ch)
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"""' + "".join(out) + '\n"""'


def node_expression(op, args: list[str], params: dict, cpu_ref_params: dict, other_ref_params: dict) -> str:
    """One node's expression in `model(*inputs, ref=False)`: the op's template, and where the fp64
    reference means something else (`divfuzz.records.reference_rules`) the reference's version
    behind `ref`: its scalars rounded as eager rounds them (on the CPU only, or everywhere), and
    an explicit cast's rounding kept."""
    real = op.code(args, params)
    on_cpu, elsewhere = op.code(args, cpu_ref_params), op.code(args, other_ref_params)
    if on_cpu == elsewhere == real:
        expression = real
    elif on_cpu == elsewhere:
        expression = f"({on_cpu} if ref else {real})"
    else:
        expression = f"({on_cpu} if ref and REF_ON_CPU else {elsewhere} if ref else {real})"
    kept = params.get(op.rounds_to_param) if op.rounds_to_param else None
    if kept in ("bfloat16", "float16", "float32"):
        expression = f"(({expression}).to({_DTYPE_CODE[kept]}).double() if ref else {expression})"
    return expression


def graph_code(spec: GraphSpec) -> str:
    """The graph as a Python function `model(*inputs, ref=False)`."""
    args = ", ".join(graph_name(t.name) for t in spec.inputs)
    lines = [f"def model({args}, ref=False):"]
    lines.append("    D = lambda d: torch.float64 if ref and d.is_floating_point else d")
    indent = "    "
    if spec.autocast:
        lines.append(f"    with torch.autocast(DEVICE_TYPE, dtype={_DTYPE_CODE[spec.autocast]}, enabled=not ref):")
        indent = "        "
    for n in spec.nodes:
        op = get_op(n.op)
        args = [graph_name(i) for i in n.inputs]
        params = {d: reference_params(spec, n, d) for d in ("cpu", "cuda")}
        lines.append(f"{indent}{graph_name(n.name)} = {node_expression(op, args, n.kwargs, params['cpu'], params['cuda'])}")
    lines.append(f"    return ({', '.join(graph_name(o) for o in spec.outputs)},)")
    return "\n".join(lines)


def inputs_code(spec: GraphSpec) -> str:
    used = {spec.recipe.kind} | {t.init for t in spec.inputs if t.init != "data"}
    funcs = [inspect.getsource(getattr(recipes, _RECIPE_FUNCS[name])) for name in sorted(used)]
    body = ["def make_inputs(device):", f"    g = torch.Generator().manual_seed({int_literal(spec.recipe.seed)})"]
    for t in spec.inputs:
        make = _RECIPE_FUNCS[spec.recipe.kind if t.init == "data" else t.init]
        grad = ".requires_grad_(True)" if t.requires_grad else ""
        shape = repr(tuple(int(int_literal(d)) for d in t.shape))
        body.append(f"    {graph_name(t.name)} = {make}({shape}, g).to({_DTYPE_CODE[t.dtype]}).to(device){grad}")
    body.append(f"    return [{', '.join(graph_name(t.name) for t in spec.inputs)}]")
    return "\n\n".join(f.rstrip() for f in funcs) + "\n\n\n" + "\n".join(body)


def case_constants(spec: GraphSpec, device: str, config: "CompileConfig") -> str:
    """The constants every repro script starts with: where it runs, the seed, and what compiles it
    (each a `repr` of a checked value)."""
    return textwrap.dedent(
        f"""
        DEVICE = {device!r}
        DEVICE_TYPE = {device.split(':')[0]!r}
        REF_ON_CPU = {device.split(':')[0] == 'cpu'!r}
        SEED = {int_literal(spec.recipe.seed)}
        BACKWARD = {bool(spec.backward)!r}
        BACKEND = {config.backend!r}
        DYNAMIC = {config.dynamic!r}
        MODE = {config.mode!r}
        INDUCTOR_CONFIG = {dict(config.inductor)!r}
        """
    ).strip()


def render_repro(
    spec: GraphSpec,
    *,
    device: str,
    config: "CompileConfig",
    title: str,
    notes: tuple[str, ...] = (),
    timeout_s: int = 600,
) -> str:
    """The text of a standalone repro script for one case."""
    header = [f"divfuzz repro: {title}", ""]
    header += list(notes)
    header += [
        "",
        "Run: python repro.py [DEVICE]. Exits 1 while eager and compiled differ, 0 once they agree.",
        f"Compiled with: {config.describe()}",
    ]
    doc = docstring_literal("\n".join(header))
    consts = case_constants(spec, device, config) + "\n" + textwrap.dedent(
        f"""
        TIMEOUT_S = {int(timeout_s)}
        OUTPUTS = {list(spec.outputs)!r}
        INPUT_NAMES = {[t.name for t in spec.inputs]!r}
        """
    ).strip()
    imports = "import importlib\nimport os\nimport platform\nimport signal\nimport sys\n\nimport torch\nimport torch.nn.functional as F"
    return (
        "#!/usr/bin/env python3\n"
        + doc
        + "\n"
        + imports
        + "\n\n"
        + consts
        + "\n\n\n"
        + compared_compile_code()
        + "\n\n\n"
        + inputs_code(spec)
        + "\n\n\n"
        + graph_code(spec)
        + "\n\n"
        + _COMPARE % {"oracles": carried_oracles()}
        + "\n\n"
        + carried_runtime()
        + "\n\n"
        + _RUNTIME
    )
