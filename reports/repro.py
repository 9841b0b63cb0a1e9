"""Writing a spec as a standalone `repro.py` that needs only torch.

The script builds the inputs with plain torch code (the recipe functions' own source), runs the
graph eagerly, compiled and in float64, prints versions, max ULP, differing elements, integer
flips and the fp64 triage, and exits 1 while eager and compiled differ (or compiling fails), 0
once they agree.

One source for what it runs and how it judges:
- the graph is each op's `code` template, the very text `divfuzz.generators.build` compiles to run it;
- the judging is the engine's own judge and severity policy (`records/outcomes.py`,
  `records/verdict.py`, `records/severity.py`, `oracles/perf.py`, `records/mechanism_table.py`, `oracles/mechanisms.py`,
  `oracles/severity_policy.py`, `oracles/ulp.py`, `oracles/boundary.py`, `oracles/compare.py`,
  `oracles/judge.py`), carried by source (`carried_judge`). Its last line states the severity, its
  rule and its output (`SeverityReason.labelled`), as `divfuzz replay` and the report do.
`tests/test_repro_numbers.py` checks that the numbers it prints equal the engine's verdict, and
`scripts/check_buckets_reproduce.py` that a campaign's buckets read the same in the report, in
`replay` and in their repro.py.
Not measured by the script: rounding boundaries (pre-images of an integer output), the
conditioning reruns, the explain experiments (`divfuzz.fuzzer.engine.explain`) and the culprit's
switch. They come as data (`RECORDED`, `SWITCH`), from divfuzz's run of this spec, and are used
only while the script's own numbers are the ones divfuzz recorded (`recorded_measures`); the
script says which it used.

Invariant: nothing from a spec or a store reaches the script as raw text. Names are checked
again here (`divfuzz.generators.validate.name_problem`) and printed as they are; numbers are printed
with `repr` of an int or float; dtypes, recipes and autocast go through lookup tables; every
string (title, notes, outputs, backend, config, the recorded measures as JSON text) is a `repr`
or an escaped docstring.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from types import ModuleType
from typing import TYPE_CHECKING

from divfuzz.generators import recipes, runtime
from divfuzz.generators.aliasing import mutated_inputs
from divfuzz.generators.shape_siblings import dynamic_marks
from divfuzz.generators.build import reference_params
from divfuzz.generators.layouts import CONTIGUOUS, LAYOUTS, layout_code
from divfuzz.oracles import boundary as boundary_oracle
from divfuzz.oracles import compare as compare_oracle
from divfuzz.oracles import findings as findings_oracle
from divfuzz.oracles import judge as judge_oracle
from divfuzz.oracles import mechanisms as mechanisms_policy
from divfuzz.oracles import perf as perf_policy
from divfuzz.oracles import severity_policy
from divfuzz.oracles import ulp as ulp_oracle
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import name_problem
from divfuzz.records import outcomes as outcome_records
from divfuzz.records import mechanism_table as mechanism_records
from divfuzz.records import severity as severity_records
from divfuzz.records import verdict as verdict_records
from divfuzz.records.config import COMPARED_COMPILE

if TYPE_CHECKING:  # a config and a verdict are read, never built here
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.verdict import Verdict

# The engine's oracles, in dependency order: each module uses only names of those before it.
CARRIED_ORACLES: tuple[ModuleType, ...] = (ulp_oracle, boundary_oracle, compare_oracle)
# The engine's judge, in dependency order: the verdict records, the severity policy and what it
# reads, the oracles, then the one output judge. Each module uses only names of those before it
# (and of `_JUDGE_PREAMBLE`); no two define one name (`tests/test_repro_summary.py`).
CARRIED_JUDGE: tuple[ModuleType, ...] = (outcome_records, verdict_records, severity_records, perf_policy, mechanism_records,
                                         mechanisms_policy,
                                         findings_oracle, severity_policy, *CARRIED_ORACLES, judge_oracle)


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


# Computed once, here, at import. Parsing Python source is not thread-safe in CPython 3.11: the
# AST constructor keeps its recursion depth in interpreter-wide state, so two threads parsing at
# once can fail with "SystemError: AST constructor recursion depth mismatch" (issue 40: 2 of 3
# two-slot campaigns aborted, a slot writing a bucket's repro while Hypothesis, drawing in the
# other slot, parsed newly imported modules for its constants). Module import is serialized and
# a campaign imports this module before its first thread starts (through `divfuzz.reports.bucket_folder`),
# so no slot, pool or report thread ever parses Python to write a script.
_CARRIED_RUNTIME = ("# divfuzz's generators/runtime.py (docstring and imports left out): what the engine runs too.\n"
                    + carried_source(runtime))


def module_path(module: ModuleType) -> str:
    """`divfuzz.oracles.judge` -> `oracles/judge.py`: how a script names a module it carries."""
    return module.__name__.removeprefix("divfuzz.").replace(".", "/") + ".py"


# What the carried modules import, defined once before them (their own imports are left out).
_JUDGE_PREAMBLE = """import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any"""
_CARRIED_JUDGE = "\n\n\n".join(
    [f"# divfuzz's judge and severity policy, verbatim (docstrings and imports left out): "
     f"{', '.join(module_path(m) for m in CARRIED_JUDGE)}.\n" + _JUDGE_PREAMBLE]
    + [f"# --- {module_path(m)}\n" + carried_source(m) for m in CARRIED_JUDGE])


def carried_judge() -> str:
    """The judge's and the severity policy's modules' source, at a script's top level (`CARRIED_JUDGE`)."""
    return _CARRIED_JUDGE


_JUDGE = '''
def judge(inputs, eager, compiled, reference):
    """Each output, (name, tensor), judged by divfuzz's own judge (`judge_outputs`, carried above,
    as the engine calls it but for the conditioning reruns), its numbers printed; the verdicts."""
    outputs = judge_outputs(eager, compiled, reference, inputs=inputs)
    for o in outputs:
        f, i = o.float_cmp, o.int_cmp
        if o.mismatch:
            line = f"{o.name}: {o.mismatch}"
        elif f is not None:
            line = (f"{o.name}: {f.dtype} {f.n_diff}/{f.numel} elements differ, max {f.max_ulp} ULP, "
                    f"NaN/Inf placement differs at {f.nan_inf_mismatch}; fp64 triage: {f.triage}")
            if f.n_diff:
                line += (f" (RMSE vs fp64: eager {f.rmse_eager:.3g}, compiled {f.rmse_compiled:.3g}; "
                         f"{f.n_gross_worse} elements grossly worse)")
        else:
            line = (f"{o.name}: {i.dtype} {i.flips}/{i.numel} elements flip, max step {i.max_step}; "
                    f"fp64 triage: compiled right {i.compiled_correct}, eager right {i.eager_correct}, "
                    f"neither {i.neither_correct}")
        print(line)
    return outputs


# What this script measures itself, per output, to tell whether divfuzz's recorded measures
# (`RECORDED`) are of these same numbers.
OWN_FLOAT = ("dtype", "numel", "n_diff", "max_ulp", "nan_inf_mismatch", "triage", "n_gross_worse", "n_int_wrong", "n_nonfinite_new")
OWN_INT = ("dtype", "numel", "flips", "max_step", "compiled_correct", "eager_correct", "neither_correct")
# What it does not measure, taken from divfuzz's run of this spec: the conditioning reruns and an
# integer output's rounding boundaries (its pre-images).
TAKEN_FLOAT = ("conditioning_draws", "n_gross_ill_conditioned", "n_int_wrong_ill_conditioned",
               "n_nonfinite_ill_conditioned", "max_reference_shift", "n_int_wrong_boundary")
TAKEN_INT = ("boundary_flips", "gross_flips", "unknown_flips", "min_boundary_ulps", "undefined_flips",
             "conditioning_draws", "gross_ill_conditioned")


def recorded_measures(outputs):
    """The outputs with divfuzz's recorded measures of what this script does not measure, and the
    recorded explanation, when every output's own numbers are the recorded ones; else the
    outputs as measured here and no explanation. With a line saying which it did."""
    recorded = {o["name"]: o for o in RECORDED.get("outputs", ())}
    def same(o):
        r = recorded.get(o.name)
        if r is None or bool(o.mismatch) != bool(r.get("mismatch")):
            return False
        if o.float_cmp is not None:
            return r.get("float") is not None and all(getattr(o.float_cmp, k) == r["float"].get(k) for k in OWN_FLOAT)
        if o.int_cmp is not None:
            return r.get("int") is not None and all(getattr(o.int_cmp, k) == r["int"].get(k) for k in OWN_INT)
        return True
    if not RECORDED or not all(same(o) for o in outputs) or {o.name for o in outputs} != set(recorded):
        note = "no divfuzz run of these numbers" if RECORDED else "nothing recorded"
        return outputs, None, f"judged on this run alone ({note}: no conditioning, rounding boundaries or explanation)"
    taken, merged = [], []
    for o in outputs:
        r = recorded[o.name]
        if o.float_cmp is not None and (r["float"].get("conditioning_draws") or r["float"].get("n_int_wrong_boundary")):
            o = dataclasses.replace(o, float_cmp=dataclasses.replace(o.float_cmp, **{k: r["float"][k] for k in TAKEN_FLOAT if k in r["float"]}))
            taken.append(f"conditioning of {o.name}")
        elif o.int_cmp is not None and o.int_cmp.flips:
            o = dataclasses.replace(o, int_cmp=dataclasses.replace(o.int_cmp, **{k: r["int"][k] for k in TAKEN_INT}))
            taken.append(f"rounding boundaries of {o.name}")
        merged.append(o)
    explanation = Explanation.from_dict(RECORDED["explanation"]) if RECORDED.get("explanation") else None
    if explanation is not None:
        taken.append(f"the {explanation.mechanism} experiment")
    if SWITCH:
        taken.append(f"the culprit's switch {SWITCH}")
    said = ("divfuzz's, of these same numbers: " + ", ".join(taken)) if taken else "nothing of divfuzz's: every measure is this run's"
    return tuple(merged), explanation, f"judged with {said}"


def summary(verdict, note=None):
    """The closing line: divfuzz's severity of this run, its rule and output (`severity_of`,
    under the culprit's switch), as `divfuzz replay` and the report state it."""
    reason = severity_of(verdict, switch=SWITCH or None, subsystem=SUBSYSTEM or None)
    if note:
        print(note)
    if reason is None:
        print("DIVERGES" if verdict.status is not Status.OK else "eager and compiled agree")
    else:
        print(f"DIVERGES: {reason.labelled()}")
