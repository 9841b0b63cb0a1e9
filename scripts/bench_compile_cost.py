"""What cuts compile time per case without changing what is compiled (issue 11's compile-cost study).

    python scripts/bench_compile_cost.py [--device cpu|cuda] [--cases 24] [--workers 1] [--seed 7] [--batch 1,4,8]

Part A runs the same real campaign (`divfuzz fuzz --no-minimize --max-cases N --seed S`, so the
very same cases) under each setting, each with a fresh private Inductor cache, and reads the
compile time of every case from the store:
- `default`: torch's defaults (FX graph and AOT autograd caches on, `compile_threads` from cores);
- `threads1`: `TORCHINDUCTOR_COMPILE_THREADS=1` (no compile subprocess pool per worker);
- `nocache`: the FX graph and AOT autograd caches off;
- `warm`: `default` again on the cache the first `default` run left (a resume, a replay, the gate).

Part B takes those cases' specs from the store and compiles them in one fresh process: each
alone, then K at a time as one program (the K graphs called one after the other inside one
function, combo kernels off), and checks that every graph's outputs and gradients are bit
identical to its own compile. It prints seconds per graph for each K and the mismatches.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {
    "default": {},
    "threads1": {"TORCHINDUCTOR_COMPILE_THREADS": "1"},
    "nocache": {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"},
}


def campaign(device: str, cases: int, workers: int, seed: int, cache: Path, out: Path, env_extra: dict) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **env_extra)
    cmd = [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", device, "--workers", str(workers), "--max-cases", str(cases),
           "--seed", str(seed), "--no-minimize", "--no-live", "--out", str(out)]
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"divfuzz exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    with sqlite3.connect(out / "divfuzz.sqlite") as db:
        rows = db.execute("SELECT verdict_json FROM cases ORDER BY slot, idx").fetchall()
        started = db.execute("SELECT min(started_at) FROM runs").fetchone()[0]
        last = db.execute("SELECT max(created_at) FROM cases").fetchone()[0]
    compile_s = [dict(json.loads(v).get("timings", [])).get("compile", 0.0) for (v,) in rows]
    return {"cases": len(rows), "wall_s": wall, "span_s": last - started, "compile_s": compile_s}


def part_a(args, tmp: Path) -> Path:
    print(f"## Part A: {args.cases} cases, {args.workers} worker(s), seed {args.seed}, device {args.device}\n", flush=True)
    print("| setting | cases | compile s per case (mean) | median | cases/s (first to last case) |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    store = None
    for name, extra in SETTINGS.items():
        cache, out = tmp / f"cache-{name}", tmp / f"out-{name}"
        r = campaign(args.device, args.cases, args.workers, args.seed, cache, out, extra)
        print(f"| {name} | {r['cases']} | {statistics.mean(r['compile_s']):.3f} | {statistics.median(r['compile_s']):.3f} "
              f"| {r['cases'] / r['span_s']:.2f} |", flush=True)
        if name == "default":
            store = out / "divfuzz.sqlite"
            w = campaign(args.device, args.cases, args.workers, args.seed, cache, tmp / "out-warm", {})
            print(f"| warm (default's cache again) | {w['cases']} | {statistics.mean(w['compile_s']):.3f} "
                  f"| {statistics.median(w['compile_s']):.3f} | {w['cases'] / w['span_s']:.2f} |", flush=True)
    return store


def part_b(args, store: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_CACHE_DIR=str(store.parent.parent / "cache-b"))
    code = ("import sys; sys.argv = sys.argv[:1] + sys.argv[2:]; "
            "from scripts.bench_compile_cost import batching_main; batching_main()")
    subprocess.run([sys.executable, "-c", code, "--", str(store), args.device, args.batch], env=env, cwd=ROOT, check=True)


def batching_main() -> None:
    """In a fresh process: compile the store's specs alone, then K at a time; compare bits."""
    import torch

    from divfuzz.fuzzer.engine.compile import compiled
    from divfuzz.fuzzer.engine.execute import prepare_case
    from divfuzz.generators.build import build_callable
    from divfuzz.generators.validate import load_spec
    from divfuzz.oracles.ulp import bitwise_equal
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.verdict import Verdict

    store, device, batch = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3].split(",")]
    with sqlite3.connect(store) as db:
        texts = [t for (t,) in db.execute("SELECT spec_json FROM cases ORDER BY slot, idx")]
    config = CompileConfig(inductor=(("combo_kernels", False),))
    device_type = torch.device(device).type
    cases = []
    for i, text in enumerate(texts):
        spec = load_spec(text, source=f"case {i}")
        case = prepare_case(spec, device)
        if not isinstance(case, Verdict):
            cases.append((spec, case))
    print(f"\n## Part B: {len(cases)} graphs that run eagerly, compiled alone and K at a time\n", flush=True)

    def run_group(group):
        """The group's graphs as one compiled program; each graph's named outputs and gradients."""
        fns = [build_callable(spec, device_type) for spec, _ in group]
        sizes = [len(case.inputs) for _, case in group]

        def program(*flat):
            outs, at = [], 0
            for fn, n in zip(fns, sizes):
                outs.append(tuple(fn(*flat[at:at + n])))
                at += n
            return outs

        flat = [x for _, case in group for x in case.inputs]
        with compiled(program, config) as fn:
            backward = any(spec.backward for spec, _ in group)
            with torch.enable_grad() if backward else torch.no_grad():
                outs = fn(*flat)
            results, at = [], 0
            for (spec, case), out in zip(group, outs):
                named = [(n, o.detach()) for n, o in zip(spec.outputs, out)]
                if spec.backward:
                    ins = flat[at:at + len(case.inputs)]
                    pairs = [(o, c) for o, c in zip(out, case.cots) if c is not None and o.requires_grad]
                    targets = [(t.name, x) for t, x in zip(spec.inputs, ins) if t.requires_grad]
                    if pairs and targets:
                        grads = torch.autograd.grad([o for o, _ in pairs], [x for _, x in targets],
                                                    [c.to(o.dtype) for o, c in pairs], allow_unused=True, retain_graph=True)
                        named += [(f"grad:{n}", g) for (n, _), g in zip(targets, grads) if g is not None]
                at += len(case.inputs)
                results.append(named)
            if device_type == "cuda":
                torch.cuda.synchronize()
        return results

    run_group(cases[:1])  # the process's first compile pays one-off imports and pool start-up: untimed
    alone = {}
    print("| K | graphs | compile+run s per graph | graphs with any bit differing from their own compile |")
    print("| --- | --- | --- | --- |", flush=True)
    for k in batch:
        t0 = time.perf_counter()
        mismatched = failed = 0
        for start in range(0, len(cases), k):
            group = cases[start:start + k]
            try:
                results = run_group(group)
            except Exception as e:  # a compile error of one graph fails its whole group
                failed += len(group)
                print(f"  K={k} group at {start}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            for j, named in enumerate(results):
                key = start + j
                if k == 1:
                    alone[key] = named
                elif key in alone:
                    ok = len(named) == len(alone[key]) and all(
                        bitwise_equal(a, b) for (_, a), (_, b) in zip(named, alone[key]))
                    mismatched += not ok
        per = (time.perf_counter() - t0) / max(1, len(cases))
        print(f"| {k} | {len(cases) - failed} | {per:.3f} | {mismatched if k > 1 else '-'} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", type=int, default=24)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--batch", default="1,4,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="divfuzz-compile-cost-") as tmp:
        store = part_a(args, Path(tmp))
        part_b(args, store)


if __name__ == "__main__":
    main()
