"""`issue.py`: a bug bucket's minimal spec as the plain-torch script a maintainer pastes into an issue.

What it holds, in order: the inputs (`divfuzz.reports.issue_inputs`: exact literals, or one seeded
generator line), the graph as a few lines of torch (each op's `code` template, the text divfuzz
runs), `torch.compile` under torch's defaults, and one comparison
that encodes the bucket's severity rule in plain torch (`CHECKS`). It prints eager, compiled and
fp64 at the first differing elements and ends in an `assert` that fails while the bug is there
(Python exits 1). A compile or runtime error is the call that raises and nothing else; a dtype or
shape change asserts the dtype or shape.

What it sets beyond torch's defaults are its pins (`candidate_pins`: the Inductor settings the case
ran under that differ from this torch's defaults, divfuzz's own compared-compile setting on CUDA
among them, and on the CPU the thread count the case ran with). `render_issue_script` prints the
pins it is given, each with a comment from `PIN_NOTES` that says why it is there: the folder's
writer (`divfuzz.reports.issue_folder`) keeps only those a fresh-process run shows the finding needs.

Each check is a necessary condition of its rule as `divfuzz.oracles` decides it (the same
elements, the same thresholds from `divfuzz.oracles.compare`), so the script fails wherever divfuzz
rated the case a bug; it never imports divfuzz and carries none of its oracles.

Invariants: written only for a `bug` (`render_issue_script` returns None otherwise, and for a
perf verdict, whose repro is the timing script); names are checked (`name_problem`) and renamed
where they would shadow the script's own; numbers are `repr`s, dtypes and rules go through lookup
tables, Inductor keys must be in `INDUCTOR_SWITCHES`, a pin must be one of `candidate_pins`; no
text from a spec or store is pasted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from divfuzz.generators.ops import DTYPE_CODE
from divfuzz.generators.registry import get_op
from divfuzz.generators.runtime import COTANGENT_SEED_OFFSET
from divfuzz.generators.aliasing import MUTATED_PREFIX, mutated_inputs
from divfuzz.generators.shape_siblings import dynamic_marks
from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.compare import GROSS_FACTOR, GROSS_MIN_ULPS, GROSS_MIN_ULPS_BY_DTYPE, TRIAGE_FACTOR
from divfuzz.oracles.severity_policy import FEW_ULPS, NOISE_FRACTION, same_margin
from divfuzz.records.config import BACKEND_IMPORT_PATH, BACKEND_NAME, COMPARED_COMPILE, INDUCTOR_SWITCHES, NUMERICS_NEUTRAL
from divfuzz.records.outcomes import COMPILER_FAILURES
from divfuzz.records.severity import Severity
from divfuzz.records.backends import backend_of
from divfuzz.reports.issue_inputs import input_lines
from divfuzz.generators.build import reference_params
from divfuzz.reports.repro import docstring_literal, graph_name, int_literal, node_expression

if TYPE_CHECKING:
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict

# What each numeric bug rule's assert says, in the words of issue.md too.
CHECKS = {
    "nan-inf-new": "NaN/Inf in compiled where eager and fp64 are finite",
    "int-valued-wrong": "an integer-valued result differs from eager where eager equals fp64",
    "int-gross": "the integer result differs from both eager and fp64",
    "float-gross-worse": ("compiled is further from fp64 than eager: its error exceeds {factor:g}x eager's largest "
                          "(and {floor:g} ULPs) at the output's scale"),
    # The two compiled-worse rules a decomposition at fault makes a bug (`severity_policy.DECOMPOSITION_DEFECT_RULES`).
    "many-ulps-worse": ("compiled is further from fp64 than eager (its summed error over the differing elements above "
                        "{triage:g}x eager's) and differs by more than {few} ULPs or on more than {fraction:g}% of the elements"),
    "rmse-worse": "compiled's RMSE against fp64 exceeds {margin}, the margin torch._dynamo.utils.same allows",
    "nan-inf-wrong": "eager is NaN/Inf exactly as fp64 is, and compiled gives another value",
    "nan-inf-lost": "eager is NaN as fp64 is, on finite inputs, and compiled gives a number there",
    "zero-sign-wrong": "compiled's zeros have the other sign than eager's, which fp64 shares",
    # Discrete answers a skipped low-precision rounding decides are bugs where a precision knob
    # removes them (`divfuzz.records.mechanism_table.DECISIVE_RULES`): the check is eager's answer.
    "nan-inf-moved": "compiled puts NaN/Inf elsewhere than eager, whose low-precision rounding decides it",
}
DISCRETE_CHECK = "the discrete answer differs from eager's, whose low-precision rounding decides it"
CHECKS.update({rule: DISCRETE_CHECK for rule in ("int-boundary", "int-flip", "int-valued-boundary", "int-eager-inexact",
                                                 "compiled-fp64-correct")})
# The suspect rules that only say an output is sensitive are bugs where compiled dropped an explicit
# cast's rounding (`divfuzz.oracles.mechanisms.CONDITIONED_SUSPECT_RULES`): issue.py asserts the
# rule the judge measured before it read the sensitivity, which the dropped rounding makes fail.
MEASURED_RULE = {"gross-worse-ill-conditioned": "float-gross-worse", "nan-inf-ill-conditioned": "nan-inf-new",
                 "int-valued-ill-conditioned": "int-valued-wrong", "int-ill-conditioned": "int-gross"}
CHECKS.update({rule: CHECKS[measured] for rule, measured in MEASURED_RULE.items()})
# Rules judged over the whole output (no per-element threshold): their check is an aggregate.
AGGREGATE_RULES = frozenset({"many-ulps-worse", "rmse-worse"})
# The integer view and the magnitude mask that order a float dtype's bits as its values (many-ulps-worse).
_BITS = {"bfloat16": ("torch.int16", "0x7FFF"), "float16": ("torch.int16", "0x7FFF"),
         "float32": ("torch.int32", "0x7FFFFFFF"), "float64": ("torch.int64", "0x7FFFFFFFFFFFFFFF")}
ERROR_RULES = frozenset(kind.value for kind in COMPILER_FAILURES.values())
# Names issue.py binds itself: a graph value named so is renamed (`_names`).
SCRIPT_NAMES = frozenset({
    "torch", "F", "Path", "importlib", "signal", "sys", "g", "raw", "model", "D", "ref", "eager", "compiled", "err_e",
    "err_c", "ok", "scale", "ulp", "tol", "bad", "i", "name", "t", "outs", "cots", "grad", "backend", "args", "same",
    "key", "dist", "sum_e", "sum_c", "rmse_e", "rmse_c",
})
# Seconds a hang's script waits before it exits 1.
HANG_S = 600


@dataclass(frozen=True)
class IssueScript:
    """`issue.py`'s text, the files it reads (name -> bytes), and words for issue.md: what its
    assert checks and how its inputs were written."""

    text: str
    files: dict[str, bytes] = field(default_factory=dict)
    check: str = ""
    inputs_how: str = ""

    @property
    def lines(self) -> int:
        return len(self.text.splitlines())


def check_words(rule: str, dtype: str | None = None, fc=None) -> str:
    """What makes the script fail for `rule` (a bug rule), in words: the condition its assert
    catches, so that "fails while <this>" and "Exits 1 while <this>" read right; `fc`, the
    output's `FloatComparison`, gives `rmse-worse` its margin."""
    if rule == "output-type-mismatch":
        return "compiled returns another dtype or shape than eager"
    if rule in ERROR_RULES:
        return f"compiling or running it fails ({rule})"
    floor = GROSS_MIN_ULPS_BY_DTYPE.get(dtype or "", GROSS_MIN_ULPS)
    if fc is not None:
        multiplier, slack = same_margin(fc)
        margin = f"{multiplier:g}x eager's" + (f" + {slack:.3g}" if slack else "")
    else:
        margin = "a multiple of eager's"
    return CHECKS.get(rule, rule).format(factor=GROSS_FACTOR, floor=floor, triage=TRIAGE_FACTOR, few=FEW_ULPS,
                                         fraction=NOISE_FRACTION * 100, margin=margin)


