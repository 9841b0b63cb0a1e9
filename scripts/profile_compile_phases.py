"""Where a campaign case's compile time goes, per Inductor phase, under each compile setting.

    python scripts/profile_compile_phases.py --device cuda --cases 120 --procs 12 --seed 11 \
        --variants pointwise1,pointwise1,compared,compared

The parent draws `--cases` specs from the campaign's own strategy (`CampaignOptions.strategy`,
the slots' Hypothesis engines, seed `--seed`), then for each variant runs `--procs` fresh worker
processes at once (as a campaign's slots: compile threads and torch threads split between them),
each on every `procs`-th spec, with a fresh Inductor/Triton cache per variant. Each child runs
`execute_case` per spec and reports its spans, the delta of torch's own per-phase compile timers
(`torch._dynamo.utils.compilation_time_metrics`: Dynamo, AOT autograd, lowering, Triton
compile, the autotuner's on-device benchmarks...) and the verdict without its timings.

It prints, per variant: wall, cases/s, the children's start-up, compile forward/backward per case,
the phases that cost most, and how many verdicts differ from the first variant's (run the first
variant twice to see what differs between two runs of the same setting: on CUDA a reduction's
kernel config is picked by timing it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Per variant: which of divfuzz's compared-compile settings apply (`records.config.COMPARED_COMPILE`:
# "none", "neutral" = NUMERICS_NEUTRAL alone, "compared" = all of it), further Inductor settings,
# (dotted key, value), and environment variables the children start with (over the campaign's own
# split of the cores).
VARIANTS = {
    "default": ("none", (), {}),  # torch's defaults, as divfuzz compiled before NUMERICS_NEUTRAL
    "pointwise1": ("neutral", (), {}),  # no pointwise autotuning; reductions' configs timed
    # and each reduction compiled with one config, the one Inductor's deterministic mode picks by
    # a fixed rule (`filter_reduction_configs_for_determinism`), and nothing else of that mode
    "compared": ("compared", (), {}),  # divfuzz's compile now
    "deterministic": ("none", (("deterministic", True),), {}),
    # a compile-subprocess pool of 4 per process (the campaign's split gives 1): kernels compile in parallel
    "threads4": ("compared", (), {"TORCHINDUCTOR_COMPILE_THREADS": "4"}),
    # no FX-graph cache and no AOT-autograd cache: neither their keys (the graph pickled and
    # hashed) nor their writes, for a campaign whose graphs rarely repeat
    "nocaches": ("compared", (), {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}),
    # every Triton kernel named `triton_` in its source (the wrapper keeps descriptive names):
    # the same kernel text in two graphs is then one source file, one Triton cache entry and,
    # within a process, one compiled kernel (Inductor's own "maximize caching" setting)
    "samenames": ("compared", (("triton.unique_kernel_names", False),), {}),
    # Triton without debug line info (no DI scope pass in LLVM, ptxas told to drop debug info):
    # what a kernel computes is unchanged, only the tables that map it back to its source
    "nolineinfo": ("compared", (), {"TRITON_DISABLE_LINE_INFO": "1"}),
    # the objects alive after the imports moved out of the garbage collector's reach (gc.freeze):
    # a full collection then scans only what the compiles made
    "gcfreeze": ("compared", (), {"PROFILE_PHASES_GC_FREEZE": "1"}),
}


def draw_specs(device: str, cases: int, seed: int) -> list[str]:
    """`cases` distinct specs as the campaign's slots 0..11 draw them (each slot's first
    `cases / 12` specs that no earlier slot drew)."""
    from divfuzz.fuzzer.campaign import campaign_options
    from divfuzz.fuzzer.campaign.loop import slots_first_specs

    # The strategy does not depend on inputs per compile, minimization or workers.
    strategy = campaign_options.build(device=device, out_dir=Path("."), inputs_per_compile=1, minimize=False, workers=1).strategy()
    rows = slots_first_specs(lambda slot: strategy, seed, 12, -(-cases // 12))
    specs = [spec.to_json(indent=None) for row in rows for spec in row]
    return specs[:cases]


def child(args) -> None:
    threads = int(os.environ.get("DIVFUZZ_WORKER_THREADS", "1"))
    t0 = time.perf_counter()
    import torch
    import torch._inductor.config as ic
    from torch._dynamo.utils import compilation_time_metrics

    import divfuzz.fuzzer.engine.compile as compile_site
    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.generators.spec import GraphSpec
    from divfuzz.records.config import COMPARED_COMPILE, NUMERICS_NEUTRAL, CompileConfig

    torch.set_num_threads(threads)
    base, settings, _ = VARIANTS[args.variant]
    compile_site.COMPARED_COMPILE = {"none": (), "neutral": NUMERICS_NEUTRAL, "compared": COMPARED_COMPILE}[base]
    for key, value in settings:
        obj = ic
        *parts, last = key.split(".")
        for p in parts:
            obj = getattr(obj, p)
        setattr(obj, last, value)
    if args.device.startswith("cuda"):
        torch.cuda.init()
    if os.environ.get("PROFILE_PHASES_GC_FREEZE") == "1":
        # lazy: only the gcfreeze variant
        import gc

        gc.collect()
        gc.freeze()
    started = time.perf_counter() - t0
    specs = [line for line in Path(args.specs).read_text().splitlines() if line][args.shard::args.procs]
    out = []
    profiler = None
    for i, text in enumerate(specs):
        if i == 1 and args.cprofile:  # later cases only: the first one's imports are start-up
            # lazy: a profiling run's own tool
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        spec = GraphSpec.from_json(text)
        compilation_time_metrics.clear()  # Dynamo's reset (each compile's start) may clear it too: this case's alone
        before = _cache_counters()
        t, c = time.perf_counter(), os.times()
        verdict = execute_case(spec, args.device, CompileConfig())
        wall, c2 = time.perf_counter() - t, os.times()
        cpu = sum(c2[:4]) - sum(c[:4])  # this process's and its waited children's (ptxas) CPU seconds
        phases = {k: sum(v) for k, v in compilation_time_metrics.items() if sum(v) > 0}
        after = _cache_counters()
        caches = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        d = verdict.to_dict()
        spans = d.pop("timings", {})
        out.append({"digest": spec.digest(), "wall": wall, "cpu": cpu, "spans": spans, "phases": phases, "caches": caches, "first": i == 0,
                    "verdict": json.dumps(d, sort_keys=True)})
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(Path(args.cprofile) / f"{args.variant}-{args.shard}.prof"))
    print(json.dumps({"startup": started, "cases": out}))


def _cache_counters() -> dict[str, int]:
    """torch's cache hit/miss counters so far in this process (FX graph, AOT autograd, Triton)."""
    from torch._dynamo.utils import counters

    return {f"{group}.{name}": n for group in ("inductor", "aot_autograd") for name, n in counters[group].items()
            if "cache" in name}


