"""The attacks of issue 22 ("safe and loud, second round"), one class per section, each through the
real command line where that is cheap: the exit code, the message, and the files left as they were.

Classes and the one rule each is held to:
- Inductor keys: only `divfuzz.records.config.INDUCTOR_SWITCHES`, each value of its type (no program,
  path, module or callable ever comes from a config);
- paths: `divfuzz.records.safe_paths` opens everything under --out, a store or a corpus (no symlink
  followed, no FIFO waited on);
- numbers: `divfuzz.records.numbers` (finite, in range) for every option and file;
- signals: `divfuzz.fuzzer.cli.interrupts` (exit 2, no half-written file, no orphan worker);
- full disk: a store is created whole or not at all; a bucket's row and folder are retried together.
Most run in-process through click's runner; the signal tests start real processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from divfuzz.oracles.severity_policy import bucket_severity
from divfuzz.fuzzer.cli.main import main
from divfuzz.records.config import INDUCTOR_SWITCHES, CompileConfig, check_inductor_override
from divfuzz.records.errors import ConfigError, UnsafePathError
from divfuzz.records.numbers import checked_number, number_problem, parse_number
from test_safety_cli import _store_with_a_case
from test_spec_safety import base

ROOT = Path(__file__).resolve().parent.parent
CORPUS_SPEC = sorted((ROOT / "corpus" / "specs").glob("*.json"))[0]


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a file's hash, a link's target, a FIFO's kind (nothing is followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = "-> " + os.readlink(p)
        elif p.is_fifo():
            out[str(p.relative_to(folder))] = "fifo"
        elif p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(folder)) + "/"] = ""
    return out


def _spec(tmp_path: Path, data: dict | None = None, name: str = "spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data if data is not None else base()))
    return path


# ---- 1 and 4: one list of Inductor switches --------------------------------------------------

HOSTILE_KEYS = [
    ("cpp.cxx", "EVIL", "names a program, a path, a module or a callable"),
    ("post_grad_custom_pre_pass", "os.system", "names a program, a path, a module or a callable"),
    ("__class__", 1, "is not a public config key"),
    ("_private", True, "is not a public config key"),
    ("max_autotune", "banana", "takes true or false but got 'banana'"),
    ("compile_threads", -5, "takes a whole number from 1 to 1024 but got -5"),
    ("compile_threads", True, "takes a whole number"),
    ("debug_dir_root", "/tmp/x", "names a program, a path"),
    ("fx_graph_remote_cache", True, "names a program, a path"),
    ("max_fusion_size", 10**401, "takes a whole number from 1 to 4096"),
]


@pytest.mark.parametrize("key, value, fragment", HOSTILE_KEYS)
def test_inductor_keys_outside_the_list_or_of_the_wrong_type_are_refused_everywhere(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        check_inductor_override(key, value)
    assert fragment in str(info.value)
    with pytest.raises(ConfigError):  # a stored config, a baseline, a worker's message: the same rule
        CompileConfig.from_dict({"backend": "inductor", "inductor": {key: value}}, where="the stored config of case 1")
    with pytest.raises(ConfigError):
        CompileConfig().with_inductor(**{key: value})


@pytest.mark.parametrize("item, fragment", [
    ("__class__=1", "'__class__' is not a public config key"),
    ("post_grad_custom_pre_pass=os.system", "'post_grad_custom_pre_pass' refused"),
    ("max_autotune=banana", "'max_autotune' takes true or false but got 'banana'"),
    ("compile_threads=-5", "'compile_threads' takes a whole number from 1 to 1024 but got -5"),
    ("cpp.cxx=/bin/sh", "'cpp.cxx' refused: it names a program"),
    ("compile_threads=NaN", "'compile_threads' takes a whole number from 1 to 1024 but got 'NaN'"),
])
def test_cli_inductor_overrides_are_input_errors_before_any_work(tmp_path, item, fragment):
    spec = _spec(tmp_path)
    before = _tree(tmp_path)
    result = _invoke("replay", spec, "--device", "cpu", "--inductor", item)
    assert result.exit_code == 2, result.output
    assert fragment in _flat(result.output) and "Traceback" not in result.output
    assert _tree(tmp_path) == before


def test_every_listed_switch_is_a_bool_or_bounded_int_in_this_torch():
    """The list is checked against torch's own types: no listed key takes a string, a path or a
    callable here, so none can name a program; the probes attribution flips are all listed."""
    import torch._inductor.config as ic

    from divfuzz.fuzzer.triage.attribute import PERF_PROBES, PROBES

    entries = ic._config
    for key, switch in INDUCTOR_SWITCHES.items():
        assert key in entries, f"{key} is not an Inductor config key in this torch"
        text = str(entries[key].value_type)
        assert "str" not in text and "Callable" not in text and "Path" not in text and "dict" not in text, (key, text)
        assert ("bool" in text) == (switch.kind is bool), (key, text)
        default = entries[key].default
        assert switch.problem(default) is None, (key, default)  # torch's own default fits the declared type
    for key, value, _ in (*PROBES, *PERF_PROBES):
        assert key in INDUCTOR_SWITCHES and INDUCTOR_SWITCHES[key].problem(value) is None, key


def test_a_stored_cpp_cxx_never_runs_and_never_reaches_a_repro(tmp_path):
    """Issue 22 #1: `minimize 1 --store` ran the stored compiler 15 times and wrote it into repro.py.
    Now: exit 2 naming the key and the store, the script never runs, nothing is written."""
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {tmp_path}/pwned\nexec g++ \"$@\"\n")
    evil.chmod(0o755)
    store_dir = tmp_path / "hst"
    store_dir.mkdir()
    _store_with_a_case(store_dir, {"backend": "inductor", "dynamic": False, "mode": None, "inductor": {"cpp.cxx": str(evil)}})
    before = _tree(tmp_path)
    result = _invoke("minimize", "1", "--store", store_dir, "--device", "cpu", "--out", tmp_path / "min")
    assert result.exit_code == 2, result.output
    message = _flat(result.output)
    assert "'cpp.cxx' refused" in message and "the stored config of case 1 in" in message and str(store_dir) in message
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "min").exists()
    assert _tree(tmp_path) == before


def test_a_repro_cannot_print_a_forbidden_key():
    from divfuzz.generators.spec import GraphSpec
    from divfuzz.reports.repro import render_repro

    spec = GraphSpec.from_dict(base())
    text = render_repro(spec, device="cpu", config=CompileConfig().with_inductor(emulate_precision_casts=True), title="t")
    assert "INDUCTOR_CONFIG = {'emulate_precision_casts': True}" in text
    with pytest.raises(ConfigError):
        CompileConfig(inductor=(("cpp.cxx", "/x"),))  # the only way into render_repro is a CompileConfig


# ---- 2, 3 and 6: one safe opener ------------------------------------------------------------


def test_a_symlinked_lock_is_refused_and_its_target_left_byte_identical(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    out = tmp_path / "lk"
    out.mkdir()
    (out / "divfuzz.lock").symlink_to(outside)
    before = _tree(tmp_path)
    result = _invoke("fuzz", "--out", out, "--device", "cpu", "--max-cases", "1", "--workers", "1", "--no-live", "--no-minimize")
    assert result.exit_code == 2, result.output
    assert f"campaign lock {out / 'divfuzz.lock'}: is a symlink" in _flat(result.output)
    assert _tree(tmp_path) == before and outside.read_text() == "keep me\n"


def test_a_symlinked_buckets_folder_or_store_is_refused(tmp_path):
    from divfuzz.fuzzer.store import Store
    from divfuzz.records.buckets import BucketKey
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import Verdict
    from divfuzz.generators.spec import GraphSpec
    from divfuzz.reports.bucket_folder import write_bucket_folder

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "0001-x").mkdir(parents=True)
    (elsewhere / "0001-x" / "repro.py").write_text("theirs\n")
    out = tmp_path / "sy3"
    out.mkdir()
    (out / "buckets").symlink_to(elsewhere)
    (out / "divfuzz.sqlite").symlink_to(tmp_path / "elsewhere" / "db.sqlite")
    before = _tree(tmp_path)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        write_bucket_folder(out / "buckets", bucket_id=1, key=BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("x",)),
                            spec=GraphSpec.from_dict(base()), device="cpu", config=CompileConfig(), verdict=Verdict(Status.OK))
    with pytest.raises(UnsafePathError, match="store file .* is a symlink"):
        Store(out / "divfuzz.sqlite")
    assert _tree(tmp_path) == before


def test_a_symlinked_corpus_specs_folder_is_refused_by_corpus_add(tmp_path):
    spec = _spec(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "specs").symlink_to(elsewhere)
    before = _tree(tmp_path)
    result = _invoke("corpus", "add", spec, "--corpus", corpus)
    assert result.exit_code == 2 and "corpus specs folder" in _flat(result.output) and "is a symlink" in _flat(result.output)
    assert _tree(tmp_path) == before and not list(elsewhere.iterdir())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["gate", "corpus prune", "corpus add", "replay", "cluster-file"])
def test_a_fifo_named_json_is_refused_not_waited_on(tmp_path, how):
    corpus = tmp_path / "c"
    (corpus / "specs").mkdir(parents=True)
    (corpus / "specs" / "ok.json").write_text(CORPUS_SPEC.read_text())
    fifo = corpus / "specs" / "trap.json"
    os.mkfifo(fifo)
    spec = _spec(tmp_path)
    args = {
        "gate": ("gate", "--corpus", corpus, "--device", "cpu", "--baseline-any", "--baseline", ROOT / "corpus" / "baseline-cpu-2.13-avx512.json"),
        "corpus prune": ("corpus", "prune", "--corpus", corpus, "--dry-run"),
        "corpus add": ("corpus", "add", spec, "--corpus", corpus),
        "replay": ("replay", fifo, "--device", "cpu"),
        "cluster-file": ("fuzz", "--cluster-file", fifo, "--out", tmp_path / "o", "--device", "cpu"),
    }[how]
    before = _tree(tmp_path)
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert "is a FIFO" in _flat(result.output) and str(fifo) in _flat(result.output)
    assert _tree(tmp_path) == before


# ---- 8 and 9: one number validator ----------------------------------------------------------


def test_the_number_rule():
    assert number_problem(1.5, low=0, high=2) is None
    for bad in (float("nan"), float("inf"), -float("inf"), True, "1", None, 10**401):
        assert number_problem(bad, low=0, high=10) is not None, bad
    assert number_problem(2.0, integer=True) is not None
    with pytest.raises(ConfigError, match="a 401-digit integer"):
        checked_number(10**400, "eps", low=0, high=1)
    assert parse_number("12", "x", integer=True) == 12
    with pytest.raises(ConfigError, match="got 'nan'|got nan"):
        parse_number("nan", "x")


@pytest.mark.parametrize("args, fragment", [
    (("fuzz", "--budget", "0"), "--budget '0': expected a duration of more than 0 s"),
    (("fuzz", "--perf-margin", "nan"), "Invalid value for '--perf-margin': expected a finite number from 0.0 to 10.0 but got nan"),
    (("fuzz", "--timeout", "nan"), "Invalid value for '--timeout'"),
    (("fuzz", "--timeout", "inf"), "Invalid value for '--timeout': expected a finite number from 1 to 604800 but got inf"),
    (("fuzz", "--seed", str(10**26)), "Invalid value for '--seed': expected a whole number from 0 to 9223372036854775807"),
    (("fuzz", "--workers", "99999999999999999999999"), "Invalid value for '--workers'"),
    (("gate", "--margin", "nan"), "Invalid value for '--margin'"),
    (("gate", "--margin", "inf"), "Invalid value for '--margin'"),
    (("gate", "--fuzz", "abc"), "for --fuzz but got 'abc'"),
    (("minimize", "--budget", "0", "x.json"), "--budget '0'"),
])
def test_bad_numbers_in_options_are_input_errors_naming_the_option(tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps(base()))
    result = _invoke(*args, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert fragment in _flat(result.output), result.output
    assert "internal error" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]  # no out folder, no store, no log


def test_a_23_digit_run_id_is_an_input_error_and_writes_no_log(tmp_path):
    store_dir = tmp_path / "s"
    store_dir.mkdir()
    _store_with_a_case(store_dir, {"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}})
    before = _tree(tmp_path)
    huge = "1" * 23
    result = _invoke("report", "--out", store_dir, "--run", huge)
    assert result.exit_code == 2 and "Invalid value for '--run'" in _flat(result.output)
    result = _invoke("diff", f"{store_dir}:{huge}", str(store_dir))
    assert result.exit_code == 2 and "run id: expected a whole number from 1 to" in _flat(result.output), result.output
    result = _invoke("minimize", huge, "--store", store_dir, "--device", "cpu", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "CASE-ID: expected a whole number" in _flat(result.output), result.output
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d.update(schema_version=True), "schema_version but got True"),
    (lambda d: d["nodes"][0]["params"].update(eps=int("9" * 401)), "eps"),
    (lambda d: d["inputs"][0].update(shape=[2**70, 0]), "a dim of shape"),
])
def test_numbers_in_spec_files_are_checked_before_the_corpus_takes_them(tmp_path, mutate, fragment):
    data = base()
    mutate(data)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))
    before = _tree(tmp_path)
    result = _invoke("corpus", "add", spec, "--corpus", tmp_path / "c")
    assert result.exit_code == 2, result.output
    assert fragment in _flat(result.output) and "internal error" not in result.output
    assert _tree(tmp_path) == before


# ---- 5 and 12: one signal policy ------------------------------------------------------------


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "divfuzz.fuzzer", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _children(pid: int) -> list[int]:
    """Every process below `pid` (a worker started from the warm template is its server's child)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [grandchild for kid in kids for grandchild in _children(kid)]


def _wait_for_worker(proc: subprocess.Popen, limit: float = 60.0) -> None:
    """Until a worker process of `proc` runs (so the signal lands mid-work)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if _children(proc.pid):
            time.sleep(3)  # the worker has imported torch and is on its case
            return
        time.sleep(0.2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_minimize_stops_on_a_signal_with_exit_2_and_no_orphan(tmp_path, sig, machine_slowness):
    spec = _spec(tmp_path)
    proc = _start(["minimize", str(spec), "--device", "cpu", "--out", "m"], tmp_path)
    _wait_for_worker(proc)
    workers = _children(proc.pid)
    t0 = time.monotonic()
    os.killpg(proc.pid, sig)  # as a terminal or `timeout` does: the whole group
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, output
    assert time.monotonic() - t0 < 15 * machine_slowness  # the stop's cleanup, at this machine's speed
    assert "interrupted: divfuzz minimize stopped by a signal" in _flat(output) and "Aborted!" not in output
    assert "Traceback" not in output
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.timeout(300)
def test_an_interrupted_gate_exits_2_never_1_and_writes_no_json(tmp_path):
    """Issue 22 #5: the gate printed "Aborted!", exited 1 (a regression to CI) and replayed on."""
    proc = _start(["gate", "--corpus", str(ROOT / "corpus"), "--device", "cpu", "--workers", "2", "--baseline-any",
                   "--json", "gate.json"], tmp_path)
    _wait_for_worker(proc)
    os.killpg(proc.pid, signal.SIGINT)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 2, output
    # only divfuzz's own lines: multiprocessing's resource tracker once warned here about the killed
    # workers' semaphores (tqdm's lock, made in every worker by torch.fx: issue 35)
    assert "resource_tracker" not in output and "warnings.warn(" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert "interrupted: divfuzz gate stopped by a signal" in _flat(output) and "Aborted!" not in output
    assert lines[-1].startswith("its workers") or lines[-1].startswith("interrupted:"), output  # no result after it
    assert not (tmp_path / "gate.json").exists()


# ---- 7: full disk ---------------------------------------------------------------------------


def test_store_creation_on_a_full_disk_leaves_no_half_made_store(tmp_path):
    """A file-size limit stands in for a full disk: SQLite cannot write the new store."""
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))\n"
        "from divfuzz.fuzzer.store import Store\n"
        "from divfuzz.records.errors import StoreError\n"
        "try:\n    Store(sys.argv[1])\nexcept StoreError as e:\n    print(e); sys.exit(2)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "divfuzz.sqlite")], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot create the store" in proc.stdout and "nothing was created" in proc.stdout
    assert list(tmp_path.iterdir()) == []
    from divfuzz.fuzzer.store import Store

    Store(tmp_path / "divfuzz.sqlite").close()  # once there is room, the same path makes a real store


