"""Code generation cannot be injected: whatever a spec file holds, `repro.py` and the code in
`report.md` parse into only the expected names and calls.

The checker below walks the AST of every rendered script. Outside `model()` and `make_inputs()`
every statement must be identical to a reference render (fixed imports, the runtime, the recipe
functions) or a constant assignment of a literal. Inside them, each statement binds exactly one
graph value, in spec order, and uses only the graph's own names, the names the templates use,
and calls that the registry's templates can produce (derived by rendering every op with every
choice of its schema). Fast: nothing here compiles.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import json
import re
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from divfuzz.records.config import CompileConfig
from divfuzz.generators.aliasing import mutated_inputs
from divfuzz.generators.layouts import CONTIGUOUS, LAYOUTS, layout_code
from divfuzz.generators import recipes
from divfuzz.records.errors import SpecError
from divfuzz.generators.opdef import Choice, Flag, FloatRange, IntRange
from divfuzz.generators.registry import all_ops
from divfuzz.generators.strategies import graph_specs
from divfuzz.generators.validate import RESERVED_NAMES, load_spec
from divfuzz.reports.bug_report import render_bug_report
from divfuzz.reports.repro import CARRIED_JUDGE, carried_source, node_expression, render_repro
from test_spec_safety import base, rename

RECIPE_NAMES = frozenset(recipes.RECIPES) | frozenset(recipes.INITS)
CONSTS = {"DEVICE", "DEVICE_TYPE", "REF_ON_CPU", "SEED", "BACKWARD", "BACKEND", "DYNAMIC", "MODE", "INDUCTOR_CONFIG", "COMPARED_COMPILE",
          "TIMEOUT_S", "OUTPUTS", "INPUT_NAMES", "MUTATED", "MARKED", "COTANGENT_SEED_OFFSET", "SWITCH", "SUBSYSTEM", "THREADS"}
MODEL_GLOBALS = {"torch", "F", "D", "ref", "DEVICE_TYPE", "REF_ON_CPU"}
INPUTS_GLOBALS = {"torch", "g", "device"} | RECIPE_NAMES


def dotted(node: ast.AST, values: set[str]) -> str:
    """A call target as text, with every graph value written `<value>` and recipes `<recipe>`."""
    if isinstance(node, ast.Name):
        return "<value>" if node.id in values else "<recipe>" if node.id in RECIPE_NAMES else node.id
    if isinstance(node, ast.Attribute):
        return dotted(node.value, values) + "." + node.attr
    if isinstance(node, ast.Call):
        return dotted(node.func, values) + "()"
    if isinstance(node, ast.Subscript):
        return dotted(node.value, values) + "[]"
    return f"<{type(node).__name__}>"


def calls_and_strings(tree: ast.AST, values: set[str]) -> tuple[set[str], set[str]]:
    calls = {dotted(n.func, values) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return calls, strings


def _schema_values(schema):
    if isinstance(schema, Choice):
        return list(schema.values)
    if isinstance(schema, Flag):
        return [True, False]
    if isinstance(schema, (IntRange, FloatRange)):
        return [schema.hi]
    raise AssertionError(schema)


def registry_allow_list() -> tuple[set[str], set[str]]:
    """Every call and string constant that some op's `code` template can produce."""
    args = [f"a{i}" for i in range(8)]
    calls: set[str] = set()
    strings: set[str] = set()
    for op in all_ops().values():
        keys = sorted(op.params)
        for combo in itertools.product(*(_schema_values(op.params[k]) for k in keys)):
            params = dict(zip(keys, combo))
            # The reference's variant (its scalars rounded, an explicit cast kept): same calls and strings.
            expr = ast.parse(node_expression(op, list(args), params, params, params), mode="eval")
            c, s = calls_and_strings(expr, set(args))
            calls |= c
            strings |= s
    return calls, strings


GRAPH_CALLS, GRAPH_STRINGS = registry_allow_list()
# Every call a layout's template makes over an input (`divfuzz.generators.layouts.layout_code`),
# then the input's requires_grad.
LAYOUT_CALLS = {c for layout in LAYOUTS for rank in (1, 2, 3, 4)
                for c in calls_and_strings(ast.parse(layout_code(layout, "x", rank) + ".requires_grad_(True)", mode="eval"), {"x"})[0]}


def reference_spec():
    return load_spec(json.dumps(base()))


def reference_backward_spec():
    """The reference spec with a backward pass (its input requires grad)."""
    data = base()
    data["backward"] = True
    data["inputs"][0]["requires_grad"] = True
    return load_spec(json.dumps(data))


def _dumps(tree: ast.Module) -> dict[str, str]:
    return {getattr(s, "name", None) or ast.dump(s): ast.dump(s) for s in tree.body}


