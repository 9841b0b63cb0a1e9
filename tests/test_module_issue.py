"""A `minimize --module` cause that is a bug gets an issue.py (the reduced aten graph in plain torch,
its fp64 reference, one check) that exits 1 and names no divfuzz, an issue.md, and the run's
compile.log (issue 39). The real Inductor on the CPU: a float32 remainder by 0.37 of values near
1e7 (pytorch#194345's class) is grossly wrong, beside a var_mean whose correction leaves no degrees of
freedom (a warning the compile log keeps). The earlier model here, topk over a float16 var_mean of
rows holding inf and -inf, reads as the order of the sum now: another order of it gives compiled's values."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULE = '''
import torch


def case():
    torch.manual_seed(0)
    x = torch.rand(8, 2) * 1e7
    return (lambda x: (torch.var_mean(x, -1, correction=2)[1], torch.remainder(x, 0.37))), (x,)
'''


@pytest.mark.slow
def test_a_module_bug_cause_gets_a_failing_plain_torch_issue_py(tmp_path):
    (tmp_path / "topk_nan.py").write_text(MODULE)
    proc = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "minimize", "--module", "topk_nan.py:case", "--device", "cpu",
                           "--out", "out", "--budget", "120s"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scripts = sorted((tmp_path / "out").glob("*/issue.py"))
    assert scripts, proc.stdout
    for script in scripts:
        text = script.read_text()
        assert "divfuzz" not in text
        assert (script.parent / "issue.md").exists()
        run = subprocess.run([sys.executable, "issue.py"], cwd=script.parent, capture_output=True, text=True, timeout=600)
        assert run.returncode == 1 and "AssertionError" in run.stderr, text + run.stdout + run.stderr
    assert "var_mean(): degrees of freedom is <= 0" in (tmp_path / "out" / "compile.log").read_text()
    assert "degrees of freedom" not in proc.stdout + proc.stderr