def _names(spec: GraphSpec) -> dict[str, str]:
    """Each graph value's name in the script: as it is, checked, unless the script binds it."""
    taken = {t.name for t in spec.inputs} | {n.name for n in spec.nodes}
    out = {}
    for name in taken:
        new = graph_name(name)
        while new in SCRIPT_NAMES or (new != name and new in taken):
            new += "_"
        out[name] = new
    return out


def setting_lines(config: "CompileConfig", device: str) -> list[str]:
    """`torch._inductor.config.KEY = VALUE` for each Inductor setting the case ran under that
    differs from this torch's default (keys from `INDUCTOR_SWITCHES`, values by `repr`); on CUDA
    also the compared-compile settings that choose a reduction's kernel (not the timing-only ones)."""
    wanted = dict(config.inductor)
    if device.startswith("cuda"):
        neutral = {k for k, _ in NUMERICS_NEUTRAL}
        wanted = {k: v for k, v in COMPARED_COMPILE if k not in neutral} | wanted
    lines = []
    for key, value in sorted(wanted.items()):
        if key not in INDUCTOR_SWITCHES and key not in dict(COMPARED_COMPILE):
            raise ValueError(f"refusing to print Inductor key {key!r}: not one of divfuzz's switches")
        default = _inductor_default(key)
        if default is _MISSING or default == value and type(default) is type(value):
            continue
        if not (value is None or isinstance(value, (bool, int))):
            raise TypeError(f"expected a bool, an int or None for Inductor key {key!r} but got {value!r}")
        lines.append(f"torch._inductor.config.{key} = {value!r}")
    return lines


