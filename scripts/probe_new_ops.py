"""Run each op of issue 24 (`divfuzz.generators.ops.EDGE_OPS`) alone through the real Inductor and print
its severity: a new op that reads as a bug on a standard random input is a false positive to fix
(or a real divergence to report).

For each (op, dtype): one graph holding the op once per distinct params set its own `draw_params`
draws (up to `--variants`), every node an output, on `normal` inputs of `--shape`, with the
backward when the op has one; `divfuzz.fuzzer.engine.execute.execute_case` runs it eager / compiled / fp64
and `divfuzz.oracles.severity_policy.severity_of` rates the verdict. Prints one line per (op, dtype): the worst
severity, its rule and output, and its detail.

    python scripts/probe_new_ops.py --dtypes float32,bfloat16 [--ops argmax,sort] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from divfuzz.fuzzer.engine.execute import execute_case
from divfuzz.generators.opdef import Meta
from divfuzz.generators.ops import EDGE_OPS
from divfuzz.generators.registry import get_op
from divfuzz.generators.spec import InputRecipe
from divfuzz.generators.strategies import op_params, op_spec
from divfuzz.generators.validate import validate_spec
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.config import CompileConfig


def distinct_params(op_name: str, metas: tuple[Meta, ...], limit: int) -> list[dict]:
    """Up to `limit` distinct params sets the op draws on `metas`, the same ones every run."""
    found: list[dict] = []

    @seed(0)
    @settings(max_examples=10 * limit, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(op_params(op_name, metas))
    def collect(p):
        if p not in found and len(found) < limit:
            found.append(p)

    collect()
    return found


def probe(op_name: str, dtype: str, shape: tuple[int, ...], variants: int, seed_value: int) -> dict:
    op = get_op(op_name)
    metas = tuple(Meta(shape, dtype) for _ in range(op.arity))
    params = distinct_params(op_name, metas, variants)
    spec = validate_spec(op_spec(op_name, params, dtype, shape, recipe=InputRecipe("normal", seed_value), backward=True))
    t0 = time.perf_counter()
    verdict = execute_case(spec, "cpu", CompileConfig())
    reason = severity_of(verdict)
    return {
        "op": op_name,
        "dtype": dtype,
        "backward": spec.backward,
        "variants": len(params),
        "status": verdict.status.value,
        "severity": reason.severity.value if reason else "none",
        "rule": reason.rule if reason else "-",
        "output": reason.output if reason else "-",
        "detail": reason.detail if reason else "",
        "params": params[[n.name for n in spec.nodes].index(reason.output)] if reason and reason.output in spec.outputs else None,
        "wall_s": round(time.perf_counter() - t0, 2),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--ops", default=",".join(EDGE_OPS))
    parser.add_argument("--shape", default="32,64", help="the data inputs' shape, e.g. 32,64 or 8,4,64")
    parser.add_argument("--variants", type=int, default=4, help="distinct params sets per op (one node each)")
    parser.add_argument("--seed", type=int, default=0, help="the normal recipe's seed")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    shape = tuple(int(d) for d in args.shape.split(","))
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in EDGE_OPS]
    if unknown:
        print(f"probe_new_ops: --ops names ops outside EDGE_OPS: {unknown}", file=sys.stderr)
        return 2
    rows = []
    print(f"{'op':22} {'dtype':9} {'bwd':4} {'severity':9} {'rule':28} {'output':8} detail")
    for dtype in args.dtypes.split(","):
        for op_name in ops:
            row = probe(op_name, dtype, shape, args.variants, args.seed)
            rows.append(row)
            print(f"{row['op']:22} {row['dtype']:9} {'yes' if row['backward'] else 'no':4} {row['severity']:9} "
                  f"{row['rule']:28} {row['output']:8} {row['detail'][:150]}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    bugs = [r for r in rows if r["severity"] == "bug"]
    print(f"{len(rows)} probes, {len(bugs)} rated bug: {[(r['op'], r['dtype']) for r in bugs]}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
