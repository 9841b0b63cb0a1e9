"""Measure what a backend compiles: one one-op graph per registered op, data dtype and mode
(forward; forward + backward), compiled under BACKEND on the CPU through divfuzz's own execute
path. Prints a table (supported, or the error type) and, with --json FILE, the raw results.

    python scripts/probe_backend_ops.py onnxrt [--ops a,b] [--dtypes float32] [--json out.json]

The graph of each cell is the smallest one Hypothesis finds with that op, dtype and mode (no
autocast), so the cells are deterministic. `records/backends.py` declares what this measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

from hypothesis import HealthCheck, find, settings

DTYPES = ("float32", "bfloat16", "float16")


def one_op_spec(op: str, dtype: str, backward: bool):
    from divfuzz.generators.strategies import graph_specs

    strategy = graph_specs(min_ops=1, max_ops=1, ops=(op,), dtypes=(dtype,), allow_autocast=False, allow_backward=backward)
    return find(
        strategy,
        lambda s: s.backward == backward and s.inputs[0].dtype == dtype,
        settings=settings(database=None, max_examples=2000, suppress_health_check=list(HealthCheck)),
    )


def probe(backend: str, ops, dtypes, modes, on_row=lambda rows: None) -> list[dict]:

    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.outcomes import Status

    config = CompileConfig(backend=backend)
    rows = []
    for op in ops:
        for dtype in dtypes:
            for backward in modes:
                t0 = time.perf_counter()
                try:
                    spec = one_op_spec(op, dtype, backward)
                except Exception as e:  # no such graph (e.g. an op that has no backward)
                    rows.append({"op": op, "dtype": dtype, "backward": backward, "result": f"no-graph({type(e).__name__})"})
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    verdict = execute_case(spec, "cpu", config)
                ok = verdict.status in (Status.OK, Status.DIVERGED)
                result = "supported" if ok else f"{verdict.status.value}:{verdict.error_type}"
                rows.append({"op": op, "dtype": dtype, "backward": backward, "result": result,
                             "status": verdict.status.value, "message": (verdict.error_message or "")[:300],
                             "seconds": round(time.perf_counter() - t0, 2)})
                on_row(rows)
                print(f"{op:18s} {dtype:9s} {'bwd' if backward else 'fwd'} {result}  ({rows[-1]['seconds']} s)", flush=True)
    return rows


def main() -> int:
    from divfuzz.generators.registry import all_ops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    parser.add_argument("--ops", default=None)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--modes", default="fwd,bwd")
    parser.add_argument("--json", default=None)
    a = parser.parse_args()
    import torch

    ops = a.ops.split(",") if a.ops else sorted(all_ops())
    modes = [m == "bwd" for m in a.modes.split(",")]
    def save(rows):  # after every cell, so that a long probe can be read while it runs
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"backend": a.backend, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "rows": rows}, f, indent=1)

    rows = probe(a.backend, ops, a.dtypes.split(","), modes, on_row=save)
    save(rows)
    print(f"\n# {a.backend} on CPU, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    for r in rows:
        if r["result"] != "supported":
            print(f"unsupported: {r['op']} {r['dtype']} {'bwd' if r['backward'] else 'fwd'}: {r['result']}: {r.get('message', '')[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
