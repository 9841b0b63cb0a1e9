"""A `minimize --module` cause's repro.py runs for the outputs and inputs real models have: a
nested (values, indices) output and an empty input (issues 197434 and 197108 crashed it: a tuple
compared with `!=`, and `torch.frombuffer` of zero bytes)."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from divfuzz.fuzzer.triage.user_module import _save_inputs
from divfuzz.reports.module_repro import render_module_repro


def test_a_repro_of_nested_outputs_and_an_empty_input_runs_and_exits_0_where_the_rungs_agree(tmp_path):
    def f(x, empty):
        return (torch.max(x, dim=1), empty.sum())

    inputs = [torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.empty(0, 3)]
    gm = make_fx(f)(*inputs)
    _save_inputs(inputs, tmp_path)
    (tmp_path / "repro.py").write_text(render_module_repro("t", "", gm, before="eager", rung="aot_eager", device="cpu"))
    run = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("elements differ") == 3, run.stdout  # values, indices and the empty sum, each compared