_MISSING = object()

# Why a pin is in issue.py, as its comment says it (`render_issue_script`'s `pin_note`).
PIN_NOTES = {
    # kept by the fresh-process check (`divfuzz.reports.issue_folder`): the finding needs it
    "needed": "needed: without it this script exits 0 (divfuzz ran it in a fresh process both ways)",
    # the check found the script passing both ways: what the case ran under, kept as it was
    "as-run": "divfuzz ran the case with it; in a fresh process the script exited 0 or errored with and without it",
    # the check did not run (a hang's script, or a caller that checks nothing)
    "unchecked": "divfuzz ran the case with it (not checked without it)",
}


def candidate_pins(config: "CompileConfig", device: str, threads: int | None) -> tuple[str, ...]:
    """Every line issue.py can set beyond torch's defaults for this case, in the order it prints
    them: each Inductor setting the case ran under that differs from this torch's default
    (`setting_lines`, divfuzz's compared-compile setting on CUDA among them), then on the CPU
    `torch.set_num_threads(N)`, the thread count the case ran with (`Verdict.threads`)."""
    pins = setting_lines(config, device)
    if device.split(":")[0] == "cpu" and isinstance(threads, int) and not isinstance(threads, bool) and 0 < threads <= 4096:
        pins.append(f"torch.set_num_threads({threads!r})")
    return tuple(pins)


def _inductor_default(key: str):
    """This torch's value of Inductor's `key` (its default: nothing patches it here), or `_MISSING`."""
    # lazy: heavy: only a bug bucket with settings needs Inductor's config module
    import torch._inductor.config as inductor_config

    obj = inductor_config
    for part in key.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _compile_call(config: "CompileConfig") -> tuple[list[str], str]:
    """(lines before, the `torch.compile(model, ...)` expression) with only non-default arguments."""
    before, args = [], []
    if not backend_of(config.backend).is_inductor:
        if BACKEND_IMPORT_PATH.fullmatch(config.backend):
            module, _, attr = config.backend.partition(":")
            before = ["import importlib", f"backend = getattr(importlib.import_module({module!r}), {attr!r})"]
            args.append("backend=backend")
        elif BACKEND_NAME.fullmatch(config.backend):
            args.append(f"backend={config.backend!r}")
        else:
            raise ValueError(f"refusing to print backend {config.backend!r}")
    if config.dynamic:
        args.append("dynamic=True")
    if config.mode:
        args.append(f"mode={config.mode!r}")
    return before, "torch.compile(" + ", ".join(["model", *args]) + ")"