'''

def compared_compile_code() -> str:
    """Script text defining `COMPARED_COMPILE` (`divfuzz.records.config`: what divfuzz compiles a
    compared case under) and `compile_settings(overrides)`, for a script to patch Inductor with,
    so that it compiles the kernels divfuzz judged. Shared by repro.py and a module's repro."""
    return _COMPARED_COMPILE_CODE % {"settings": repr(dict(COMPARED_COMPILE))}


_COMPARED_COMPILE_CODE = '''
# divfuzz compiled with these Inductor settings beneath the case's own: no pointwise autotuning,
# and one config per reduction (the one Inductor's deterministic mode picks, not the fastest at
# the first call), so the bits do not follow a timing. This script keeps them, to judge the case
# as divfuzz did; issue.py compiles under torch's defaults and keeps one only where it needs it.
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
    """Named outputs, then `mutated:<input>` for every input the graph writes into (its value after
    the call), then `grad:<input>` for every input that requires grad and gets one (fixed random
    output grads): named as the engine names them, an input no output reaches has none. A graph
    that writes into its inputs runs on copies of them, in their layouts: every run starts alike."""
    if MUTATED:
        inputs = [same_layout_copy(x).requires_grad_(x.requires_grad) for x in inputs]
    for i, d in MARKED:  # the dims divfuzz compiled dynamic (a mark on an eager run does nothing)
        if inputs[i].shape[d] >= 2:
            torch._dynamo.mark_dynamic(inputs[i], d)
    written = [(f"mutated:{n}", x) for n, x in zip(INPUT_NAMES, inputs) if n in MUTATED]
    if not BACKWARD:
        with torch.no_grad():
            return list(zip(OUTPUTS, fn(*inputs))) + written, None
    outs = fn(*inputs)
    if cots is None:
        cots = cotangents(outs, SEED)
    pairs = [(o, c) for o, c in zip(outs, cots) if c is not None and o.requires_grad]
    targets = [(n, x) for n, x in zip(INPUT_NAMES, inputs) if x.requires_grad]
    result = [(n, o.detach()) for n, o in zip(OUTPUTS, outs)] + [(n, x.detach()) for n, x in written]
    if pairs and targets:
        grads = torch.autograd.grad([o for o, _ in pairs], [x for _, x in targets], [c.to(o.dtype) for o, c in pairs],
                                    allow_unused=True)
        result += [(f"grad:{n}", g) for (n, _), g in zip(targets, grads) if g is not None]
    return result, cots