def test_a_bucket_whose_folder_was_never_recorded_is_run_again_on_resume(tmp_path):
    from divfuzz.fuzzer.store import Store
    from divfuzz.records.buckets import BucketKey, CulpritKey

    store = Store(tmp_path / "divfuzz.sqlite")
    key = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="many-ulps", culprit=CulpritKey("inductor"))
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    case = dict(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json="{}", device="cpu", config={},
                verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="bf16-ulp", key=key, judged=bucket_severity(key, None))
    _, bucket_id, is_new = store.add_case(**case)
    assert is_new
    # the disk filled up before the folder was written: the case is not "stored" for the resume
    assert store.stored_case(run_id, 0, 0) is None
    _, again_id, is_new = store.add_case(**case)  # the resume runs it again: the bucket is new again, so its folder is written
    assert is_new and store.buckets()[0].count == 1 and len(store.buckets()) == 1
    store.set_bucket_folder(again_id, str(tmp_path / "buckets" / "0001"))
    assert store.stored_case(run_id, 0, 0) == ("d", 1.0)  # with its folder recorded, a resume skips it
    store.close()


# ---- 10 to 12: smaller defects --------------------------------------------------------------


def test_user_strings_are_printed_as_text_not_rich_markup(tmp_path):
    result = _invoke("replay", tmp_path / "a:warning:b.json", "--device", "cpu")
    assert result.exit_code == 2 and "a:warning:b.json" in result.output and "\u26a0" not in result.output
    result = _invoke("replay", tmp_path / "[bold]x[/bold].json", "--device", "cpu")
    assert result.exit_code == 2 and "[bold]x[/bold].json" in result.output


