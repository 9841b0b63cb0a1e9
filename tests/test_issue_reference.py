"""issue.py judges with the fp64 reference divfuzz judged the case with (`divfuzz.records.reference_rules`):
the graph's own casts kept and a scalar rounded where eager rounds it on the named device. With
a reference that dropped them, an issue.py beside a bug whose divergence is an elided cast or an
unrounded scalar exited 0 on the H100 while its repro.py exited 1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from divfuzz.generators.build import build_reference, make_inputs, reference_inputs
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.records.reference_rules import round_scalar
from divfuzz.reports.issue_script import _model_lines


def _specs():
    cast_ceil = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32"),),
                          nodes=(Node("v1", "cast", ("x0",), (("to", "float16"),), "float16", (4, 8)),
                                 Node("v2", "ceil", ("v1",), (), "float16", (4, 8))),
                          outputs=("v2",), recipe=InputRecipe("near_half_integer", 3))
    remainder = GraphSpec(inputs=(TensorSpec("x0", (4, 8), "bfloat16"),),
                          nodes=(Node("v1", "remainder", ("x0",), (("divisor", 0.1),), "bfloat16", (4, 8)),),
                          outputs=("v1",), recipe=InputRecipe("normal", 3))
    return cast_ceil, remainder


@pytest.mark.parametrize("spec", _specs(), ids=["cast-ceil", "bf16-remainder"])
@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_issue_py_s_reference_is_divfuzz_s(spec, device_type):
    lines, takes_ref = _model_lines(spec, {t.name: t.name for t in spec.inputs} | {n.name: n.name for n in spec.nodes},
                                    device_type)
    assert takes_ref  # a cast kept, or a scalar rounded: to bfloat16 on the CPU, to float32 (opmath) on CUDA
    namespace = {"torch": torch, "F": F}
    exec("\n".join(lines), namespace)  # the script's own text, as a user runs it
    inputs = make_inputs(spec, "cpu")
    ours = namespace["model"](*[x.double() for x in inputs], **({"ref": True} if takes_ref else {}))
    divfuzz = build_reference(spec, device_type=device_type)(*reference_inputs(inputs))
    assert all(torch.equal(a, b) for a, b in zip(ours, divfuzz))
    # the rounding is really there: the scalar (CPU) or the cast changes the reference here
    plain = [t.double() for t in namespace["model"](*inputs)] if spec.nodes[0].op == "cast" else None
    if spec.nodes[0].op == "remainder":
        assert not torch.equal(divfuzz[0], torch.remainder(inputs[0].double(), 0.1))
        eagers = round_scalar(0.1, "bfloat16" if device_type == "cpu" else "float32")
        assert torch.equal(divfuzz[0], torch.remainder(inputs[0].double(), eagers))
    else:
        assert all(torch.equal(a, b) for a, b in zip(divfuzz, plain))  # eager's own casts, kept


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_a_float32_graph_s_reference_uses_the_scalar_eager_computes_with(device_type):
    """Eager computes a float32 tensor with a Python scalar in float32 on every device. A remainder
    by 0.37 of values near 1e7 is exact in eager (fmod is exact), and the fp64 reference by the
    float32 0.37 matches it to the last bit, where the remainder by the double 0.37 is far off."""
    spec = GraphSpec(inputs=(TensorSpec("x0", (4, 256), "float32"),),
                     nodes=(Node("v1", "remainder", ("x0",), (("divisor", 0.37),), "float32", (4, 256)),),
                     outputs=("v1",), recipe=InputRecipe("normal", 3))
    x = make_inputs(spec, "cpu")[0].abs() * 1e7
    ref = build_reference(spec, device_type=device_type)(x.double())[0]
    eager = torch.remainder(x, 0.37)
    assert torch.equal(eager.double(), ref)
    assert (torch.remainder(x.double(), 0.37) - ref).abs().max() > 1e-3
