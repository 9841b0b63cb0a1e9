"""A bucket's repro.py ends with divfuzz's severity, its rule and output, as `divfuzz replay` and the
report state them (issue 35, item 2): `DIVERGES: bug (int-valued-wrong, output v9): ...`, judged by
the engine's own judge and severity policy carried by source. What the script does not measure
(conditioning, an integer output's rounding boundaries, the explain experiments) comes from
divfuzz's run of the spec, only while the script's own numbers are the recorded ones; the
culprit's switch from the bucket key.

Fast: small specs under planted backends, every repro run in one interpreter (each still run by
path as `__main__`), one replay.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.config import CompileConfig
from divfuzz.reports import repro as repro_module
from divfuzz.reports.bucket_folder import write_bucket_folder
from seed_specs import e8m0, unary_bf16

PLANTED = "divfuzz.fuzzer.engine.planted:"


def _top_level_names(source: str) -> set[str]:
    names = set()
    for statement in ast.parse(source).body:
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_the_carried_modules_define_each_name_once():
    """The judge's modules share one namespace in a script: a name two of them define would be
    the later one's everywhere (only identical helpers may repeat)."""
    seen: dict[str, list[str]] = defaultdict(list)
    for module in repro_module.CARRIED_JUDGE:
        for name in _top_level_names(repro_module.carried_source(module)):
            seen[name].append(repro_module.module_path(module))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert twice == {"_dtype_name": ["oracles/boundary.py", "oracles/compare.py"]}
    sources = {m: repro_module.carried_source(m) for m in repro_module.CARRIED_JUDGE}
    bodies = {re.search(r"def _dtype_name\(.*?(?=\n\S|\Z)", s, re.S).group(0) for s in sources.values() if "def _dtype_name" in s}
    assert len(bodies) == 1, bodies  # the same helper in both
    script_names = _top_level_names(repro_module.render_repro(unary_bf16("gelu", rows=2, dim=4), device="cpu",
                                                              config=CompileConfig(), title="t"))
    assert {"judge", "summary", "recorded_measures", "main", "model", "make_inputs"} <= script_names


def _tanh_f32() -> GraphSpec:
    """One float32 output: planted `nan_first` makes it NaN where eager and fp64 are finite, and
    `drift` (x 1 + 2**-5) puts it grossly further from fp64 than eager (2**18 fp32 ULPs)."""
    return GraphSpec(inputs=(TensorSpec("x0", (4, 8), "float32"),), nodes=(Node("v1", "tanh", ("x0",), (), "float32", (4, 8)),),
                     outputs=("v1",), recipe=InputRecipe("normal", 0))


