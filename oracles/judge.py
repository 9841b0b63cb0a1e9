"""The one output judge: eager vs compiled, each against the fp64 reference, output by output.

Every path judges outputs here: a campaign's case (`divfuzz.fuzzer.engine.execute`), the gate's and
`replay`'s, `minimize --module`'s whole model (`divfuzz.fuzzer.triage.capture`) and each rung of its
ladder (`divfuzz.fuzzer.triage.user_module`). One rule for each irregular output:

- a compiled output that is missing, or whose dtype or shape differs from eager's, is a
  `mismatch` judged before any value (the user's next line sees another type): no values compared;
- an output with no fp64 reference of its shape is compared eager vs compiled alone (triage
  "unknown"); eager is never promoted to the reference;
- an extra compiled output (more outputs than eager) is a mismatch under the name "output N";
- a returned tensor whose strides differ from eager's (over dims of more than one element) keeps
  its values' judgement and records the strides beside it (`OutputVerdict.strides`): a finding
  of its own kind, not a bug by itself, since not every op documents its output's strides.

Conditioning (`divfuzz.oracles.conditioning`) runs only where a first judgement rates an output a bug
by a rule that an ill-conditioned input can fake (`CONDITIONED_RULES`): the caller passes
`perturbed_reference(draw)`, the fp64 reference outputs on perturbed inputs, and it is called
`CONDITIONING_DRAWS` times at most, once per case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from divfuzz.oracles.compare import compare_float, compare_int
from divfuzz.oracles.conditioning import CONDITIONING_DRAWS, INNER_DRAWS
from divfuzz.oracles.severity_policy import needs_conditioning
from divfuzz.records.outcomes import Status
from divfuzz.records.severity import Severity
from divfuzz.records.verdict import OutputVerdict, Verdict

Named = Sequence[tuple[str, torch.Tensor]]


def _type_of(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def _mismatch(e: torch.Tensor, c: torch.Tensor | None) -> str | None:
    if c is None:
        return f"{_type_of(e)} eager, missing in compiled"
    if c.dtype != e.dtype or c.shape != e.shape:
        return f"{_type_of(e)} eager, {_type_of(c)} compiled"
    return None


def stride_mismatch(name: str, e: torch.Tensor, c: torch.Tensor) -> str | None:
    """"(1, 8) eager, (8, 1) compiled" when a returned tensor's strides differ from eager's over
    its dims of more than one element (a size-1 dim's stride means nothing), else None.
    Gradients are not compared: autograd makes no promise about their strides."""
    if name.startswith("grad:") or e.dim() == 0:
        return None
    kept = [d for d in range(e.dim()) if e.shape[d] > 1]
    es, cs = tuple(e.stride(d) for d in kept), tuple(c.stride(d) for d in kept)
    return None if es == cs else f"{tuple(e.stride())} eager, {tuple(c.stride())} compiled"


def judge_output(name: str, e: torch.Tensor, c: torch.Tensor | None, r: torch.Tensor | None,
                 bound: torch.Tensor | None = None, perturbed: list | None = None,
                 perturbed_inner: list | None = None, working_dtype: str | None = None) -> OutputVerdict:
    """One output's verdict (the module's rules for a mismatch and a missing reference), its
    strides compared beside its values (`stride_mismatch`)."""
    mismatch = _mismatch(e, c)
    if mismatch:
        return OutputVerdict(name, mismatch=mismatch)
    strides = stride_mismatch(name, e, c)
    r = r if r is not None and r.shape == e.shape else None
    if e.is_floating_point():
        if r is not None and not r.is_floating_point():
            r = None
        return OutputVerdict(name, float_cmp=compare_float(e, c, r, perturbed=perturbed if r is not None else None,
                                                           boundary_ulps=bound, perturbed_inner=perturbed_inner if r is not None else None,
                                                           working_dtype=working_dtype), strides=strides)
    return OutputVerdict(name, int_cmp=compare_int(e, c, bound, reference=r, perturbed=perturbed, perturbed_inner=perturbed_inner),
                         strides=strides)


def judge_outputs(eager: Named, compiled: Named, reference: Named | None, bounds: dict | None = None, *,
                  perturbed_reference: Callable[[int], Named] | None = None,
                  inner_reference: Callable[[int], Named] | None = None,
                  inputs: Sequence | None = None, working_dtype: str | None = None) -> tuple[OutputVerdict, ...]:
    """One `OutputVerdict` per eager output, matched to compiled and reference by name, then one per
    compiled output eager lacks. See the module docstring for mismatches and conditioning; with the
    case's `inputs`, an output with new NaN/Inf records how close they come to its range's edge.
    `inner_reference(draw)`, where the graph's intermediates are known (a campaign's spec, not a
    user's module), is the reference with the intermediates alone moved (`INNER_DRAWS`).
    `working_dtype` is the coarsest float dtype the graph computes in (`compare_float`)."""
    comp = dict(compiled)
    ref = dict(reference or ())
    bounds = bounds or {}
    verdicts = [judge_output(name, e, comp.get(name), ref.get(name), bounds.get(name), working_dtype=working_dtype) for name, e in eager]
    known = {name for name, _ in eager}
    verdicts += [OutputVerdict(name, mismatch=f"missing in eager, {_type_of(c)} compiled") for name, c in compiled if name not in known]
    # First the range's edge (free), so that a NaN it explains costs no fp64 reruns.
    verdicts = [_with_input_peak(v, inputs) for v in verdicts]
    suspects = [i for i, v in enumerate(verdicts) if _needs_conditioning(v)]
    if suspects and perturbed_reference is not None:
        draws = [dict(perturbed_reference(d)) for d in range(CONDITIONING_DRAWS)]
        inner = [dict(inner_reference(d)) for d in range(INNER_DRAWS)] if inner_reference is not None else []
        for i in suspects:
            name, e = eager[i]
            verdicts[i] = _with_input_peak(judge_output(name, e, comp.get(name), ref.get(name), bounds.get(name),
                                                        perturbed=[d[name] for d in draws if name in d],
                                                        perturbed_inner=[d[name] for d in inner if name in d],
                                                        working_dtype=working_dtype), inputs)
    return tuple(verdicts)


def input_peak_fraction(inputs: Sequence, dtype: torch.dtype) -> float:
    """The largest finite magnitude among the floating `inputs`, over the largest finite value of
    its own dtype or of `dtype`, whichever is smaller; 0.0 for no floating input."""
    peak = 0.0
    for x in inputs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            continue
        finite = x.detach()[torch.isfinite(x.detach())]
        if finite.numel():
            limit = min(torch.finfo(x.dtype).max, torch.finfo(dtype).max)
            peak = max(peak, min(1.0, float(finite.abs().max().double()) / limit))
    return peak


def inputs_nonfinite(inputs: Sequence) -> bool:
    """Whether any floating tensor among `inputs` holds NaN or an infinity."""
    return any(isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()
               and not bool(torch.isfinite(x.detach()).all()) for x in inputs)


def _with_input_peak(v: OutputVerdict, inputs: Sequence | None) -> OutputVerdict:
    """`v` with what its rules read of the case's inputs where compiled has new NaN/Inf or loses a
    NaN: their peak over the range (`input_peak_fraction`), and whether any is NaN/Inf where a NaN
    is lost (`inputs_nonfinite`); unmeasured (their defaults) without `inputs`."""
    fc = v.float_cmp
    if inputs is None or fc is None or not (fc.n_nonfinite_new or fc.n_nan_lost > 0):
        return v
    facts = {"input_peak_fraction": input_peak_fraction(inputs, getattr(torch, fc.dtype))}
    if fc.n_nan_lost > 0:
        facts["inputs_nonfinite"] = int(inputs_nonfinite(inputs))
    return dataclasses.replace(v, float_cmp=dataclasses.replace(fc, **facts))


def _needs_conditioning(v: OutputVerdict) -> bool:
    return needs_conditioning(v)


def verdict_of(outputs: Sequence[OutputVerdict], **extra) -> Verdict:
    """The case's verdict over judged outputs: diverged when any output differs."""
    status = Status.DIVERGED if any(o.differs for o in outputs) else Status.OK
    return Verdict(status, outputs=tuple(outputs), **extra)