def type_changes(eager, compiled):
    """One line naming the outputs whose dtype, shape or count compiled changed, or None: such
    outputs have no values to compare."""
    if [n for n, _ in compiled] != [n for n, _ in eager]:
        return f"outputs changed: eager returns {[n for n, _ in eager]}, compiled {[n for n, _ in compiled]}"
    kind = lambda e, c: "dtype" if e.dtype != c.dtype else "shape"
    changed = [(kind(e, c), f"{n}: eager {str(e.dtype)[6:]} {list(e.shape)}, compiled {str(c.dtype)[6:]} {list(c.shape)}")
               for (n, e), (_, c) in zip(eager, compiled) if e.dtype != c.dtype or e.shape != c.shape]
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
    if DEVICE_TYPE == "cpu" and THREADS:
        # Inductor's CPU kernels and eager's reductions split their work by thread: their bits follow the count.
        torch.set_num_threads(THREADS)
        print(f"threads: {THREADS}, as divfuzz ran the case")
    inputs = make_inputs(device)
    eager, cots = run(model, inputs)
    # float64 copies in the inputs' own layouts (strides, storage offset), as divfuzz's reference runs
    ref_inputs = [same_layout_copy(x, torch.float64).requires_grad_(x.requires_grad) if x.is_floating_point() else x
                  for x in inputs]
    reference, _ = run(lambda *a: model(*a, ref=True), ref_inputs,
                       [c.double() if c is not None else None for c in cots] if cots else None)
    backend = import_backend(BACKEND)
    torch._dynamo.reset()
    if DEVICE_TYPE == "cpu":
        key_compile_caches_by_cpu_isa()
    try:
        with torch._inductor.config.patch(compile_settings(INDUCTOR_CONFIG)):
            compiled, _ = run(torch.compile(model, backend=backend, dynamic=DYNAMIC, mode=MODE), inputs, cots)
    except Exception as e:
        # One line: the message's lines up to torch's hints on how to debug it.
        lines = [line.strip() for line in str(e).split("Set TORCHDYNAMO_VERBOSE")[0].splitlines() if line.strip()]
        status = Status.COMPILE_ERROR if is_compile_error(e) else Status.RUNTIME_ERROR
        print(f"{status.value.replace('-', ' ')}: {type(e).__name__}: {' '.join(lines)[:300]}")
        summary(Verdict(status, error_type=error_type_of(e)))
        return 1
    changed = type_changes(eager, compiled)
    if changed:
        print(changed)
    outputs = judge(inputs, eager, compiled, reference)
    outputs, explanation, note = recorded_measures(outputs)
    verdict = Verdict(Status.DIVERGED if changed or any(o.differs for o in outputs) else Status.OK, outputs=outputs,
                      explanation=explanation)
    summary(verdict, note if verdict.status is Status.DIVERGED else None)
    return 1 if verdict.status is Status.DIVERGED else 0


