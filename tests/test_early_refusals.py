"""Bad input is refused before torch is imported (issue 57, item 8: a bad spec took 15-17 s, an
unknown --inductor key about 40 s on a loaded host, both after torch and a worker started).

Each command runs in one fresh interpreter, through the CLI's own group; after each refusal the
runner records the exit code, whether `torch` is in `sys.modules`, and whether the workers' warm
template was asked to start (it imports torch in a process of its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD_SPEC = ROOT / "corpus" / "specs" / "activation-float32-bwd.json"

RUNNER = r"""
import contextlib, io, json, sys
from divfuzz.fuzzer.cli import options
from divfuzz.fuzzer.engine import warm_template

started = []
warm_template.start_in_background = lambda device: started.append(device)
if sys.argv[1] == "lacking":  # an Inductor without the switch: as if its config.py did not bind it
    options.inductor_config_keys = lambda: frozenset()
from divfuzz.fuzzer.cli.main import main

for args in json.loads(sys.argv[2]):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            main(args, standalone_mode=True)
            code = 0
        except SystemExit as e:
            code = e.code
    print(json.dumps({"code": code, "torch": "torch" in sys.modules, "template": list(started),
                      "stderr": stderr.getvalue()}))
"""


def _refusals(commands: list[list[str]], *, lacking: bool = False) -> list[dict]:
    """Each command's refusal, in one interpreter, in order: none of them may import torch, so
    the ones after a command that did would read it too (and fail with it)."""
    done = subprocess.run([sys.executable, "-c", RUNNER, "lacking" if lacking else "-", json.dumps(commands)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(commands):]]


@pytest.fixture
def bad_op_spec(tmp_path) -> Path:
    spec = json.loads(GOOD_SPEC.read_text())
    spec["nodes"][0]["op"] = "no_such_op"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    return path


def _commands(bad_spec: Path, out: Path):
    fuzz = ["fuzz", "--device", "cpu", "--max-cases", "2", "--out", str(out)]
    return [
        (fuzz + ["--inductor", "no_such_key=1"], "unknown Inductor config key 'no_such_key'"),
        (fuzz + ["--inductor", "fallback_random=1"], "takes true or false"),
        (fuzz + ["--backend", "bad name"], "--backend"),
        (["replay", str(bad_spec), "--device", "cpu"], "unknown op 'no_such_op'"),
        (["replay", str(GOOD_SPEC), "--device", "cpu", "--inductor", "no_such_key=1"], "no_such_key"),
        (["minimize", str(bad_spec), "--device", "cpu", "--repro-dir", str(out / "m")], "unknown op 'no_such_op'"),
        (["minimize", str(GOOD_SPEC), "--device", "cpu", "--repro-dir", str(out / "m"), "--inductor", "no_such_key=1"], "no_such_key"),
        (["gate", "--device", "cpu", "--inductor", "no_such_key=1"], "no_such_key"),
    ]


def test_bad_specs_and_inductor_keys_are_refused_before_torch_is_imported(bad_op_spec, tmp_path):
    commands = _commands(bad_op_spec, tmp_path / "out")
    for (args, said), got in zip(commands, _refusals([args for args, _ in commands]), strict=True):
        assert got["code"] == 2, (args, got)
        assert said in got["stderr"], (args, got)
        assert got["torch"] is False, f"torch was imported before `divfuzz {' '.join(args)}` was refused"
        assert got["template"] == [], f"the workers' template (it imports torch) started before `divfuzz {' '.join(args)}` was refused"
    assert not (tmp_path / "out").exists()


def test_a_switch_this_torch_lacks_is_refused_before_torch_is_imported(tmp_path):
    [got] = _refusals([["fuzz", "--device", "cpu", "--max-cases", "2", "--out", str(tmp_path / "out"),
                        "--inductor", "emulate_precision_casts=true"]], lacking=True)
    assert got["code"] == 2 and got["torch"] is False and got["template"] == [], got
    assert "the installed torch's Inductor has no such switch" in got["stderr"]


def test_inductor_config_keys_read_as_text_agree_with_torch_on_every_switch():
    """The source-text reading must not refuse a switch torch has, nor pass one it lacks."""
    import torch._inductor.config as inductor_config

    from divfuzz.fuzzer.engine.compile import validate_inductor_overrides
    from divfuzz.fuzzer.engine.torch_source import inductor_config_keys
    from divfuzz.records.config import INDUCTOR_SWITCHES
    from divfuzz.records.errors import ConfigError

    keys = inductor_config_keys()
    assert keys is not None and "emulate_precision_casts" in keys and "cpp.simdlen" in keys
    public = {name for name in dir(inductor_config) if not name.startswith("_")}
    assert public <= keys, sorted(public - keys)[:5]
    for switch in INDUCTOR_SWITCHES:
        try:
            validate_inductor_overrides({switch: None})
            torch_has = True
        except ConfigError:
            torch_has = False
        assert (switch in keys) == torch_has, switch


def test_torch_source_imports_no_torch():
    code = ("import sys; from divfuzz.fuzzer.engine.torch_source import inductor_config_keys, torch_build; "
            "assert inductor_config_keys() and torch_build(); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