def _bound_at_module_level(text: str) -> set[str]:
    bound = set()
    for stmt in ast.parse(text).body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            bound |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return bound


# What the carried judge binds: its modules' names, and the imports they need (printed once at the top).
CARRIED_NAMES = frozenset(set().union(*(_bound_at_module_level(carried_source(m)) for m in CARRIED_JUDGE))
                          | {"Any", "Callable", "Sequence", "annotations", "asdict", "dataclass", "dataclasses", "enum", "field", "math"})

REFERENCE = _dumps(ast.parse(render_repro(reference_spec(), device="cpu", config=CompileConfig(), title="t")))
RECIPE_DUMPS = {n: ast.dump(ast.parse(textwrap.dedent(inspect.getsource(getattr(recipes, n)))).body[0]) for n in RECIPE_NAMES}


def check_model(fn: ast.FunctionDef, spec) -> None:
    inputs = [t.name for t in spec.inputs]
    values = set(inputs) | {n.name for n in spec.nodes}
    assert [a.arg for a in fn.args.args] == inputs + ["ref"]
    assert [ast.literal_eval(d) for d in fn.args.defaults] == [False]
    body = list(fn.body)
    assert isinstance(body[0], ast.Assign) and body[0].targets[0].id == "D"
    assigns = body[1:-1]
    if spec.autocast:
        (region,) = assigns
        assert isinstance(region, ast.With)
        assigns = region.body
    for a in assigns:
        assert isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
    assert [a.targets[0].id for a in assigns] == [n.name for n in spec.nodes]
    for a in assigns:
        check_expression(a.value, values, MODEL_GLOBALS)
    ret = body[-1]
    assert isinstance(ret, ast.Return) and [e.id for e in ret.value.elts] == list(spec.outputs)


def check_expression(expr: ast.AST, values: set[str], globals_: set[str]) -> None:
    calls, strings = calls_and_strings(expr, values)
    assert calls <= GRAPH_CALLS, calls - GRAPH_CALLS
    assert strings <= GRAPH_STRINGS, strings - GRAPH_STRINGS
    for n in ast.walk(expr):
        assert not isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Import, ast.ImportFrom, ast.Await, ast.Yield))
        if isinstance(n, ast.Name):
            assert n.id in values or n.id in globals_, n.id
        if isinstance(n, ast.Attribute):
            assert not n.attr.startswith("_"), n.attr


def check_make_inputs(fn: ast.FunctionDef, spec) -> None:
    inputs = [t.name for t in spec.inputs]
    assert [a.arg for a in fn.args.args] == ["device"]
    first = fn.body[0]
    assert isinstance(first, ast.Assign) and [t.id for t in first.targets] == ["g"]
    assert calls_and_strings(first.value, set()) == ({"torch.Generator", "torch.Generator().manual_seed"}, set())
    assert [ast.literal_eval(a) for a in first.value.args] == [spec.recipe.seed]
    assigns = fn.body[1:-1]
    assert all(isinstance(a, ast.Assign) and isinstance(a.targets[0], ast.Name) for a in assigns)
    # each input once, then once more where it is laid out: its layout's template over it, nothing else
    assert [a.targets[0].id for a in assigns] == [n for t in spec.inputs for n in [t.name] * (1 + (t.layout != CONTIGUOUS))]
    laid_out = [a for a in assigns if any(isinstance(n, ast.Name) and n.id == a.targets[0].id for n in ast.walk(a.value))]
    assert len(laid_out) == sum(t.layout != CONTIGUOUS for t in spec.inputs)
    for a in laid_out:
        calls, strings = calls_and_strings(a.value, {a.targets[0].id})
        assert calls <= LAYOUT_CALLS, calls - LAYOUT_CALLS
        assert strings <= {"nan"}, strings
        assert {n.id for n in ast.walk(a.value) if isinstance(n, ast.Name)} <= {a.targets[0].id, "torch", "float"}
    for a in (a for a in assigns if a not in laid_out):
        calls, strings = calls_and_strings(a.value, set(inputs))
        assert calls <= {"<recipe>", "<recipe>().to", "<recipe>().to().to", "<recipe>().to().to().requires_grad_"}, calls
        assert not strings
        for n in ast.walk(a.value):
            if isinstance(n, ast.Name):
                assert n.id in INPUTS_GLOBALS, n.id
    ret = fn.body[-1]
    assert isinstance(ret, ast.Return) and [e.id for e in ret.value.elts] == inputs


