"""`issue.py` of a `minimize --module` cause: the reduced aten graph as plain torch, for an issue.

The graph is the code FX printed for a graph divfuzz lowered itself (as the cause's repro.py holds
it), and its fp64 reference the same graph with every floating dtype mapped to float64
(`divfuzz.fuzzer.triage.user_module.reference_graph`, printed by FX too). The inputs are literals
up to `LITERAL_MAX` elements; larger ones come from the cause's `inputs.bin` (a user's inputs have
no seed to draw them from again). The check is `divfuzz.reports.issue_script`'s for the rule.

Output k is the k-th tensor of the graph's outputs flattened (as the cause's verdict names them).
Written only for a bug whose graph holds no constants (`get_attr`); `render_module_issue_script`
returns None otherwise. Rungs come from `RUNGS`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from divfuzz.generators.ops import DTYPE_CODE
from divfuzz.records.config import CompileConfig
from divfuzz.records.severity import Severity
from divfuzz.records.backends import backend_of
from divfuzz.reports.issue_inputs import LITERAL_MAX, literal_code
from divfuzz.reports.issue_markdown import Subject
from divfuzz.reports.issue_script import AGGREGATE_RULES, CHECKS, IssueScript, check_lines, check_words, one_line_doc, setting_lines
from divfuzz.reports.module_repro import RUNGS

if TYPE_CHECKING:
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict

# The file `divfuzz.fuzzer.triage.user_module` writes a cause's inputs to (raw bytes, in order).
MODULE_INPUTS_FILE = "inputs.bin"
_FLOAT = ("float64", "float32", "bfloat16", "float16")


def module_subject(gm, inputs) -> Subject:
    """The graph's aten ops in order (overload names dropped) and its input dtypes."""
    ops = tuple(str(getattr(n.target, "__name__", n.target)).split(".")[0] for n in gm.graph.nodes if n.op == "call_function")
    return Subject(ops, tuple(str(t.dtype).removeprefix("torch.") for t in inputs))


def _class_lines(name: str, gm) -> list[str]:
    body = gm.code.strip()
    return [f"class {name}(torch.nn.Module):", *("    " + line if line.strip() else "" for line in body.splitlines())]


def render_module_issue_script(gm, ref_gm, inputs, *, before: str, rung: str, device: str,
                               reason: "SeverityReason | None", verdict: "Verdict | None") -> IssueScript | None:
    """issue.py for a cause: `before` vs `rung` on the reduced graph `gm`, `ref_gm` its fp64 reference."""
    if reason is None or reason.severity is not Severity.BUG or reason.rule not in CHECKS or verdict is None:
        return None
    if before not in RUNGS or rung not in RUNGS or ref_gm is None:
        raise ValueError(f"Expected ladder rungs from {RUNGS} and a reference graph but got {before!r}, {rung!r}")
    if any(n.op == "get_attr" for g in (gm, ref_gm) for n in g.graph.nodes):
        return None
    output = next((o for o in verdict.outputs if o.name == reason.output), None)
    if output is None or not reason.output.startswith("output ") or not reason.output[7:].isdigit():
        return None
    k = int(reason.output[7:])
    dtype = (output.float_cmp or output.int_cmp).dtype
    if reason.rule in AGGREGATE_RULES and output.float_cmp is None:
        return None
    names = [f"a{i}" for i in range(len(inputs))]
    lines, offset = [], 0  # inputs.bin holds every input in order, the small ones too
    for name, t in zip(names, inputs):
        t = t.detach().cpu()
        size = t.numel() * t.element_size()
        if t.numel() == 0 or t.numel() <= LITERAL_MAX:
            lines.append(f"{name} = {literal_code(t, device)}")
        else:
            where = "" if device == "cpu" else f".to({device!r})"
            shape = "(" + ", ".join(repr(int(d)) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"
            lines.append(f"{name} = torch.frombuffer(bytearray(raw[{offset}:{offset + size}]), "
                         f"dtype={DTYPE_CODE[str(t.dtype).removeprefix('torch.')]}).reshape({shape}){where}")
        offset += size
    call = ", ".join(names)
    ref_call = ", ".join(f"{a}.double()" if str(t.dtype).removeprefix("torch.") in _FLOAT else a for a, t in zip(names, inputs))
    eager = "Repro()" if before == "eager" else backend_of(before).compile_expression("Repro()")
    compiled = backend_of(rung).compile_expression("Repro()")
    head = ["import torch", "from torch import device  # the graph's code may name devices"]
    code = "\n".join(gm.code.splitlines() + ref_gm.code.splitlines())
    if re.search(r"\binf\b|\bnan\b", code):
        head.append("from math import inf, nan  # the graph's code may print them")
    if any(t.numel() > LITERAL_MAX for t in inputs):
        head.append("from pathlib import Path")
        lines.insert(0, f"raw = (Path(__file__).parent / {MODULE_INPUTS_FILE!r}).read_bytes()  # the captured inputs (little-endian)")
    what = check_words(reason.rule, dtype, output.float_cmp)
    doc = one_line_doc(f"torch.compile ({rung}, {device}): a graph reduced from a user's model, {before} vs {rung}. "
                        f"Exits 1 while {what}.")
    leaves = "torch.utils._pytree.tree_leaves"  # output k is the k-th tensor of the graph's outputs, flattened
    run = ["with torch.no_grad():", f"    eager = {leaves}({eager}({call}))[{k}]  # {before}",
           f"    compiled = {leaves}({compiled}({call}))[{k}]", f"    ref = {leaves}(Ref()({ref_call}))[{k}]  # in float64"]
    text = "\n".join([doc, *head, *setting_lines(CompileConfig(backend=rung), device), *lines, *_class_lines("Repro", gm),
                      *_class_lines("Ref", ref_gm), *run, *check_lines(reason.rule, dtype, output.float_cmp)]) + "\n"
    how = ("written as literals (the captured values)" if all(t.numel() <= LITERAL_MAX for t in inputs)
           else f"read from `{MODULE_INPUTS_FILE}` beside the script (the captured values: a user's inputs have no seed)")
    return IssueScript(text, {}, what, how)