def _model_lines(spec: GraphSpec, names: dict[str, str], device_type: str) -> tuple[list[str], bool]:
    """`def model(...)`: the graph, each node its op's code template; (lines, whether it takes `ref`:
    the fp64 reference of `divfuzz.records.reference_rules`, as divfuzz judged the case: dtypes
    mapped to float64 and autocast off, the graph's own casts kept and a scalar rounded where eager
    rounds it on this device, `repro.node_expression` printing both)."""
    body = []
    for n in spec.nodes:
        ref_params = reference_params(spec, n, device_type)
        body.append(f"{names[n.name]} = "
                    f"{node_expression(get_op(n.op), [names[i] for i in n.inputs], n.kwargs, ref_params, ref_params)}")
    uses_d = any("D(" in line for line in body)
    takes_ref = uses_d or spec.autocast is not None or any(" if ref" in line for line in body)
    args = ", ".join([names[t.name] for t in spec.inputs] + (["ref=False"] if takes_ref else []))
    lines = [f"def model({args}):"]
    if uses_d:
        lines.append("    D = lambda d: torch.float64 if ref and d.is_floating_point else d")
    indent = "    "
    if spec.autocast:
        lines.append(f"    with torch.autocast({device_type!r}, dtype={DTYPE_CODE[spec.autocast]}, enabled=not ref):")
        indent = "        "
    lines += [indent + line for line in body]
    outs = ", ".join(names[o] for o in spec.outputs)
    lines.append(f"    return ({outs},)")
    return lines, takes_ref


def check_lines(rule: str, dtype: str, fc=None) -> list[str]:
    """The comparison of `eager`, `compiled` and `ref` (one output each) for a numeric bug rule;
    `fc`, the output's `FloatComparison`, is needed for `rmse-worse` (same()'s margin for its size)."""
    words = _words_literal(check_words(rule, dtype, fc))
    rule = MEASURED_RULE.get(rule, rule)
    if rule in AGGREGATE_RULES:
        return _aggregate_lines(rule, dtype, fc, words)
    if rule == "float-gross-worse":
        floor = GROSS_MIN_ULPS_BY_DTYPE.get(dtype, GROSS_MIN_ULPS)
        lines = [
            "err_e, err_c = (eager.double() - ref).abs(), (compiled.double() - ref).abs()",
            "ok = err_e.isfinite() & err_c.isfinite()",
            "scale = ref.abs().clamp(min=ref[ok].pow(2).mean().sqrt())  # each element at the output's scale",
            "ulp = torch.finfo(eager.dtype).eps * torch.exp2(torch.frexp(scale).exponent - 1.0)",
            f"tol = max({GROSS_FACTOR!r} * (err_e[ok] / ulp[ok]).max().item(), {floor!r})  # ULPs",
            "bad = ok & (err_c / ulp > tol)",
        ]
    elif rule == "nan-inf-new":
        lines = ["bad = eager.isfinite() & ref.isfinite() & ~compiled.isfinite()"]
    elif rule == "int-valued-wrong":
        lines = ["bad = (eager.double() == ref) & (compiled != eager)"]
    elif rule == "int-gross":
        lines = ["bad = (compiled != eager) & (compiled != ref)"]
    elif rule == "nan-inf-wrong":
        lines = ["same = lambda a, b: (a == b) | (a.isnan() & b.isnan())",
                 "bad = ~eager.isfinite() & same(eager.double(), ref) & ~same(compiled, eager)"]
    elif rule == "nan-inf-lost":
        lines = ["bad = eager.isnan() & ref.isnan() & compiled.isfinite()"]
    elif rule == "zero-sign-wrong":
        lines = ["bad = (eager == 0) & (compiled == 0) & (eager.signbit() != compiled.signbit()) & (ref == 0) & "
                 "(ref.signbit() == eager.signbit())"]
    elif rule == "nan-inf-moved":
        lines = ["bad = (eager.isnan() != compiled.isnan()) | (eager.isinf() != compiled.isinf()) | "
                 "(eager.isinf() & compiled.isinf() & (eager.sign() != compiled.sign()))"]
    elif CHECKS.get(rule) == DISCRETE_CHECK:
        lines = ["bad = (compiled != eager) & ~(compiled.isnan() & eager.isnan()) if compiled.is_floating_point() "
                 "else compiled != eager"]
    else:
        raise ValueError(f"no plain-torch check for rule {rule!r}")
    lines += [
        *_first_elements("elements"),
        f'assert not bad.any(), f"{{int(bad.sum())}}/{{bad.numel()}} elements: {words}"',
    ]
    return lines