if __name__ == "__main__":
    sys.exit(main())
'''


_DTYPE_CODE = {d: f"torch.{d}" for d in ("float32", "bfloat16", "float16", "float64")}
_RECIPE_FUNCS = {name: name for name in (*recipes.RECIPES, *recipes.INITS)}
_LAYOUT_NAMES = {name: name for name in LAYOUTS}  # a layout reaches the text only through this table


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
        name = graph_name(t.name)
        if t.layout == CONTIGUOUS:
            body.append(f"    {name} = {make}({shape}, g).to({_DTYPE_CODE[t.dtype]}).to(device){grad}")
        else:
            body.append(f"    {name} = {make}({shape}, g).to({_DTYPE_CODE[t.dtype]}).to(device)")
            laid_out = layout_code(_LAYOUT_NAMES[t.layout], name, len(t.shape))
            body.append(f"    {name} = {laid_out}{grad}  # layout: {_LAYOUT_NAMES[t.layout]}")
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
    recorded: "Verdict | None" = None,
    switch: str | None = None,
    threads: int | None = None,
    subsystem: str | None = None,
) -> str:
    """The text of a standalone repro script for one case. `recorded`, divfuzz's verdict of this
    spec under this config, gives the measures the script does not take (`RECORDED`); `switch`
    and `subsystem`, what its bucket's culprit names, are what its severity is judged under
    (`SWITCH`, `SUBSYSTEM`: `severity_policy.severity_of`);
    `threads`, torch's CPU threads the case ran with, what the script runs with (`THREADS`).
    The spec's own compile dimensions apply over `config` (`CompileConfig.for_graph`), as in the engine."""
    config = config.for_graph(spec.dynamic, spec.mode)
    header = [f"divfuzz repro: {title}", ""]
    header += list(notes)
    header += [
        "",
        "Run: python repro.py [DEVICE]. Exits 1 while eager and compiled differ, 0 once they agree;",
        "the last line states divfuzz's severity, its rule and the output it is about.",
        f"Compiled with: {config.describe()}",
    ]
    doc = docstring_literal("\n".join(header))
    consts = case_constants(spec, device, config) + "\n" + textwrap.dedent(
        f"""
        TIMEOUT_S = {int(timeout_s)}
        OUTPUTS = {list(spec.outputs)!r}
        INPUT_NAMES = {[t.name for t in spec.inputs]!r}
        MUTATED = {[graph_name(n) for n in mutated_inputs(spec)]!r}  # the inputs the graph writes into (in place)
        MARKED = {[(int(i), int(d)) for i, d in dynamic_marks(spec)]!r}  # (input, dim) marked dynamic
        SWITCH = {str(switch or '')!r}
        SUBSYSTEM = {str(subsystem or '')!r}
        THREADS = {int(threads) if threads else None!r}  # torch's CPU threads divfuzz ran the case with
        """
    ).strip() + "\n" + recorded_code(recorded)
    imports = ("from __future__ import annotations\n\nimport importlib\nimport json\nimport os\nimport platform\nimport signal\n"
               "import sys\n\nimport torch\nimport torch.nn.functional as F")
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
        + "\n\n\n"
        + carried_judge()
        + "\n\n"
        + _JUDGE
        + "\n\n"
        + carried_runtime()
        + "\n\n"
        + _RUNTIME
    )


def recorded_code(verdict: "Verdict | None") -> str:
    """`RECORDED = json.loads(...)`: divfuzz's verdict of the spec (its outputs' measures and its
    explanation), as JSON text in a string literal; an empty dict without a numeric verdict that
    diverged (nothing to take)."""
    data = {}
    if verdict is not None and getattr(verdict.status, "value", verdict.status) == "diverged" and not verdict.perf:
        data = {"outputs": [o.to_dict() for o in verdict.outputs]}
        if verdict.explanation is not None:
            data["explanation"] = verdict.explanation.to_dict()
    return (f"# divfuzz's run of this spec: what this script does not measure is taken from here (`recorded_measures`)\n"
            f"RECORDED = json.loads({json.dumps(data, sort_keys=True)!r})")