def test_refused_merge_and_fuzz_leave_no_lock_or_folder(tmp_path):
    notastore = tmp_path / "foreign.sqlite"
    notastore.write_bytes(b"not sqlite at all" * 10)
    before = _tree(tmp_path)
    result = _invoke("merge", tmp_path / "new" / "out", notastore)
    assert result.exit_code == 2, result.output
    assert _tree(tmp_path) == before and not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "divfuzz.sqlite").write_bytes(b"not sqlite at all" * 10)
    before = _tree(tmp_path)
    result = _invoke("fuzz", "--out", tmp_path / "old", "--device", "cpu", "--max-cases", "1", "--workers", "1", "--no-live")
    assert result.exit_code == 2 and "not" in result.output
    assert _tree(tmp_path) == before  # no divfuzz.lock beside the refused store, no run row written


def test_the_markdown_report_escapes_html_from_the_store(tmp_path):
    from divfuzz.fuzzer.store import Store
    from divfuzz.records.buckets import BucketKey, CulpritKey
    from divfuzz.reports.markdown import buckets_markdown

    store = Store(tmp_path / "divfuzz.sqlite")
    run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
    key = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("<img src=x onerror=alert(1)>|`",), rule="float-gross-worse",
                    culprit=CulpritKey("inductor", "<script>alert(2)</script>"))
    store.add_case(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json="{}", device="cpu", config={},
                   verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="bf16-ulp", key=key,
                   judged=bucket_severity(key, {"severity": "bug", "rule": "r", "output": "o", "detail": "<b>bold</b>"}))
    text = buckets_markdown(store)
    store.close()
    from divfuzz.reports.markdown import md_code

    assert "## bug" in text  # listed as the bug its key says it is
    assert md_code(key.ops_text()) in text  # a code span shows its text literally (CommonMark): never rendered
    assert "<script>alert(2)</script>" in text  # the culprit too, inside a code span only (below)
    import re

    outside = re.sub(r"(`+) .*? \1|`[^`]*`", "", text)  # every code span removed
    assert re.search(r"(?<!\\)<", outside) is None  # every `<` backslash-escaped (CommonMark): no tag, no autolink
    assert "\\<b>bold\\</b>" in text and "&lt;" not in text  # read as itself on a terminal, not as entities


@pytest.mark.timeout(300)
@pytest.mark.parametrize("body, fragment", [
    ("return Model(None), (torch.ones(3),)", "the model returned no tensor"),
    ("return Model('text'), (torch.ones(3),)", "the model returned no tensor"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt: raised by the code called in the worker"),
])
def test_module_mistakes_are_input_errors_without_a_worker_traceback(tmp_path, body, fragment):
    module = tmp_path / "user.py"
    module.write_text(
        "import torch\n\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self, value):\n        super().__init__()\n        self.value = value\n\n"
        "    def forward(self, x):\n        return self.value\n\n"
        f"def case():\n    {body}\n"
    )
    proc = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "minimize", "--module", f"{module}:case", "--device", "cpu",
                           "--out", str(tmp_path / "m"), "--budget", "60s"],
                          cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=280)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert fragment in _flat(output) and "Traceback" not in output and "Process " not in output
    assert "agree" not in output