def _first_elements(what: str) -> list[str]:
    """Print eager, compiled and fp64 at the first 5 elements of `bad` (`what` says which they are)."""
    return [
        "i = bad.flatten().nonzero()[:5, 0]",
        f'print({what!r}, i.tolist())',
        'for name, t in [("eager", eager), ("compiled", compiled), ("fp64", ref)]:',
        '    print(f"{name:>8}", t.flatten()[i].tolist())',
    ]


def _aggregate_lines(rule: str, dtype: str, fc, words: str) -> list[str]:
    """The checks of the two compiled-worse rules, which judge the output as a whole, with the
    rule's own numbers: `many-ulps-worse` (fp64 triage `compiled-worse` by `TRIAGE_FACTOR` over
    the differing elements, and more than `FEW_ULPS` apart or on more than `NOISE_FRACTION` of
    them) and `rmse-worse` (compiled's RMSE vs fp64 beyond same()'s margin, `same_margin`)."""
    lines = ["err_e, err_c = (eager.double() - ref).abs(), (compiled.double() - ref).abs()"]
    if rule == "many-ulps-worse":
        if dtype not in _BITS:
            raise ValueError(f"no plain-torch ULP distance for dtype {dtype!r}")
        view, mask = _BITS[dtype]
        lines += [
            "ok = (eager != compiled) & err_e.isfinite() & err_c.isfinite()  # the differing elements",
            f"key = lambda t: (lambda b: torch.where(b < 0, -(b & {mask}), b))(t.view({view}).long())  # bits in value order",
            "dist = torch.where(eager.isnan() | compiled.isnan(), 0, (key(eager) - key(compiled)).abs())  # ULPs apart",
            "bad = ok & (err_c > err_e)",
            *_first_elements("elements further from fp64 in compiled"),
            "sum_e, sum_c = err_e[ok].sum().item(), err_c[ok].sum().item()",
            f"assert not (sum_c > {TRIAGE_FACTOR!r} * sum_e and (dist.max() > {FEW_ULPS!r} or (dist > 0).sum() > "
            f"{NOISE_FRACTION!r} * dist.numel())), f\"summed error vs fp64 {{sum_c:.3g}} (eager {{sum_e:.3g}}), "
            f"{{int((dist > 0).sum())}}/{{dist.numel()}} differ by up to {{int(dist.max())}} ULPs: {words}\"",
        ]
        return lines
    if fc is None:
        raise ValueError("rmse-worse needs the output's FloatComparison for same()'s margin")
    multiplier, slack = same_margin(fc)
    lines += [
        "ok = err_e.isfinite() & err_c.isfinite()",
        "rmse_e, rmse_c = (t[ok].pow(2).mean().sqrt().item() for t in (err_e, err_c))",
        "bad = ok & (err_c > err_e)",
        *_first_elements("elements further from fp64 in compiled"),
        f'assert not rmse_c > {float(multiplier)!r} * rmse_e{f" + {float(slack)!r}" if slack else ""}, '
        f'f"RMSE vs fp64 {{rmse_c:.3g}} (eager {{rmse_e:.3g}}): {words}"',
    ]
    return lines


def _words_literal(text: str) -> str:
    """Our own fixed words, made safe inside an f-string in double quotes."""
    return text.replace("\\", "\\\\").replace('"', "'").replace("{", "{{").replace("}", "}}")


