"""`report.md`: a minimized, attributed bucket as markdown ready to paste into a PyTorch issue.

Title, versions, the minimal code (the repro's graph and inputs), what eager and compiled gave,
the fp64 verdict, the stage ladder, and what `emulate_precision_casts` changed. Pure text from
data: the culprit and verdict come in as dicts / frozen values, nothing is run here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from divfuzz.generators.runtime import COTANGENT_SEED_OFFSET
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.culprit import bisect_text_of
from divfuzz.reports.markdown import verdict_table
from divfuzz.generators.aliasing import mutated_inputs
from divfuzz.reports.repro import graph_code, inputs_code, int_literal

if TYPE_CHECKING:
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict


def _fp64_verdict(verdict: "Verdict | None") -> str:
    if verdict is None:
        return "not measured"
    parts = []
    for o in verdict.outputs:
        if o.float_cmp and o.float_cmp.n_diff:
            parts.append(f"`{o.name}`: {o.float_cmp.triage}")
        elif o.int_cmp and o.int_cmp.flips:
            ic = o.int_cmp
            parts.append(f"`{o.name}`: {ic.boundary_flips} boundary flips, {ic.gross_flips + ic.unknown_flips} gross")
    return "; ".join(parts) or "no differing output"


def render_bug_report(
    spec: GraphSpec,
    *,
    title: str,
    reason: "SeverityReason | None",
    culprit: dict,
    versions: dict,
    device: str,
    config_desc: str,
    verdict: "Verdict | None",
    minimized: dict | None = None,
) -> str:
    """The bucket's `report.md`: title and severity (`reason`, judged by the caller: nothing is
    judged here), versions, the minimal code, eager vs compiled with the fp64 verdict, and where
    it comes from (ladder, probes, bisector, shrink)."""
    perf = verdict is not None and bool(getattr(verdict, "perf", ()))
    headline = "is slower than eager" if perf else "differs from eager"
    lines = [
        f"# torch.compile {headline}: {culprit.get('summary', '?')}",
        "",
        f"Found by divfuzz: {title}",
        "",
        f"**Severity: {reason.severity.value}** ({reason.rule}): {reason.detail}" if reason else "**Severity:** not judged (no verdict recorded)",
        "",
        "## Versions",
        "",
        *[f"- {k}: {v}" for k, v in versions.items() if v is not None],
        f"- device: {device}",
        f"- compiled with: {config_desc}",
        "",
        *_minimal_code_section(spec, device),
        "## Eager vs compiled",
        "",
        verdict_table(verdict) if verdict is not None else "(no verdict of the minimal case recorded)",
        "",
        *([] if perf else [f"**fp64 verdict:** {_fp64_verdict(verdict)}", ""]),
        *_origin_section(culprit, minimized, perf=perf),
    ]
    return "\n".join(lines) + "\n"


def _minimal_code_section(spec: GraphSpec, device: str) -> list[str]:
    """The case as a short script: the forward under no_grad, or, for a case with a backward pass,
    the forward and each input's gradient under the output gradients divfuzz drew, as
    `divfuzz.fuzzer.engine.graph_run.run_forward_backward` does: drawn once, from eager's outputs
    (`divfuzz.generators.runtime.cotangents`: one CPU generator seeded with the recipe's seed plus
    `COTANGENT_SEED_OFFSET`, one draw per floating output that requires grad, in order), and given
    to the compiled run as they are; no gradient is asked for when no output or no input takes
    part. So a divergence or a compile error of the backward shows here as it does in the campaign."""
    if spec.backward:
        run = [
            f"SEED = {int_literal(spec.recipe.seed)}",
            "",
            "",
            "def run(fn, cots=None):  # the outputs, then the gradient of each input that requires grad",
            "    outs = fn(*inputs)",
            "    if cots is None:  # drawn once, from eager's outputs, as divfuzz drew them",
            f"        g = torch.Generator().manual_seed(SEED + {COTANGENT_SEED_OFFSET})",
            "        cots = [torch.randn(o.shape, generator=g).to(o) if o.is_floating_point() and o.requires_grad else None",
            "                for o in outs]",
            "    pairs = [(o, c.to(o.dtype)) for o, c in zip(outs, cots) if c is not None and o.requires_grad]",
            "    leaves = [t for t in inputs if t.requires_grad]",
            "    grads = []",
            "    if pairs and leaves:",
            "        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [c for _, c in pairs], allow_unused=True)",
            "    return [o.detach() for o in outs] + [t for t in grads if t is not None], cots",
            "",
            "",
            "eager, cots = run(model)",
            "torch._dynamo.reset()",
            "compiled = run(torch.compile(model), cots)[0]",
        ]
    elif mutated_inputs(spec):  # the graph writes into inputs: each side its own, and what it wrote is compared too
        names = [t.name for t in spec.inputs]
        run = [
            f"MUTATED_AT = {[names.index(n) for n in mutated_inputs(spec)]!r}  # the inputs the graph writes into, by position",
            "with torch.no_grad():",
            f"    mine, theirs = inputs, make_inputs({device!r})  # each side its own inputs",
            "    eager = model(*mine) + tuple(mine[i] for i in MUTATED_AT)",
            "    torch._dynamo.reset()",
            "    compiled = torch.compile(model)(*theirs) + tuple(theirs[i] for i in MUTATED_AT)",
        ]
    else:
        run = [
            "with torch.no_grad():",
            "    eager = model(*inputs)",
            "    torch._dynamo.reset()",
            "    compiled = torch.compile(model)(*inputs)",
        ]
    return [
        "## Minimal code",
        "",
        "```python",
        "import torch",
        "import torch.nn.functional as F",
        "",
        inputs_code(spec),
        "",
        graph_code(spec),
        "",
        f"DEVICE_TYPE = {device.split(':')[0]!r}",
        f"inputs = make_inputs({device!r})",
        *run,
        "for eager_out, compiled_out in zip(eager, compiled):",
        "    print((eager_out != compiled_out).sum().item(), 'of', eager_out.numel(), 'elements differ')",
        "```",
        "",
        "The full script with the fp64 triage is the bucket's `repro.py` (exits 1 while it diverges).",
        "",
    ]


def _origin_section(culprit: dict, minimized: dict | None, *, perf: bool = False) -> list[str]:
    """Where it comes from: the stage ladder, what `emulate_precision_casts` and the other probes
    changed, the bisector's answer, and how far the case was shrunk."""
    probes = dict(tuple(p) for p in culprit.get("probes") or [])
    epc = probes.get("emulate_precision_casts=True")
    if epc is None:
        epc_line = "not probed (the divergence is not in Inductor or the switch is already on)"
    elif epc == "ok":
        epc_line = "**removes the divergence**: Inductor skips a low-precision rounding that eager does"
    else:
        epc_line = f"does not remove it (still {epc})"
    lines = [
        "## Where it comes from",
        "",
        "| stage | result |",
        "| --- | --- |",
        *[f"| {r} | {o} |" for r, o in culprit.get("ladder") or []],
        "",
        f"- culprit: **{culprit.get('summary')}**",
        *([] if perf else [f"- `emulate_precision_casts=True`: {epc_line}"]),
    ]
    other = {k: v for k, v in probes.items() if k != "emulate_precision_casts=True"}
    if other:
        lines.append(f"- {'scheduling' if perf else 'other Inductor'} switches (each set alone): " + ", ".join(f"`{k}` -> {v}" for k, v in other.items()))
    bisect_text = bisect_text_of(culprit)
    if bisect_text:
        lines.append(f"- `torch._inductor.compiler_bisector`: `{bisect_text}`")
    if minimized and "ops_before" in minimized:
        lines.append(
            f"- minimized from {minimized['ops_before']} to {minimized['ops_after']} ops, "
            f"{minimized['elements_before']} to {minimized['elements_after']} input elements "
            f"({minimized['predicate_calls']} compiles, {minimized['wall_s']} s)"
        )
    return lines
