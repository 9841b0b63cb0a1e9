"""The repro script of a `minimize --module` cause: the reduced aten graph as a module, its inputs
read from raw bytes beside it (dtype, shape and strides in inputs.json: no pickle, nothing
executed), and the two ladder rungs compared element by element. Exits 1 while they differ.

Invariants: the rungs are names from the fixed ladder (`RUNGS`), the graph code is what FX printed
for a graph divfuzz lowered itself, and every text from the user's model (module path, output
names, culprit) reaches the script only inside the escaped docstring.
"""

from __future__ import annotations

from divfuzz.records.backends import INDUCTOR, backend_of
from divfuzz.reports.repro import compared_compile_code, docstring_literal

RUNGS = backend_of(INDUCTOR).rungs()  # eager, the stage ladder, Inductor (`divfuzz.records.backends`)

_MODULE_REPRO = '''#!/usr/bin/env python3
{doc}
import sys

import torch
from torch import device  # noqa: F401  (captured graphs may name devices)

{code}

{compared}


def load_inputs(device):
    """Raw little-endian bytes described by inputs.json (next to this file): no pickle, nothing executed."""
    import json
    from pathlib import Path
    here = Path(__file__).resolve().parent
    blob = (here / "inputs.bin").read_bytes()
    tensors, offset = [], 0
    for meta in json.loads((here / "inputs.json").read_text()):
        dtype = getattr(torch, meta["dtype"])
        n = meta["nbytes"]
        # an empty input has no bytes, which frombuffer refuses
        flat = torch.frombuffer(bytearray(blob[offset:offset + n]), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        t = flat.view(dtype).reshape(meta["shape"])
        stride = [int(s) for s in meta.get("stride", t.stride())]  # the captured layout (channels-last, ...)
        tensors.append(torch.empty_strided(t.shape, stride, dtype=dtype, device=device).copy_(t))
        offset += n
    return tensors


inputs = load_inputs({device!r})
print(f"torch {{torch.__version__}}")
with torch.no_grad():
    model = Repro()
    with torch._inductor.config.patch(compile_settings()):
        torch._dynamo.reset()
        a = model(*inputs) if {before!r} == "eager" else torch.compile(model, backend={before!r})(*inputs)
        torch._dynamo.reset()
        b = torch.compile(model, backend={rung!r})(*inputs)
# every tensor of the outputs, nested tuples included ((values, indices) of a pooling)
a = [t for t in torch.utils._pytree.tree_leaves(a) if isinstance(t, torch.Tensor)]
b = [t for t in torch.utils._pytree.tree_leaves(b) if isinstance(t, torch.Tensor)]
bad = 0
for x, y in zip(a, b):
    diff = x != y
    if x.is_floating_point():
        diff &= ~(x.isnan() & y.isnan())
        diff |= (x == 0) & (y == 0) & (x.signbit() != y.signbit())  # -0.0 against +0.0: 1 / z tells them apart
    n = int(diff.sum())
    print(f"{{n}}/{{x.numel()}} elements differ ({before} vs {rung})")
    bad += n
sys.exit(1 if bad else 0)
'''


def render_module_repro(title: str, notes: str, gm, *, before: str, rung: str, device: str) -> str:
    """The text of `repro.py` for the reduced graph `gm`, comparing rung `before` with `rung` on `device`."""
    if before not in RUNGS or rung not in RUNGS:
        raise ValueError(f"Expected ladder rungs from {RUNGS} but got {before!r} and {rung!r}")
    if device.split(":")[0] not in ("cpu", "cuda") or not all(part.isalnum() for part in device.split(":")):
        raise ValueError(f"Expected a device like 'cpu' or 'cuda:0' but got {device!r}")
    doc = docstring_literal(f"divfuzz repro from a user module: {title}\n\n{notes}\n"
                            f"Run: python repro.py. Exits 1 while {before} and {rung} differ, 0 once they agree.")
    body = gm.code.strip()
    code = "class Repro(torch.nn.Module):\n" + "\n".join("    " + line for line in body.splitlines())
    return _MODULE_REPRO.format(doc=doc, before=before, rung=rung, code=code, device=device,
                                compared=compared_compile_code())