# (name, spec, backend, the bucket key's culprit switch): one of each kind of rule a repro states.
CASES = [
    ("a bf16 ULP", unary_bf16("gelu", rows=2, dim=4), "ulp_bump", ""),
    ("a drift grossly further from fp64", _tanh_f32(), "drift", ""),
    ("the same drift under its culprit's precision switch", _tanh_f32(), "drift", "emulate_precision_casts"),
    ("a new NaN", _tanh_f32(), "nan_first", ""),
    ("an integer flip with its rounding boundaries", e8m0(rows=8, dim=8), "uint8_flip", ""),
    ("a dtype change", unary_bf16("gelu", rows=2, dim=4), "wrong_dtype", ""),
    ("a compile error", unary_bf16("gelu", rows=2, dim=4), "compile_error", ""),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Each case run by the engine and written as a bucket folder: (name, folder, divfuzz's labelled reason)."""
    root = tmp_path_factory.mktemp("buckets")
    worker = Worker("cpu")
    made = []
    try:
        for i, (name, spec, backend, switch) in enumerate(CASES, start=1):
            config = CompileConfig(backend=PLANTED + backend)
            verdict = worker.run(CaseRequest(spec, "cpu", config), 300)
            reason = severity_of(verdict, switch=switch or None)
            assert reason is not None, (name, verdict)
            key = BucketKey(kind="fp32-ulp", dtype="-", device_type="cpu", ops=tuple(dict.fromkeys(spec.op_names)),
                            rule=reason.rule, culprit=CulpritKey("inductor", switch=switch) if switch else None)
            folder = write_bucket_folder(root, bucket_id=i, key=key, spec=spec, device="cpu", config=config, verdict=verdict)
            made.append((name, folder, reason.labelled()))
    finally:
        worker.stop()
    return made


def _run_all(paths: list[Path]) -> list[tuple[int, list[str]]]:
    """Run each script by path as `__main__`, one after another in one interpreter: (exit code, lines)."""
    driver = ("import runpy, sys\n"
              "for p in sys.argv[1:]:\n"
              "    print('@@ BEGIN', flush=True)\n"
              "    sys.argv = [p]\n"
              "    try:\n"
              "        runpy.run_path(p, run_name='__main__')\n"
              "        code = 0\n"
              "    except SystemExit as e:\n"
              "        code = e.code\n"
              "    print('@@ EXIT', code, flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", driver, *map(str, paths)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results, lines = [], []
    for line in proc.stdout.splitlines():
        if line == "@@ BEGIN":
            lines = []
        elif line.startswith("@@ EXIT"):
            results.append((int(line.split()[-1]), lines))
        else:
            lines.append(line)
    assert len(results) == len(paths), proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


def test_each_repro_ends_with_divfuzz_s_severity_rule_and_output(folders):
    results = _run_all([folder / "repro.py" for _, folder, _ in folders])
    for (name, folder, labelled), (code, lines) in zip(folders, results):
        assert code == 1, (name, lines)
        assert lines[-1] == f"DIVERGES: {labelled}", (name, lines[-3:])
    said = {name: lines for (name, _, _), (_, lines) in zip(folders, results)}
    # Each ran under the CPU threads its case ran with (Inductor's CPU kernels follow the count).
    for (name, folder, _), (_, lines) in zip(folders, results):
        threads = json.loads((folder / "case.json").read_text())["threads"]
        assert threads >= 1 and f"threads: {threads}, as divfuzz ran the case" in lines, (name, lines[:4])
    # What the script took from divfuzz's run, and said so: the conditioning of a bug candidate,
    # an integer output's rounding boundaries, the culprit's switch.
    assert any("conditioning of v1" in line for line in said["a drift grossly further from fp64"]), said
    assert any("rounding boundaries of v2" in line for line in said["an integer flip with its rounding boundaries"]), said
    assert any("the culprit's switch emulate_precision_casts" in line
               for line in said["the same drift under its culprit's precision switch"]), said
    # The rules seen: one bug rule of each family, and the switch turning the drift by-design.
    rules = {name: re.match(r"DIVERGES: (\S+) \(([^,]+),", lines[-1]).groups() for name, lines in said.items()}
    assert rules["a drift grossly further from fp64"] == ("bug", "float-gross-worse"), rules
    assert rules["the same drift under its culprit's precision switch"] == ("by-design", "precision-knob"), rules
    assert rules["a new NaN"] == ("bug", "nan-inf-new"), rules
    assert rules["a dtype change"] == ("bug", "output-type-mismatch"), rules
    assert rules["a compile error"] == ("bug", "compile-error"), rules


def test_a_repro_whose_numbers_moved_judges_its_own_run_and_says_so(folders, tmp_path):
    """Measures recorded for other numbers are not borrowed: the integer flip's repro, with the
    recorded flips changed, judges its flips without boundaries (and says so)."""
    name, folder, _ = next(f for f in folders if f[0].startswith("an integer flip"))
    text = (folder / "repro.py").read_text()
    moved = re.sub(r'("flips": )(\d+)', lambda m: m.group(1) + str(int(m.group(2)) + 7), text, count=1)
    assert moved != text
    (tmp_path / "repro.py").write_text(moved)
    [(code, lines)] = _run_all([tmp_path / "repro.py"])
    assert code == 1 and any(line.startswith("judged on this run alone (no divfuzz run of these numbers") for line in lines), lines
    assert re.match(r"DIVERGES: \S+ \(int-flip, output v2\): ", lines[-1]), lines[-1]


def test_replay_of_a_bucket_folder_s_spec_reads_its_culprit_s_switch(folders):
    """`divfuzz replay FOLDER/spec.json` runs under the CPU threads its case.json records and
    judges under the switch its culprit names, as the bucket's case ran and its severity is: the
    same line as the repro's."""
    name, folder, labelled = next(f for f in folders if f[0].startswith("the same drift"))
    proc = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "replay", str(folder / "spec.json"), "--device", "cpu",
                           "--backend", PLANTED + "drift"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "culprit switch (the bucket's case.json): emulate_precision_casts" in proc.stdout
    threads = json.loads((folder / "case.json").read_text())["threads"]
    assert f"threads (the bucket's case.json): {threads}\n" in proc.stdout, proc.stdout
    assert f"\nseverity: {labelled}\n" in proc.stdout, proc.stdout