def run_variant(args, variant: str, specs_file: Path, tmp: Path, n: int) -> dict:
    cache = (Path(args.keep_caches) if args.keep_caches else tmp) / f"cache-{variant}-{n}"
    profiles = tmp / f"profiles-{variant}-{n}"
    profiles.mkdir(exist_ok=True)
    # the children import divfuzz as this process does (an install, or a PYTHONPATH the caller set)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), PYTHONPATH=path,
               DIVFUZZ_WORKER_THREADS=str(max(1, (os.cpu_count() or 1) // args.procs)),
               TORCHINDUCTOR_COMPILE_THREADS=str(max(1, (os.cpu_count() or 1) // args.procs)))
    env.update(VARIANTS[variant][2])
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--variant", variant, "--specs", str(specs_file),
                               "--shard", str(s), "--procs", str(args.procs), "--device", args.device]
                              + (["--cprofile", str(profiles)] if args.cprofile else []),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in range(args.procs)]
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"child failed ({p.returncode}): {err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.monotonic() - t0
    if args.cprofile:
        report_profiles(sorted(profiles.glob("*.prof")), Path(args.cprofile) / f"{variant}-{n}.prof")
    return {"wall": wall, "startup": [r["startup"] for r in results], "cases": [c for r in results for c in r["cases"]]}


def report_profiles(files: list[Path], merged: Path) -> None:
    """Merge the children's cProfile files into `merged` and print the functions that cost most
    (all processes' later cases together; cProfile slows Python-heavy code, so read shares, not seconds)."""
    # lazy: a profiling run's own tool
    import pstats

    if not files:
        return
    merged.parent.mkdir(parents=True, exist_ok=True)
    stats = pstats.Stats(*map(str, files))
    stats.dump_stats(str(merged))
    for order in ("cumulative", "tottime"):
        print(f"\n### cProfile, by {order} (all {len(files)} processes)", flush=True)
        stats.sort_stats(order).print_stats(45)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--procs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--variants", default="pointwise1,pointwise1,compared,compared")
    ap.add_argument("--dump", help="a folder: each variant's verdicts go to <variant>-<n>.json there")
    ap.add_argument("--cprofile", help="a folder: profile each child's later cases with cProfile, merged per variant there")
    ap.add_argument("--keep-caches", help="a folder: each variant's Inductor/Triton cache is kept there (cache-<variant>-<n>)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--variant", default="default")
    ap.add_argument("--specs")
    ap.add_argument("--shard", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="divfuzz-phases-") as d:
        tmp = Path(d)
        specs = draw_specs(args.device, args.cases, args.seed)
        specs_file = tmp / "specs.jsonl"
        specs_file.write_text("\n".join(specs) + "\n")
        print(f"{len(specs)} specs (seed {args.seed}), {args.procs} processes per variant, device {args.device}", flush=True)
        first = None
        for n, variant in enumerate(args.variants.split(",")):
            r = run_variant(args, variant, specs_file, tmp, n)
            cases = r["cases"]
            warm = [c for c in cases if not c["first"]]
            fwd = [c["spans"].get("compile", 0.0) - c["spans"].get("compile_backward", 0.0) for c in warm]
            bwd = [c["spans"].get("compile_backward", 0.0) for c in warm]
            phases: Counter = Counter()
            for c in warm:
                phases.update(c["phases"])
            verdicts = {c["digest"]: c["verdict"] for c in cases}
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                (Path(args.dump) / f"{variant}-{n}.json").write_text(json.dumps(verdicts, sort_keys=True))
            if first is None:
                first = verdicts
            differ = sum(first.get(k) != v for k, v in verdicts.items())
            print(f"\n## {variant} (run {n}): {len(cases)} cases in {r['wall']:.1f} s = {len(cases) / r['wall']:.2f} cases/s; "
                  f"start-up (import+init) mean {statistics.mean(r['startup']):.1f} s", flush=True)
            print(f"first case per process: mean wall {statistics.mean(c['wall'] for c in cases if c['first']):.2f} s; "
                  f"later cases: wall {statistics.mean(c['wall'] for c in warm):.2f} s, compile fwd {statistics.mean(fwd):.3f} s, "
                  f"bwd {statistics.mean(bwd):.3f} s per case, CPU {statistics.mean(c['cpu'] for c in warm):.2f} s per case")
            print(f"verdicts differing from the first variant's: {differ} of {len(verdicts)}")
            caches: Counter = Counter()
            for c in warm:
                caches.update(c.get("caches", {}))
            if caches:
                print("cache counters over the later cases: " + ", ".join(f"{k} {v}" for k, v in sorted(caches.items())))
            print("top phases (seconds per later case; nested phases overlap):")
            for name, s in phases.most_common(24):
                print(f"  {s / max(1, len(warm)):8.3f}  {name}")


if __name__ == "__main__":
    main()
