"""The attacks of issue 9 (part A) through the real command line: each is refused with exit 2 and a
message naming the bad field, file or value, and nothing is written or run.

The two code injections run `divfuzz minimize` as a real subprocess; the rest use click's runner
in-process (the same command code, without paying for a second torch import each time).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.cli.main import main
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError
from divfuzz.records.errors import UnsafePathError
from divfuzz.records.safe_paths import child_path, slugify
from test_spec_safety import base, rename

ROOT = Path(__file__).resolve().parent.parent


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` and its content hash: to show that nothing changed."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


INJECTED_NAME = "D.__dict__[__import__('os').system('touch pwned')]"
DANGLING = "v3\n__import__('os').system('touch pwned')\nv3"
GROUPS = "2, None, None); __import__('os').system('touch pwned'); (0"


def injected_specs() -> dict[str, dict]:
    dangling = base()
    dangling["nodes"].append({"name": DANGLING, "op": "gelu", "inputs": ["v2"], "params": {}, "dtype": "float32", "shape": [4, 8]})
    group_norm = base()
    group_norm["nodes"][1] = {"name": "v2", "op": "group_norm", "inputs": ["v1"], "params": {"groups": GROUPS, "eps": 1e-5, "affine": False},
                              "dtype": "float32", "shape": [4, 8]}
    return {"node-name": rename(base(), "v2", INJECTED_NAME), "dangling-node": dangling, "group-norm-groups": group_norm}


@pytest.mark.parametrize("which, fragment", [("node-name", "must be an ASCII identifier"), ("dangling-node", "must be an ASCII identifier")])
def test_the_two_injections_are_refused_at_load_and_nothing_is_created(tmp_path, which, fragment):
    """Issue 9: these specs, through `divfuzz minimize SPEC --out DIR`, used to write a repro.py
    that ran `touch pwned`. Now the spec is refused before any work: exit 2, no folder, no file."""
    spec = _write(tmp_path / "spec.json", injected_specs()[which])
    before = _tree(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "minimize", str(spec), "--out", "out", "--device", "cpu"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = _flat(proc.stdout + proc.stderr)
    assert str(spec) in message and "node name" in message and fragment in message and "Traceback" not in message
    assert not (tmp_path / "out").exists() and not (tmp_path / "pwned").exists()
    assert _tree(tmp_path) == before


def test_string_group_norm_param_is_refused_by_corpus_add_and_by_the_gate(tmp_path):
    """Issue 9: a corpus spec with a string `groups` passed `corpus add`, and the gate wrote an
    injected repro.py to --repro-dir. Now both refuse it, and nothing is written."""
    spec = _write(tmp_path / "evil.json", injected_specs()["group-norm-groups"])
    corpus = tmp_path / "corpus"
    (corpus / "specs").mkdir(parents=True)
    (corpus / "specs" / "clean.json").write_text((ROOT / "corpus" / "specs" / "seed-gelu-tanh-bf16.json").read_text())
    before = _tree(corpus)
    result = _invoke("corpus", "add", spec, "--corpus", corpus)
    assert result.exit_code == 2 and "param 'groups'" in _flat(result.output) and "evil.json" in _flat(result.output)
    assert _tree(corpus) == before
    (corpus / "specs" / "evil.json").write_text(spec.read_text())
    result = _invoke("gate", "--device", "cpu", "--corpus", corpus, "--repro-dir", tmp_path / "repros")
    assert result.exit_code == 2 and "param 'groups'" in _flat(result.output)
    assert not (tmp_path / "repros").exists() and not (tmp_path / "pwned").exists()


def test_corpus_add_name_dot_dot_is_refused_and_creates_nothing(tmp_path):
    spec = _write(tmp_path / "spec.json", base())
    corpus = tmp_path / "corpus"
    for name in ("..", ".", "../evil", "a/b", "-rf", ".hidden", "x" * 101):
        result = _invoke("corpus", "add", spec, "--corpus", corpus, "--name", name)
        assert result.exit_code == 2, (name, result.output)
        assert "is not a safe corpus name" in _flat(result.output) and repr(name)[:20] in _flat(result.output)
    assert not corpus.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
    result = _invoke("corpus", "add", spec, "--corpus", corpus, "--name", "my-case_1")
    assert result.exit_code == 0 and (corpus / "specs" / "my-case_1.json").is_file()


def test_gate_refuses_a_corpus_file_whose_name_would_escape_repro_dir(tmp_path):
    """Issue 9: `corpus add --name ..` made `specs/...json`; the gate then wrote spec.json,
    gate.json and repro.py into the parent of --repro-dir, overwriting a file there."""
    corpus = tmp_path / "corpus"
    (corpus / "specs").mkdir(parents=True)
    (corpus / "specs" / "...json").write_text(json.dumps(base()))
    victim = _write(tmp_path / "spec.json", "precious\n")
    result = _invoke("gate", "--device", "cpu", "--corpus", corpus, "--repro-dir", tmp_path / "repros")
    assert result.exit_code == 2 and "...json" in result.output and "slug" in _flat(result.output)
    assert victim.read_text() == "precious\n" and not (tmp_path / "repros").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "spec.json"]


def test_child_path_refuses_every_escape(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    for name in ("..", ".", "../x", "a/b", "/etc", "link", "x.sh", "", "a\x00b"):
        with pytest.raises(UnsafePathError):
            child_path(root, name)
    assert child_path(root, "0001-ulp-gelu") == root / "0001-ulp-gelu"
    assert child_path(root, "case.json") == root / "case.json"
    assert slugify("../..") == "" and slugify("a b/c") == "a-b-c"


@pytest.mark.parametrize("command", ["replay", "minimize", "corpus-add", "gate"])
def test_json_nested_100k_deep_is_a_named_error_with_exit_2(tmp_path, command):
    deep = _write(tmp_path / "deep.json", "[" * 100_000 + "]" * 100_000)
    if command == "replay":
        result = _invoke("replay", deep, "--device", "cpu")
    elif command == "minimize":
        result = _invoke("minimize", deep, "--device", "cpu", "--out", tmp_path / "out")
    elif command == "corpus-add":
        result = _invoke("corpus", "add", deep, "--corpus", tmp_path / "corpus")
    else:
        (tmp_path / "corpus").mkdir()
        os.replace(deep, tmp_path / "corpus" / "deep.json")
        deep = tmp_path / "corpus" / "deep.json"
        result = _invoke("gate", "--device", "cpu", "--corpus", tmp_path / "corpus")
    assert result.exit_code == 2, result.output
    assert str(deep) in _flat(result.output) and "nested too deeply" in result.output
    assert not (tmp_path / "out").exists()


def test_an_undecodable_corpus_file_is_a_named_error_with_exit_2(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "specs").mkdir(parents=True)
    bad = corpus / "specs" / "latin1.json"
    bad.write_bytes(b'{"name": "caf\xe9"}')
    spec = _write(tmp_path / "spec.json", base())
    before = _tree(corpus)
    for args in (("corpus", "add", spec, "--corpus", corpus), ("corpus", "prune", "--corpus", corpus),
                 ("gate", "--device", "cpu", "--corpus", corpus)):
        result = _invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert str(bad) in _flat(result.output) and "not UTF-8 text (byte 0xe9" in _flat(result.output)
    assert _tree(corpus) == before


# ---- configs read from a store ------------------------------------------------------------------


def _store_with_a_case(out: Path, config: dict) -> None:
    """A real divfuzz store holding one case compiled with `config` (as a hostile store could)."""
    from divfuzz.fuzzer.store import STORE_NAME, Store

    store = Store(out / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config=config, options={}, versions={})
        spec = json.dumps(base())
        store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json=spec, device="cpu", config=config,
                       verdict={"status": "ok"}, score=0.0, wall_s=0.0, finding_kind=None, key=None)
    finally:
        store.close()


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"backend": "os:system", "dynamic": False, "mode": None, "inductor": {}}, "pass --backend os:system"),
        ({"backend": "inductor'); import os; ('", "dynamic": False, "mode": None, "inductor": {}}, "expected a backend name"),
        ({"backend": "not_a_backend", "dynamic": False, "mode": None, "inductor": {}}, "unknown backend 'not_a_backend'"),
        ({"backend": "eager", "dynamic": "yes", "mode": None, "inductor": {}}, "dynamic"),
        ({"backend": "eager", "dynamic": False, "mode": "x'; import os", "inductor": {}}, "mode"),
        ({"backend": "eager", "dynamic": False, "mode": None, "inductor": {"a b": 1}}, "'a b' is not a public config key"),
        ({"backend": "eager", "dynamic": False, "mode": None, "inductor": {"no_such_key": 1}}, "the stored config of case 1 in"),
        ({"backend": "eager", "dynamic": False, "mode": None, "inductor": {"debug": [1, 2]}}, "unknown Inductor config key 'debug' refused"),
    ],
)
def test_minimize_case_id_never_lets_the_store_pick_code_to_import(tmp_path, config, fragment):
    _store_with_a_case(tmp_path, config)
    result = _invoke("minimize", "1", "--store", tmp_path, "--device", "cpu", "--out", tmp_path / "min")
    assert result.exit_code == 2, result.output
    assert fragment in _flat(result.output)
    assert not (tmp_path / "min").exists()


def test_a_stored_import_path_backend_is_used_only_when_named_on_the_command_line():
    from divfuzz.fuzzer.engine.compile import check_stored_backend

    with pytest.raises(ConfigError, match="pass --backend os:system"):
        check_stored_backend("os:system", "inductor", source="case 1")
    check_stored_backend("os:system", "os:system", source="case 1")  # the user asked for it
    check_stored_backend("aot_eager", "inductor", source="case 1")  # a registered torch backend
    with pytest.raises(ConfigError):
        CompileConfig.from_dict({"backend": "x", "inductor": {"k": float("nan")}})