def render_issue_script(spec: GraphSpec, *, device: str, config: "CompileConfig", reason: "SeverityReason | None",
                        verdict: "Verdict | None" = None, pins: tuple[str, ...] | None = None,
                        pin_note: str = "unchecked") -> IssueScript | None:
    """`issue.py` for a case rated `reason`; None unless it is a bug with a plain-torch check.
    `pins`: which of `candidate_pins` it sets (None: all of them), each with `PIN_NOTES[pin_note]`."""
    if reason is None or reason.severity is not Severity.BUG or getattr(verdict, "perf", ()):
        return None
    rule = reason.rule
    output = next((o for o in verdict.outputs if o.name == reason.output), None) if verdict is not None else None
    if rule not in ERROR_RULES and rule != "output-type-mismatch" and rule not in CHECKS:
        return None
    device_type = device.split(":")[0]
    names = _names(spec)
    model, takes_ref = _model_lines(spec, names, device_type)
    inputs = input_lines(spec, device)
    config = config.for_graph(spec.dynamic, spec.mode)  # the spec's own compile dimensions, as the engine compiled it
    before, compile_expr = _compile_call(config)
    marks = [f"torch._dynamo.mark_dynamic({names[spec.inputs[i].name]}, {int_literal(d)})  # compiled dynamic"
             for i, d in dynamic_marks(spec) if spec.inputs[i].shape[d] >= 2]
    args = [names[t.name] for t in spec.inputs]
    # An input the graph writes into goes to each run as a copy of its own: eager's run must not
    # hand the compiled run and the fp64 reference the values it wrote.
    written_into = set(mutated_inputs(spec))
    fresh = [f"{a}.clone()" if t.name in written_into else a for a, t in zip(args, spec.inputs)]
    call = ", ".join(args)
    fresh_call = ", ".join(fresh)
    ref_args = ", ".join(
        (f"{a}.detach().double()" if t.requires_grad else f"{a}.double()") if t.dtype in ("float32", "bfloat16", "float16", "float64") else f
        for a, f, t in zip(args, fresh, spec.inputs))
    ref_call = f"model({ref_args}{', ref=True' if takes_ref else ''})"

    grad_of = reason.output.removeprefix("grad:") if reason.output.startswith("grad:") else None
    written = reason.output.removeprefix(MUTATED_PREFIX) if reason.output.startswith(MUTATED_PREFIX) else None
    run: list[str]
    if rule in ERROR_RULES:
        run = _error_lines(spec, compile_expr, call, rule)
        dtype = None
    elif written is not None:
        if mutated_inputs(spec) != (written,) or rule == "output-type-mismatch" or output is None or output.float_cmp is None:
            return None
        dtype = output.float_cmp.dtype
        run = _written_lines(spec, names, written, compile_expr, takes_ref)
    elif grad_of is not None:
        if grad_of not in names:
            return None
        index = [t.name for t in spec.inputs].index(grad_of)
        dtype = output.float_cmp.dtype if output is not None and output.float_cmp else None
        ref_inputs = ", ".join(
            f"{a}.detach().double().requires_grad_({t.requires_grad!r})" if t.dtype in ("float32", "bfloat16", "float16", "float64") else a
            for a, t in zip(args, spec.inputs))
        run = [
            f"outs = [o for o in model({call}) if o.requires_grad]",
            f"g = torch.Generator().manual_seed({int_literal(spec.recipe.seed + COTANGENT_SEED_OFFSET)})",
            "cots = [torch.randn(o.shape, generator=g).to(o) for o in outs]  # fixed output gradients",
            f"def grad(fn, *args):  # d(outputs)/d({names[grad_of]})",
            "    outs = [o for o in fn(*args) if o.requires_grad]",
            f"    return torch.autograd.grad(outs, args[{index}], [c.to(o) for c, o in zip(cots, outs)])[0]",
            f"eager = grad(model, {call})",
            f"compiled = grad({compile_expr}, {call})",
            f"ref = grad(lambda *a: model(*a{', ref=True' if takes_ref else ''}), {ref_inputs})",
        ]
    else:
        missing = rule == "output-type-mismatch" and output is not None and "missing" in (output.mismatch or "")
        if output is None or (reason.output not in spec.outputs and not missing):
            return None
        k = spec.outputs.index(reason.output) if reason.output in spec.outputs else 0
        if rule == "output-type-mismatch":
            run = _mismatch_lines(spec, compile_expr, fresh_call, k, output.mismatch or "")
            dtype = None
        else:
            dtype = (output.float_cmp or output.int_cmp).dtype
            head = ["with torch.no_grad():"] if not spec.backward else []
            pad = "    " if head else ""
            tail = "" if head else ".detach()"
            run = head + [
                f"{pad}eager = model({fresh_call})[{k}]{tail}",
                f"{pad}compiled = {compile_expr}({fresh_call})[{k}]{tail}",
                f"{pad}ref = {ref_call}[{k}]{tail}",
            ]
    fc = output.float_cmp if output is not None else None
    if rule in AGGREGATE_RULES and (fc is None or fc.dtype not in _BITS):
        return None
    if rule not in ERROR_RULES and rule != "output-type-mismatch":
        run += check_lines(rule, dtype, fc)
    imports = ["import torch"]
    if any("F." in line for line in model):
        imports.append("import torch.nn.functional as F")
    if inputs.files:
        imports.insert(0, "from pathlib import Path")
    if rule == "hang":
        imports += ["import signal", "import sys"]
        before = before + [f'signal.signal(signal.SIGALRM, lambda *a: sys.exit("no result after {HANG_S} s"))',
                           f"signal.alarm({HANG_S})"]
    what = check_words(rule, dtype, fc)
    backend = config.backend if BACKEND_NAME.fullmatch(config.backend) else "a custom backend"
    doc = one_line_doc(f"torch.compile ({backend}, {device}): {spec.op_signature().replace('+', ', ')}. "
                        + f"Exits 1 while {what}.")
    candidates = candidate_pins(config, device, getattr(verdict, "threads", None))
    pins = candidates if pins is None else pins
    if not set(pins) <= set(candidates):
        raise ValueError(f"refusing to pin {sorted(set(pins) - set(candidates))!r}: not one of this case's settings")
    pinned = [f"{pin}  # {PIN_NOTES[pin_note]}" for pin in candidates if pin in pins]
    lines = [doc, *imports, *pinned, *before, *inputs.lines, *marks, *model, *run]
    return IssueScript("\n".join(lines) + "\n", dict(inputs.files), what, inputs.how)


