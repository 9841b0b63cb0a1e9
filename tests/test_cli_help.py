"""The command line reads like other CLIs (issue 35): `-h` everywhere, every option with help text
that names no internal module, metavars a reader can type (N, SECONDS, DIR, not "A WHOLE NUMBER
FROM 1 TO 9223372036854775807"), one meaning per option name, `--workers auto` by default; and
errors about the device or a missing file said before torch is imported.

The walk covers every command the `divfuzz` group has, so a new option without help fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.fuzzer.cli.options import _no_cuda_here

ROOT = Path(__file__).resolve().parent.parent
CLICK_GENERIC = {"TEXT", "INTEGER", "FLOAT", "INTEGER RANGE", "FLOAT RANGE", "BOOLEAN", "UUID"}
INTERNAL_NAME = re.compile(r"\bdivfuzz\.[a-z_]+\.|\b[a-z_]+_command\b")  # a module path, a command's module


def _commands(group: click.Group = main, path: tuple[str, ...] = ()):
    """(the words that name it, the command) for every command below `group`, groups included."""
    for name, command in sorted(group.commands.items()):
        yield path + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, path + (name,))


def _context(words: tuple[str, ...]) -> click.Context:
    ctx = click.Context(main, info_name="divfuzz")
    command: click.Command = main
    for word in words:
        command = command.commands[word]
        ctx = click.Context(command, info_name=word, parent=ctx)
    return ctx


ALL = list(_commands())


def test_the_walk_sees_every_command():
    names = {" ".join(words) for words, _ in ALL}
    assert {"fuzz", "replay", "report", "diff", "merge", "minimize", "gate", "corpus", "corpus add", "corpus prune", "bench"} <= names


@pytest.mark.parametrize("words", [words for words, _ in ALL], ids=[" ".join(w) for w, _ in ALL])
def test_every_option_has_help_a_readable_metavar_and_names_no_module(words):
    ctx = _context(words)
    problems = []
    for param in ctx.command.params:
        if param.name == "help":
            continue
        label = f"divfuzz {' '.join(words)} {param.opts[0]}"
        if isinstance(param, click.Option):
            help_text = " ".join((param.help or "").split())
            if not help_text:
                problems.append(f"{label}: no help text")
            if INTERNAL_NAME.search(help_text):
                problems.append(f"{label}: help names an internal module: {help_text!r}")
            if param.is_flag:
                continue
        metavar = param.make_metavar(ctx)
        bare = metavar.removesuffix("...").strip("[]")
        choice = metavar.startswith("[") and "|" in metavar  # click's [a|b|c]: the choices themselves
        if " " in bare or bare.upper() in CLICK_GENERIC or (len(bare) > 24 and not choice):
            problems.append(f"{label}: metavar {metavar!r}")
    assert problems == []


@pytest.mark.parametrize("words", [()] + [words for words, _ in ALL], ids=["divfuzz"] + [" ".join(w) for w, _ in ALL])
def test_dash_h_is_help(words):
    result = CliRunner().invoke(main, [*words, "-h"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ") and "-h, --help" in result.output


def test_one_meaning_per_option_name():
    """`--out` is a campaign folder (its store) wherever it appears; `--workers` defaults to auto."""
    outs, workers = [], []
    for words, command in ALL:
        for param in command.params:
            if isinstance(param, click.Option) and "--out" in param.opts:
                outs.append((words, param))
            if isinstance(param, click.Option) and "--workers" in param.opts:
                workers.append((words, param))
    assert {w for w, _ in outs} >= {("fuzz",), ("report",), ("bench",), ("minimize",)}
    for words, param in outs:
        assert "campaign folder" in param.help, (words, param.help)
    assert {w for w, _ in workers} >= {("fuzz",), ("gate",), ("minimize",), ("bench",)}
    for words, param in workers:
        assert param.default == "auto", words


# ---- errors before torch ------------------------------------------------------------------------


def _run_importtime(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float, list[str]]:
    """Run divfuzz with `-X importtime`: (the result, its seconds, the top-level modules it imported)."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "divfuzz.fuzzer", *args], cwd=cwd, capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    seconds = time.monotonic() - t0
    modules = [line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")]
    r.stderr = "\n".join(line for line in r.stderr.splitlines() if not line.startswith("import time:"))
    return r, seconds, modules


NO_GPU = pytest.mark.skipif(_no_cuda_here() is None, reason="this host may have a CUDA GPU: only torch can tell")


@pytest.mark.parametrize("args, message", [
    pytest.param(["fuzz", "--device", "cuda", "--max-cases", "1"], "--device cuda: no CUDA GPU", marks=NO_GPU),
    pytest.param(["replay", "SPEC", "--device", "cuda"], "--device cuda: no CUDA GPU", marks=NO_GPU),
    pytest.param(["gate", "--corpus", "CORPUS", "--device", "cuda:1"], "--device cuda:1: no CUDA GPU", marks=NO_GPU),
    pytest.param(["bench", "--device", "cuda", "--cases", "1"], "--device cuda: no CUDA GPU", marks=NO_GPU),
    pytest.param(["minimize", "SPEC", "--device", "cuda"], "--device cuda: no CUDA GPU", marks=NO_GPU),
    (["fuzz", "--device", "gpu"], "Expected --device auto, cpu or cuda[:N] but got 'gpu'"),
    (["minimize", "--module", "nonexistent.py:f"], "--module 'nonexistent.py:f': no file nonexistent.py"),
    (["minimize", "--module", "tests/modules/seed002_e8m0.py:not-a-name"], "NAME 'not-a-name' is not a Python name"),
    (["minimize", "missing-spec.json"], "missing-spec.json: cannot read"),
    (["minimize", "7", "--out", "no-campaign"], "no-campaign/divfuzz.sqlite: no store here for case 7"),
    (["replay", "missing-spec.json"], "missing-spec.json: cannot read"),
    (["gate", "--corpus", "no-corpus"], "--corpus no-corpus: corpus folder does not exist"),
    (["gate", "--corpus", "CORPUS", "--baseline", "no-baseline.json"], "--baseline no-baseline.json: no such file"),
])
def test_device_and_file_errors_come_before_torch_and_write_nothing(tmp_path, args, message):
    spec = sorted((ROOT / "corpus" / "specs").glob("*.json"))[0]
    (tmp_path / "tests" / "modules").mkdir(parents=True)
    (tmp_path / "tests" / "modules" / "seed002_e8m0.py").write_text("def make_case():\n    pass\n")
    args = [str(spec) if a == "SPEC" else str(ROOT / "corpus") if a == "CORPUS" else a for a in args]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r, seconds, modules = _run_importtime(args, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in " ".join((r.stdout + r.stderr).split())
    assert "torch" not in modules, f"torch was imported before the error ({seconds:.1f} s)"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no divfuzz-minimized/phases.json, no store


# ---- minimize's folders: --out is the campaign folder, --repro-dir the output ---------------------


def test_minimize_folders_new_spelling_and_the_old_one_with_a_note(capsys):
    from divfuzz.fuzzer.cli.minimize_command import minimize_folders

    def folders(case, **kw):
        args = dict(out_dir=None, repro_dir=None, store_dir=None, pending=False, modules=())
        args.update({k: Path(v) if isinstance(v, str) else v for k, v in kw.items()})
        result = minimize_folders(case, **args)
        return tuple(str(p) for p in result), capsys.readouterr().err

    assert folders("spec.json") == (("divfuzz-out", "divfuzz-minimized"), "")
    assert folders("spec.json", repro_dir="r") == (("divfuzz-out", "r"), "")
    assert folders("12", out_dir="camp", repro_dir="r") == (("camp", "r"), "")
    assert folders(None, out_dir="camp", pending=True) == (("camp", "divfuzz-minimized"), "")
    assert folders("12", out_dir="camp") == (("camp", "divfuzz-minimized"), "")  # a case id reads the store: the new meaning
    (paths, note) = folders("spec.json", out_dir="m")  # no store read: the old meaning, said
    assert paths == ("divfuzz-out", "m") and "deprecated: use --repro-dir" in " ".join(note.split())
    (paths, note) = folders("12", store_dir="camp", out_dir="min")  # the old pair
    assert paths == ("camp", "min") and "--store is deprecated" in note and "--out as the output folder is deprecated" in note
    with pytest.raises(Exception, match="give --out"):
        folders("12", store_dir="camp", out_dir="min", repro_dir="r")