def check_repro(text: str, spec) -> None:
    tree = ast.parse(text)
    seen = set()
    for i, stmt in enumerate(tree.body):
        if i == 0:
            assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "model":
            check_model(stmt, spec)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "make_inputs":
            check_make_inputs(stmt, spec)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name in RECIPE_NAMES:
            assert ast.dump(stmt) == RECIPE_DUMPS[stmt.name]
        elif isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) == "RECORDED":
            # divfuzz's recorded verdict: one json.loads of one string literal, nothing else
            call = stmt.value
            assert isinstance(call, ast.Call) and ast.unparse(call.func) == "json.loads" and not call.keywords
            assert len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
            assert "RECORDED" not in seen
            seen.add("RECORDED")
        elif isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) in CONSTS:
            (target,) = stmt.targets
            assert target.id not in seen
            seen.add(target.id)
            ast.literal_eval(stmt.value)
        else:  # imports, the runtime functions, the __main__ guard: exactly the reference's
            key = getattr(stmt, "name", None) or ast.dump(stmt)
            assert REFERENCE.get(key) == ast.dump(stmt), ast.unparse(stmt)[:300]
    assert seen == CONSTS | {"RECORDED"}


def report_code(report: str) -> str:
    (block,) = re.findall(r"```python\n(.*?)\n```", report, flags=re.S)
    return block


def check_report(report: str, spec) -> None:
    """report.md's code: model() and make_inputs() checked, a backward case's SEED the recipe's seed
    as an int literal, and every other statement exactly the reference's (forward or backward)."""
    tree = ast.parse(report_code(report))
    reference = REPORT_REFERENCE_BACKWARD if spec.backward else REPORT_REFERENCE_MUTATING if mutated_inputs(spec) else REPORT_REFERENCE
    seeds = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "model":
            check_model(stmt, spec)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "make_inputs":
            check_make_inputs(stmt, spec)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name in RECIPE_NAMES:
            assert ast.dump(stmt) == RECIPE_DUMPS[stmt.name]
        elif spec.backward and isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["SEED"]:
            assert isinstance(stmt.value, ast.Constant) and stmt.value.value == spec.recipe.seed
            seeds += 1
        elif isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["MUTATED_AT"]:
            names = [t.name for t in spec.inputs]
            assert ast.literal_eval(stmt.value) == [names.index(n) for n in mutated_inputs(spec)]
        else:
            key = getattr(stmt, "name", None) or ast.dump(stmt)
            assert reference.get(key) == ast.dump(stmt), ast.unparse(stmt)[:300]
    assert seeds == (1 if spec.backward else 0)


def _render_report(spec) -> str:
    return render_bug_report(spec, title="t", reason=None, culprit={"summary": "s"}, versions={"torch": "x"}, device="cpu",
                             config_desc="inductor", verdict=None)


REPORT_REFERENCE = _dumps(ast.parse(report_code(_render_report(reference_spec()))))
REPORT_REFERENCE_BACKWARD = _dumps(ast.parse(report_code(_render_report(reference_backward_spec()))))


def reference_mutating_spec():
    """The reference spec's input written in place (`mul_scalar_`) after its node."""
    data = base()
    data["nodes"].append({"name": "w1", "op": "mul_scalar_", "inputs": ["x"], "params": {"clone": False, "scalar": 2.0},
                          "dtype": data["inputs"][0]["dtype"], "shape": data["inputs"][0]["shape"]})
    data["outputs"] = list(data["outputs"]) + ["w1"]
    return load_spec(json.dumps(data))


REPORT_REFERENCE_MUTATING = _dumps(ast.parse(report_code(_render_report(reference_mutating_spec()))))


def check_rendered(spec) -> None:
    check_repro(render_repro(spec, device="cpu", config=CompileConfig(), title="t"), spec)
    check_report(_render_report(spec), spec)


# ---- the reserved names are the templates' names ------------------------------------------------


def test_reserved_names_cover_every_name_the_templates_bind_or_use():
    """Graph values are locals of model() and make_inputs(): no template name may be one."""
    spec = reference_spec()
    graph = {t.name for t in spec.inputs} | {n.name for n in spec.nodes}
    for text in (render_repro(spec, device="cpu", config=CompileConfig(), title="t"), report_code(_render_report(spec)),
                 report_code(_render_report(reference_backward_spec()))):
        tree = ast.parse(text)
        module_level = set()
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                module_level.add(stmt.name)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                module_level |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
            else:
                module_level |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        used_by_graph_functions = set()
        for fn in (s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name in ("model", "make_inputs")):
            used_by_graph_functions |= {a.arg for a in fn.args.args}
            lambda_args = {a.arg for n in ast.walk(fn) if isinstance(n, ast.Lambda) for a in n.args.args}
            used_by_graph_functions |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} - lambda_args
        names = (module_level | used_by_graph_functions) - graph
        # The judge repro.py carries by source binds its own module-level names. Graph values are
        # locals of model() and make_inputs(), which use none of them (check_model and
        # check_make_inputs hold what they may read), so those names need no reservation.
        assert used_by_graph_functions - graph <= RESERVED_NAMES, used_by_graph_functions - graph - RESERVED_NAMES
        assert names <= RESERVED_NAMES | CARRIED_NAMES, names - RESERVED_NAMES - CARRIED_NAMES
    assert {"torch", "F", "D", "ref", "g", "device", "model", "make_inputs", "normal", "fan_in"} <= RESERVED_NAMES
    assert set(dir(builtins)) <= RESERVED_NAMES


