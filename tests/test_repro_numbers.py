"""A `repro.py` prints the engine's own numbers: for every registered op, the differing count, max
ULP, NaN/Inf placement and fp64 triage of each float output, and the flips, max step and fp64
verdict of each integer output, equal the `Verdict` that `execute_case` stores for the same spec
and compile config, planted bugs included (where they are not zero).

Fast: every op sits in a few wide specs (each node reads the graph inputs directly and is an
output), compiled by `aot_eager` or a planted backend, and all repro scripts run one after another
in one subprocess (each is still a standalone script: it is run by path as `__main__`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.opdef import Choice, Flag, FloatRange, IntRange, Meta
from divfuzz.generators.registry import all_ops
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.records.config import CompileConfig
from divfuzz.records.verdict import Verdict
from divfuzz.reports.repro import render_repro

ROOT = Path(__file__).resolve().parent.parent

# A value for each numeric parameter, inside its schema and valid for the (16, 8) inputs below.
NUMBERS = {"eps": 1e-5, "groups": 2, "out_features": 8, "divisor": 0.3, "scale": 0.05, "threshold": 0.5,
           "start": 1, "length": 3, "index": 2, "dim": 1}


def _param_variants(op) -> list[dict]:
    """Enough param sets that every choice of every `Choice` and `Flag` appears at least once."""
    n = max([len(s.values) for s in op.params.values() if isinstance(s, Choice)] + [2 if any(isinstance(s, Flag) for s in op.params.values()) else 1])
    variants = []
    for i in range(n):
        p = {}
        for key, schema in op.params.items():
            if isinstance(schema, Choice):
                p[key] = schema.values[i % len(schema.values)]
            elif isinstance(schema, Flag):
                p[key] = i % 2 == 0
            else:
                assert isinstance(schema, (IntRange, FloatRange)) and key in NUMBERS, (op.name, key)
                p[key] = NUMBERS[key]
        variants.append(p)
    return variants


def wide_spec(ops, dtype: str, *, shape=(16, 8), recipe="normal", seed=0, backward=False, variants=True) -> GraphSpec:
    """Every variant (or, without `variants`, the first) of every op in `ops`, each applied to the
    data inputs, each an output."""
    data = [TensorSpec(f"x{i}", shape, dtype, requires_grad=backward) for i in range(2)]
    weights: list[TensorSpec] = []
    nodes: list[Node] = []
    metas = (Meta(shape, dtype), Meta(shape, dtype))
    for name in ops:
        op = all_ops()[name]
        for params in _param_variants(op)[: None if variants else 1]:
            if name == "cast" and params["to"] == dtype:
                continue  # the strategies never cast to the same dtype
            args = metas[: op.arity]
            node = f"v{len(nodes) + 1}"
            out = op.infer(args, params)
            ws = [
                TensorSpec(f"{node}_{w.suffix}", w.shape, dtype, requires_grad=backward and w.trainable, init=w.init)
                for w in op.weights(args, params)
            ]
            weights += ws
            inputs = tuple(t.name for t in data[: op.arity]) + tuple(w.name for w in ws)
            nodes.append(Node(node, name, inputs, tuple(sorted(params.items())), out.dtype, out.shape))
    spec = GraphSpec(
        inputs=tuple(data + weights),
        nodes=tuple(nodes),
        outputs=tuple(n.name for n in nodes),
        recipe=InputRecipe(recipe, seed),
        backward=backward,
    )
    return validate_spec(spec)


FLOAT_LINE = re.compile(
    r"^(?P<name>\S+): (?P<dtype>\w+) (?P<n_diff>\d+)/(?P<numel>\d+) elements differ, max (?P<max_ulp>\d+) ULP, "
    r"NaN/Inf placement differs at (?P<nan_inf_mismatch>\d+); fp64 triage: (?P<triage>[\w-]+)"
    r"(?: \(RMSE vs fp64: eager \S+, compiled \S+; (?P<n_gross_worse>\d+) elements grossly worse\))?$"
)
INT_LINE = re.compile(
    r"^(?P<name>\S+): (?P<dtype>\w+) (?P<flips>\d+)/(?P<numel>\d+) elements flip, max step (?P<max_step>\d+); "
    r"fp64 triage: compiled right (?P<compiled_correct>\d+), eager right (?P<eager_correct>\d+), "
    r"neither (?P<neither_correct>\d+)$"
)


def run_repros(paths: list[Path]) -> list[tuple[int, list[str]]]:
    """Run each repro as `__main__` in one fresh interpreter; (exit code, printed lines) per script."""
    driver = (
        "import runpy, sys\n"
        "for p in sys.argv[1:]:\n"
        "    print('@@ BEGIN', p, flush=True)\n"
        "    sys.argv = [p]\n"
        "    try:\n"
        "        runpy.run_path(p, run_name='__main__')\n"
        "        code = 0\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        "    print('@@ EXIT', code, flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", driver, *map(str, paths)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        # planted backends import `fuzzer`; one thread, as `check_cases` runs the engine (see there)
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results, lines = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("@@ BEGIN"):
            lines = []
        elif line.startswith("@@ EXIT"):
            results.append((int(line.split()[-1]), lines))
        else:
            lines.append(line)
    assert len(results) == len(paths), proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


def parsed(lines: list[str]) -> dict[str, dict]:
    out = {}
    for line in lines:
        m = FLOAT_LINE.match(line) or INT_LINE.match(line)
        if m:
            out[m["name"]] = {k: (v if k in ("name", "dtype", "triage") else int(v)) for k, v in m.groupdict().items() if v is not None}
    return out


def engine_numbers(verdict: Verdict) -> dict[str, dict]:
    out = {}
    for o in verdict.outputs:
        if o.float_cmp is not None:
            f = o.float_cmp
            numbers = {"dtype": f.dtype, "n_diff": f.n_diff, "numel": f.numel, "max_ulp": f.max_ulp,
                       "nan_inf_mismatch": f.nan_inf_mismatch, "triage": f.triage}
            if f.n_diff:
                numbers["n_gross_worse"] = f.n_gross_worse
        else:
            i = o.int_cmp
            # The repro carries no rounding boundaries, so it cannot set undefined casts aside.
            assert i.undefined_flips == 0, o
            numbers = {"dtype": i.dtype, "flips": i.flips, "numel": i.numel, "max_step": i.max_step,
                       "compiled_correct": i.compiled_correct, "eager_correct": i.eager_correct,
                       "neither_correct": i.neither_correct}
        out[o.name] = {"name": o.name, **numbers}
    return out


def check_cases(cases, tmp_path: Path) -> list[Verdict]:
    """Render, run and parse every case's repro; assert its numbers are the engine's. Returns the verdicts."""
    paths, verdicts = [], []
    # One thread on both sides: Inductor's CPU code adds an index_add or scatter_add with repeated
    # indices by atomic adds across threads, so with two or more its fp32 sums change from run to
    # run (seen on this 2-core machine: 26-28 of 256 elements differ, max 40-104 ULP, run after run).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i, (spec, config) in enumerate(cases):
            verdicts.append(execute_case(spec, "cpu", config))
    finally:
        torch.set_num_threads(threads)
    for i, (spec, config) in enumerate(cases):
        path = tmp_path / f"repro{i}.py"
        path.write_text(render_repro(spec, device="cpu", config=config, title=f"case {i}"))
        paths.append(path)
    for (spec, config), verdict, (code, lines) in zip(cases, verdicts, run_repros(paths)):
        engine = engine_numbers(verdict)
        assert set(engine) >= set(spec.outputs), verdict
        assert parsed(lines) == engine, (config.backend, "\n".join(lines))
        assert code == (1 if verdict.status.value == "diverged" else 0), (verdict.status, lines)
    return verdicts


ALL_OPS = sorted(all_ops())
INT_OPS = [n for n in ALL_OPS if n in ("e8m0_encode", "quantize", "count_cmp")]


def test_repro_numbers_equal_the_engines_for_every_op_and_planted_bugs(tmp_path):
    cases = [
        # planted: one bf16 ULP on the first bf16 output; every op once, gradients included
        (wide_spec(ALL_OPS, "bfloat16", backward=True, variants=False), CompileConfig(backend="divfuzz.fuzzer.engine.planted:ulp_bump")),
        # planted: one step on the first uint8 output, near powers of two (e8m0's boundaries);
        # every choice of every op's params, in two graphs (one would pass the op cap); the int
        # ops in the first, so that one flip is planted
        *((wide_spec(half, "float32", recipe="near_pow2"), CompileConfig(backend="divfuzz.fuzzer.engine.planted:uint8_flip"))
          for half in (INT_OPS + [n for n in ALL_OPS if n not in INT_OPS][: len(ALL_OPS) // 2],
                       [n for n in ALL_OPS if n not in INT_OPS][len(ALL_OPS) // 2:])),
    ]
    assert {n.op for spec, _ in cases for n in spec.nodes} == set(ALL_OPS)
    verdicts = check_cases(cases, tmp_path)
    bumped = [o for o in verdicts[0].outputs if o.float_cmp and o.float_cmp.n_diff]
    flipped = [o.int_cmp for v in verdicts[1:] for o in v.outputs if o.int_cmp and o.int_cmp.flips]
    # The planted bugs are seen (so the equality above was checked on non-zero numbers).
    assert [(o.float_cmp.n_diff, o.float_cmp.max_ulp) for o in bumped if not o.name.startswith("grad:")] == [(1, 1)]
    assert [(c.flips, c.max_step) for c in flipped] == [(1, 1)]
    assert flipped[0].compiled_correct + flipped[0].eager_correct + flipped[0].neither_correct == 1
    assert any(o.name.startswith("grad:") for o in verdicts[0].outputs)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_repro_numbers_equal_the_engines_under_inductor_for_every_op_and_recipe(tmp_path, dtype):
    """The real Inductor (where the numbers differ for real), every op, several input recipes."""
    cases = [
        (wide_spec(ALL_OPS, dtype, shape=(64, 32), recipe=recipe, seed=seed), CompileConfig())
        for seed, recipe in enumerate(("normal", "near_pow2", "mixed_sign", "large_mean"))
    ]
    cases.append((wide_spec([n for n in ALL_OPS if all_ops()[n].differentiable], dtype, backward=True), CompileConfig()))
    verdicts = check_cases(cases, tmp_path)
    assert any(v.status.value == "diverged" for v in verdicts)
