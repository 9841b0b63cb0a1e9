"""A report's memory against the store's size (issue 40, item 8): builds stores of N buckets through
divfuzz's own store API, then times `divfuzz report --html` and `divfuzz report` (markdown) on each
under `/usr/bin/time -v`, printing peak RSS, wall time and the output's size.

    python scripts/big_store_bench.py --buckets 10000 100001 [--work /tmp/divfuzz-big] [--rebuild]

A store of N buckets holds N + 11 cases (the issue's store: 100,001 buckets, 100,012 cases). Its
buckets mix what a nightly holds: raw bug, suspect, noise and eager-worse buckets (one root cause
each), buckets a mechanism explains (one root cause per mechanism: a tenth of the store), minimized
and attributed bug buckets that fold into 7 root causes by culprit, and by-design buckets folded
into 13 culprits. Each store is built once into `--work/N/` and reused (`--rebuild` builds it again).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = {
    "schema_version": 1,
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32", "requires_grad": False, "init": "data"}],
    "nodes": [{"name": "v1", "op": "div", "inputs": ["x", "x"], "params": {"rounding_mode": "floor"}, "dtype": "float32",
               "shape": [4, 8]}],
    "outputs": ["v1"],
    "recipe": {"kind": "normal", "seed": 0},
}


def case_verdict() -> dict:
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict

    f = FloatComparison(dtype="float32", numel=32, n_diff=3, max_ulp=9, ulp_histogram=(("1", 2), ("8+", 1)),
                        nan_inf_mismatch=0, triage="compiled-worse", n_worse=3, n_closer=0, rmse_eager=1e-6,
                        rmse_compiled=4e-5, max_abs_diff=1e-4, error_sample=tuple((0.5 + i, 9.0 + i) for i in range(8)))
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=f),),
                   timings=(("compile", 0.8), ("eager", 0.1))).to_dict()


def bucket_key(b: int):
    """Bucket b's key, its case's reason, and the analysis stored on it (minimized, culprit) or None."""
    from divfuzz.records.buckets import BucketKey, CulpritKey

    kind = b % 10
    ops = (f"op{b}",)
    rule, mechanism, culprit, analysis = "float-gross-worse", "", None, None
    if kind == 4:
        rule = "rmse-worse"  # suspect
    elif kind == 5:
        rule = "few-ulps"  # noise
    elif kind == 6:
        rule = "eager-gross-worse"  # eager-worse
    elif kind == 7:
        mechanism = "tie"  # noise, one root cause per mechanism
    elif kind == 8:  # a bug minimized and attributed: 7 root causes by culprit
        culprit = CulpritKey(stage="inductor", subsystem="lowering", detail=f"aten.div {b % 7}")
        minimized = {"ops_before": 5, "ops_after": 1, "wall_s": 2.0, "spec": SPEC}
        analysis = (minimized, {"summary": f"inductor lowering of aten.div ({b % 7})", "stage": "inductor"})
    elif kind == 9:
        rule, culprit = "precision-knob", CulpritKey(stage="inductor", detail=f"knob {b % 13}")  # by-design
    key = BucketKey("fp32-ulp", "float32", "cpu", ops, rule=rule, mechanism=mechanism, culprit=culprit)
    return key, analysis


def build(folder: Path, n_buckets: int, extra_cases: int = 11) -> None:
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.oracles.severity_policy import bucket_severity, key_severity

    folder.mkdir(parents=True)
    verdict, spec = case_verdict(), json.dumps(SPEC)
    store = Store(folder / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
        total = n_buckets + extra_cases
        for start in range(0, total, 10_000):
            with store.transaction():
                for i in range(start, min(total, start + 10_000)):
                    b = i if i < n_buckets else i - n_buckets
                    key, analysis = bucket_key(b)
                    severity = key_severity(key).value
                    _, bucket_id, new = store.add_case(
                        run_id=run_id, slot=0, idx=i, spec_digest=f"d{i}", spec_json=spec, device="cpu", config={},
                        verdict=verdict, score=1.0, wall_s=1.0, finding_kind="fp32-ulp", key=key, triage="compiled-worse",
                        judged=bucket_severity(key, {"severity": severity, "rule": key.rule, "output": "v1", "detail": f"case {i}"}))
                    if new and analysis is not None:
                        store.set_bucket_analysis(bucket_id, minimized=analysis[0], culprit=analysis[1])
        store.finish_run(run_id)
    finally:
        store.close()


def measure(argv: list[str], stdout: Path) -> dict:
    """Peak RSS (MB) and wall seconds of one divfuzz command, from `/usr/bin/time -v`."""
    with open(stdout, "w") as out:
        ran = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "divfuzz.fuzzer", *argv], stdout=out,
                             stderr=subprocess.PIPE, text=True)
    if ran.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {ran.returncode}:\n{ran.stderr[-3000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", ran.stderr).group(1))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", ran.stderr).group(1)
    seconds = sum(float(part) * 60 ** i for i, part in enumerate(reversed(clock.split(":"))))
    return {"rss_mb": rss_kb / 1024, "wall_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--buckets", type=int, nargs="+", default=[10_000, 100_001])
    parser.add_argument("--work", type=Path, default=Path("/tmp/divfuzz-big"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--only", choices=("html", "markdown"), default=None)
    args = parser.parse_args()
    rows = []
    for n in args.buckets:
        folder = args.work / str(n)
        if args.rebuild and folder.exists():
            shutil.rmtree(folder)
        if not folder.exists():
            t0 = time.perf_counter()
            build(folder, n)
            print(f"built {folder}: {n:,} buckets, {n + 11:,} cases in {time.perf_counter() - t0:.0f} s", flush=True)
        for name, argv, out in (
            ("report --html", ["report", "--out", str(folder), "--html", str(folder / "report.html")], folder / "html.stdout"),
            ("report", ["report", "--out", str(folder)], folder / "report.md"),
        ):
            if args.only and (name == "report") != (args.only == "markdown"):
                continue
            got = measure(argv, out)
            written = folder / "report.html" if name == "report --html" else out
            rows.append((n, name, got["rss_mb"], got["wall_s"], written.stat().st_size / 2**20))
            print(f"{n:>8,} buckets  {name:<14} peak RSS {got['rss_mb']:8.1f} MB  wall {got['wall_s']:7.1f} s  "
                  f"output {rows[-1][4]:7.1f} MB", flush=True)
    print("\n| buckets | command | peak RSS (MB) | wall (s) | output (MB) |\n| --- | --- | --- | --- | --- |")
    for n, name, rss, wall, size in rows:
        print(f"| {n:,} | `divfuzz {name}` | {rss:.0f} | {wall:.1f} | {size:.1f} |")


if __name__ == "__main__":
    main()