def one_line_doc(text: str) -> str:
    """`text` as a one-line docstring (escaped as `docstring_literal` escapes it)."""
    return docstring_literal(text).replace("\n\"\"\"", '"""')


def _written_lines(spec: GraphSpec, names: dict[str, str], written: str, compile_expr: str, takes_ref: bool) -> list[str]:
    """The input the graph writes into (`written`) after eager's, compiled's and fp64's call, each
    on its own copy of it (in its strides), as `eager`, `compiled` and `ref`."""
    x = names[written]
    args = [names[t.name] for t in spec.inputs]
    copy = f"torch.empty_strided({x}.shape, {x}.stride(), dtype={x}.dtype, device={x}.device).copy_({x})"
    at = [t.name for t in spec.inputs].index(written)

    def call(side: str, double: bool) -> str:
        cast = [f"{a}.double()" if double and t.dtype in ("float32", "bfloat16", "float16", "float64") else a
                for a, t in zip(args, spec.inputs)]
        cast[at] = side
        return ", ".join(cast)

    return [
        f"eager, compiled, ref = {copy}, {copy}, {x}.double()  # the graph writes into {x}: each its own",
        "with torch.no_grad():",
        f"    model({call('eager', False)})",
        f"    {compile_expr}({call('compiled', False)})",
        f"    model({call('ref', True)}{', ref=True' if takes_ref else ''})",
    ]


def _error_lines(spec: GraphSpec, compile_expr: str, call: str, rule: str) -> list[str]:
    """The call that raises (or crashes, or hangs): the forward under no_grad, or the forward and
    the backward of every output that requires grad."""
    if not spec.backward:
        return ["with torch.no_grad():", f"    {compile_expr}({call})  # {rule}"]
    return [f"outs = [o for o in {compile_expr}({call}) if o.requires_grad]",
            f"torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])  # {rule}"]


def _mismatch_lines(spec: GraphSpec, compile_expr: str, call: str, k: int, mismatch: str) -> list[str]:
    """Eager and compiled outputs, and an assert on the dtype (or the shape, or the count)."""
    head = ["with torch.no_grad():"] if not spec.backward else []
    pad = "    " if head else ""
    lines = head + [f"{pad}eager = model({call})", f"{pad}compiled = {compile_expr}({call})"]
    if "missing" in mismatch:
        return lines + ['assert len(compiled) == len(eager), f"outputs changed: eager {len(eager)}, compiled {len(compiled)}"']
    lines.append(f"eager, compiled = eager[{k}], compiled[{k}]")
    lines.append('print("eager", eager.dtype, tuple(eager.shape), "compiled", compiled.dtype, tuple(compiled.shape))')
    if mismatch.split(" ")[0] != mismatch.split(", ")[-1].split(" ")[0]:  # the dtype words differ
        return lines + ['assert compiled.dtype == eager.dtype, f"dtype changed: eager {eager.dtype}, compiled {compiled.dtype}"']
    return lines + ['assert compiled.shape == eager.shape, f"shape changed: eager {tuple(eager.shape)}, compiled {tuple(compiled.shape)}"']