def test_drawn_specs_pass_the_checker():
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(graph_specs(max_ops=6))
    def check(spec):
        check_rendered(spec)

    check()


def test_checker_catches_an_injected_statement():
    """The checker is not vacuous: a repro with one extra statement in model() fails it."""
    spec = reference_spec()
    text = render_repro(spec, device="cpu", config=CompileConfig(), title="t")
    bad = text.replace("    v2 = F.gelu(v1)", "    v2 = F.gelu(v1)\n    __import__('os').system('touch pwned')")
    assert bad != text
    try:
        check_repro(bad, spec)
    except AssertionError:
        return
    raise AssertionError("the checker accepted an injected statement")


# ---- arbitrary and mutated JSON ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
reserved_sample = st.sampled_from(sorted(RESERVED_NAMES))


def leaf_paths(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from leaf_paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from leaf_paths(v, prefix + (i,))
    if prefix:
        yield prefix


@st.composite
def mutated_specs(draw):
    data = draw(graph_specs(max_ops=4)).to_dict()
    names = [t["name"] for t in data["inputs"]] + [n["name"] for n in data["nodes"]]
    for _ in range(draw(st.integers(0, 2))):  # renames first, while the structure is intact
        old = draw(st.sampled_from(names))
        new = draw(st.one_of(identifiers, reserved_sample, st.text(max_size=10)))
        data = rename(data, old, new)
        names = [new if n == old else n for n in names]
    for _ in range(draw(st.integers(0, 2))):
        if True:
            paths = list(leaf_paths(data))
            path = draw(st.sampled_from(paths))
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = draw(json_values)
    return json.dumps(data)


accepted: list[int] = []


def _load_or_refuse(text: str):
    try:
        return load_spec(text, source="fuzzed.json")
    except SpecError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(json_values)
def test_arbitrary_json_loads_or_raises_a_spec_error(value):
    spec = _load_or_refuse(json.dumps(value))
    if spec is not None:
        check_rendered(spec)


def test_mutated_specs_load_or_raise_a_spec_error_and_loaded_ones_render_only_expected_code():
    accepted.clear()

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(mutated_specs())
    def check(text):
        spec = _load_or_refuse(text)
        if spec is not None:
            accepted.append(1)
            check_rendered(spec)

    check()
    assert len(accepted) >= 10, f"only {len(accepted)} mutants loaded: the checker saw too few specs"


def test_titles_and_notes_cannot_end_the_docstring():
    """A repro's title and notes come from data (a corpus file name, a bucket key, gate problems):
    triple quotes, backslashes, NUL and carriage returns stay inside its docstring."""
    spec = reference_spec()
    title = 'x"""; __import__("os").system("touch pwned"); """\\'
    notes = ("a\x00b", "c\rd", "ends with a backslash \\", "''' and \"\"\"")
    text = render_repro(spec, device="cpu", config=CompileConfig(), title=title, notes=notes)
    tree = ast.parse(text)
    doc = ast.get_docstring(tree, clean=False)
    assert title in doc and all(n in doc for n in notes)
    check_repro(text, spec)


def test_a_module_repro_docstring_cannot_be_ended_by_names_from_the_users_model():
    """`minimize --module` writes output names (pytree keys of the user's model) and the module path
    into its repro's docstring: a key holding triple quotes or a NUL must stay inside it."""
    import pytest
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from divfuzz.reports.module_repro import render_module_repro

    hostile = 'output[\'a"""\nimport os; os.system("x")\n#\']: \x00 differ'
    gm = make_fx(lambda x: x * 2)(torch.ones(2))
    text = render_module_repro("m.py:make_case", hostile, gm, before="eager", rung="inductor", device="cpu")
    tree = ast.parse(text)
    assert isinstance(tree.body[0], ast.Expr) and "os.system" in ast.get_docstring(tree, clean=False)
    assert not any(isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "system" for n in ast.walk(tree))
    with pytest.raises(ValueError, match="ladder rungs"):
        render_module_repro("t", "n", gm, before="eager", rung="os.system('x')", device="cpu")
