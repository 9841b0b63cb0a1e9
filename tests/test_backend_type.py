"""A backend is a type (`divfuzz.records.backends.Backend`): one place says whether it is Inductor,
which stage ladder a culprit search climbs under it, and how a script compiles with it. No module
compares a backend's name with the string "inductor" itself."""

from __future__ import annotations

import ast
from pathlib import Path

from divfuzz.records.backends import INDUCTOR, LADDER_RUNGS, Backend, backend_of
from divfuzz.reports.module_repro import RUNGS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("fuzzer", "generators", "oracles", "records", "reports")


def test_inductor_has_the_ladder_and_its_default_compile_call():
    inductor = backend_of(None)
    assert inductor == Backend(INDUCTOR) and inductor.is_inductor
    assert inductor.ladder == LADDER_RUNGS == ("aot_eager", "aot_eager_decomp_partition")
    assert inductor.rungs() == ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor") == RUNGS
    assert inductor.compile_expression("Repro()") == "torch.compile(Repro())"


def test_another_backend_climbs_the_same_ladder_and_compiles_by_its_name():
    onnx = backend_of("onnxrt")
    assert not onnx.is_inductor and onnx.ladder == LADDER_RUNGS
    assert onnx.rungs() == ("eager", "aot_eager", "aot_eager_decomp_partition", "onnxrt")
    assert onnx.compile_expression("m") == "torch.compile(m, backend='onnxrt')"
    assert onnx.caps().name == "onnxrt" and not onnx.caps().allows("add", "bfloat16", False)
    assert backend_of("aot_eager").compile_expression("m") == "torch.compile(m, backend='aot_eager')"


def _compares_with_inductor(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value == INDUCTOR for o in operands):
                lines.append(node.lineno)
    return lines


def test_no_module_branches_on_the_backend_name_itself():
    found = {}
    for folder in PACKAGE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "records" / "backends.py":
                continue
            hits = _compares_with_inductor(ast.parse(path.read_text(), str(path)))
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert found == {}, f"compare with Backend.is_inductor (divfuzz.records.backends) instead: {found}"


def test_the_scan_sees_a_comparison_with_the_name():
    assert _compares_with_inductor(ast.parse('if config.backend != "inductor":\n    pass\n')) == [1]
    assert _compares_with_inductor(ast.parse('x = {"inductor": 1}\n')) == []
