"""A user who asks where a difference comes from gets the answer at any severity (issue 50, item 5):
below suspect, `minimize --module` files no cause folder but names the stage and subsystem where
the difference arises and the upstream issue it matches, in one line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main

MODULES = Path(__file__).parent / "modules"


def test_the_first_seed_reads_noise_and_names_the_layer_norm_decomposition_and_its_issue(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["minimize", "--module", f"{MODULES / 'layernorm_linear_autocast.py'}:make_case",
                                       "--autocast", "bfloat16", "--device", "cpu", "--budget", "120s",
                                       "--repro-dir", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] in ("headline: noise", "headline: by-design"), result.output
    lines = [line for line in result.output.splitlines() if line.startswith("where it arises")]
    assert lines and "decomposition of aten.native_layer_norm" in lines[0], result.output
    assert "pytorch#168126" in lines[0], lines[0]
    assert not list(out.glob("*/repro.py"))  # no cause folder below suspect
