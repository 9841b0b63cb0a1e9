"""Does packing K drawn graphs into one `torch.compile` call cut the compile cost per graph? (issue 41)

    python scripts/bench_pack.py --device cuda --graphs 48 --pack 1,4,8 --seed 0
    python scripts/bench_pack.py --device cpu --graphs 16 --pack 1,4,8 --seed 0 --repeats 2

The parent draws `--graphs` distinct specs from the campaign's own strategy (each slot's engine of
campaign seed `--seed`, `CampaignOptions.strategy(slot)` and `slot_engines`, skipping each slot's
first `--skip` draws, which are Hypothesis's simplest). Then each leg, one per K in `--pack`,
runs in a fresh process with its own empty Inductor and Triton cache folders, one compile thread
and one torch thread (`--threads`: what a worker of a 12-worker campaign on 16 cores gets):

- it pays the process's one-off compile costs on a small function of its own, untimed;
- it prepares every spec as a campaign case does (`prepare_case`: inputs, eager twice);
- it splits the specs that ran eagerly into packs of K, forward-only specs and backward specs
  apart (a pack is one inference graph or one training graph, as each member's own compile is),
  in drawn order;
- per pack it compiles ONE function whose inputs are the members' inputs concatenated and whose
  outputs are all members' outputs, under divfuzz's compile site (`compiled`, `CompileConfig()`:
  the compared-compile settings a campaign uses), runs it forward, then (for a backward pack) one
  backward over every member's outputs and inputs, timing each with its phase split
  (`divfuzz.fuzzer.engine.compile_phases.PhaseTimer`);
- then it judges each member's outputs under its own spec (`judged_verdict`), and runs each
  member's input siblings (`--inputs-per-compile`, 4 as in `divfuzz fuzz`) through the same packed
  compile and judges them too: a member whose group (it and its siblings) has a finding
  (`finding_of`) would be confirmed by compiling its spec alone.

K=1 is today's behaviour: each graph compiled alone. The parent prints, per leg, milliseconds per
graph for the forward compile and the backward compile, split by phase (median over `--repeats`
repeats, the legs of a repeat at once where the host has 4 cores per leg, else interleaved A B C A B C ...), the speed-up over K=1, how many packs failed to compile,
how many members' groups differ in output bits or verdicts from their own compile (K=1), how many
members' groups hold a finding, and the cost per graph a campaign would pay: the packs that
compiled, plus each failed pack's members compiled alone (the fallback) and each packed member
with a finding compiled alone (its confirmation), both at K=1's measured time ("net speed-up").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("dynamo", "aot_autograd", "inductor", "backend_compile", "autotune")


def draw_specs(device: str, graphs: int, seed: int, skip: int, slots: int) -> list[str]:
    """`graphs` distinct specs as a campaign of `slots` slots draws them: slot s's draws after its
    first `skip`, round-robin over the slots, in the order a campaign's slots would reach them."""
    # lazy: the parent alone draws; children never import Hypothesis's engines
    from divfuzz.fuzzer.campaign import campaign_options
    from divfuzz.fuzzer.campaign.loop import slots_first_specs

    options = campaign_options.build(device=device, out_dir=Path("."), inputs_per_compile=None, minimize=False, workers=1)
    by_slot = [[spec.to_json(indent=None) for spec in row]
               for row in slots_first_specs(options.strategy, seed, slots, -(-graphs // slots), skip=skip)]
    ordered = [spec for row in zip(*by_slot) for spec in row]  # slot 0's first, slot 1's first, ...
    return ordered[:graphs]


def digest_outputs(named) -> str:
    """A hash of named tensors' names, dtypes, shapes and bytes: equal only for the same bits."""
    # lazy: a leg's own process imports torch after its environment (cache folders, threads) is set
    import torch

    h = hashlib.sha256()
    for name, t in named:
        t = t.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            flat = t.contiguous().reshape(-1)
            if flat.dtype.is_floating_point or flat.dtype.is_complex or flat.dtype == torch.bool:
                flat = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
            h.update(flat.cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def pack_function(fns, sizes):
    """One function of the members' inputs concatenated, returning all members' outputs in order."""

    def packed(*flat):
        outs, at = [], 0
        for fn, n in zip(fns, sizes):
            outs.extend(fn(*flat[at:at + n]))
            at += n
        return tuple(outs)

    return packed


def member_run(fn, flat: list, sizes: list[int], outputs: list[int], j: int, case) -> list:
    """Member `j`'s named outputs (and, for a backward spec, its inputs' gradients) from the packed
    compiled `fn`, run with member j's inputs replaced by `case`'s (a sibling: same shapes and
    dtypes, so no new compile) and every other member's as they were."""
    # lazy: a leg's own process imports torch after its environment (cache folders, threads) is set
    import torch

    at = sum(sizes[:j])
    flat = flat[:at] + list(case.inputs) + flat[at + sizes[j]:]
    spec = case.spec
    with torch.enable_grad() if spec.backward else torch.no_grad():
        outs = fn(*flat)
    first = sum(outputs[:j])
    mine = outs[first:first + outputs[j]]
    named = [(n, o.detach()) for n, o in zip(spec.outputs, mine)]
    if spec.backward:
        pairs = [(o, cot) for o, cot in zip(mine, case.cots) if cot is not None and o.requires_grad]
        targets = [(t.name, x) for t, x in zip(spec.inputs, case.inputs) if t.requires_grad]
        if pairs and targets:
            grads = torch.autograd.grad([o for o, _ in pairs], [x for _, x in targets],
                                        [cot.to(o.dtype) for o, cot in pairs], allow_unused=True)
            named += [(f"grad:{name}", g) for (name, _), g in zip(targets, grads) if g is not None]
    return named


def child(args) -> None:
    """One leg: every prepared spec compiled in packs of `args.k` (see the module's docstring)."""
    # lazy: a leg's own process imports torch after its environment (cache folders, threads) is set
    import torch

    from divfuzz.fuzzer.engine.compile import compiled
    from divfuzz.fuzzer.engine.compile_phases import PhaseTimer
    from divfuzz.fuzzer.engine.execute import PreparedCase, judged_verdict, prepare_case
    from divfuzz.generators.build import build_callable
    from divfuzz.generators.input_siblings import input_siblings
    from divfuzz.generators.runtime import key_compile_caches_by_cpu_isa
    from divfuzz.generators.spec import GraphSpec
    from divfuzz.oracles.findings import finding_of
    from divfuzz.records.config import CompileConfig

    torch.set_num_threads(args.threads)
    device_type = torch.device(args.device).type
    if device_type == "cuda":
        torch.cuda.init()
    else:
        key_compile_caches_by_cpu_isa()

    def sync():
        if device_type == "cuda":
            torch.cuda.synchronize()

    config = CompileConfig()
    # The process's first compile pays Dynamo's and Inductor's imports and pool start-up: paid here, untimed.
    warm = torch.randn(8, 8, device=args.device, requires_grad=True)
    with compiled(lambda x: ((x * 3).sin().sum(-1),), config) as fn:
        torch.autograd.grad(fn(warm)[0].sum(), warm)
    sync()

    cases = []  # (spec index, the drawn spec's case, its siblings' cases that ran eagerly)
    for i, text in enumerate(line for line in Path(args.specs).read_text().splitlines() if line):
        spec = GraphSpec.from_json(text)
        case = prepare_case(spec, args.device)
        if isinstance(case, PreparedCase):
            siblings = [prepare_case(s, args.device) for s in input_siblings(spec, args.inputs_per_compile)]
            cases.append((i, case, [s for s in siblings if isinstance(s, PreparedCase)]))
    packs = []
    for backward in (False, True):
        members = [m for m in cases if m[1].spec.backward == backward]
        packs += [members[at:at + args.k] for at in range(0, len(members), args.k)]
    packs.sort(key=lambda pack: pack[0][0])

    results = []
    for pack in packs:
        specs = [c.spec for _, c, _ in pack]
        sizes = [len(c.inputs) for _, c, _ in pack]
        outputs = [len(s.outputs) for s in specs]
        packed = pack_function([build_callable(s, device_type) for s in specs], sizes)
        backward = specs[0].backward
        flat = [x for _, c, _ in pack for x in c.inputs]
        record = {"members": [i for i, _, _ in pack], "backward": backward, "error": None}
        forward_timer = PhaseTimer()
        t0 = time.perf_counter()
        try:
            with compiled(packed, config) as fn:
                with torch.enable_grad() if backward else torch.no_grad():
                    outs = fn(*flat)
                sync()
                record["forward_s"] = time.perf_counter() - t0
                record["forward_phases"] = forward_timer.phases()
                named_of = []
                for j, spec in enumerate(specs):
                    first = sum(outputs[:j])
                    named_of.append([(n, o.detach()) for n, o in zip(spec.outputs, outs[first:first + outputs[j]])])
                if backward:  # one backward over every member's outputs: one compile of the pack's backward
                    backward_timer = PhaseTimer()
                    t1 = time.perf_counter()
                    pairs, targets, owners = [], [], []
                    for j, (spec, (_, c, _)) in enumerate(zip(specs, pack)):
                        first = sum(outputs[:j])
                        mine = outs[first:first + outputs[j]]
                        pairs += [(o, cot) for o, cot in zip(mine, c.cots) if cot is not None and o.requires_grad]
                        for t, x in zip(spec.inputs, c.inputs):
                            if t.requires_grad:
                                targets.append(x)
                                owners.append((j, t.name))
                    if pairs and targets:
                        grads = torch.autograd.grad([o for o, _ in pairs], targets,
                                                    [cot.to(o.dtype) for o, cot in pairs], allow_unused=True)
                        for (j, name), g in zip(owners, grads):
                            if g is not None:
                                named_of[j].append((f"grad:{name}", g))
                    sync()
                    record["backward_s"] = time.perf_counter() - t1
                    record["backward_phases"] = backward_timer.phases()
                del outs
                # Each member's input siblings through the same compile, as a campaign's group (untimed).
                sibling_named = [[member_run(fn, flat, sizes, outputs, j, s) for s in siblings]
                                 for j, (_, _, siblings) in enumerate(pack)]
        except Exception as e:  # the pack's compile failed: its members would each compile alone
            record["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
            record["forward_s"] = time.perf_counter() - t0
            results.append(record)
            continue
        record["digests"], record["verdicts"], record["findings"] = [], [], []
        for (_, c, siblings), named, sib_named in zip(pack, named_of, sibling_named):
            digests, verdicts, findings = [], [], []
            for case, outs_of in ((c, named), *zip(siblings, sib_named)):
                digests.append(digest_outputs(outs_of))
                verdict = judged_verdict(case, outs_of)
                data = verdict.to_dict()
                data.pop("timings", None)
                verdicts.append(hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16])
                finding = finding_of(verdict)
                findings.append(None if finding is None else finding.kind.value)
            # per member: one hash of its group's bits and of its group's verdicts, and its group's findings
            record["digests"].append("-".join(digests))
            record["verdicts"].append("-".join(verdicts))
            record["findings"].append([f for f in findings if f is not None] or None)
        results.append(record)
    print(json.dumps({"prepared": len(cases), "packs": results}))


def start_leg(args, k: int, specs_file: Path, tmp: Path, run: int) -> tuple[subprocess.Popen, float]:
    """Leg K in a fresh process with its own empty compile caches (`finish_leg` reads its result)."""
    cache = tmp / f"cache-k{k}-run{run}"
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"),
               TORCHINDUCTOR_COMPILE_THREADS=str(args.threads), DIVFUZZ_WORKER_THREADS=str(args.threads))
    process = subprocess.Popen([sys.executable, __file__, "--child", "--k", str(k), "--specs", str(specs_file),
                                "--device", args.device, "--threads", str(args.threads),
                                "--inputs-per-compile", str(args.inputs_per_compile)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, time.perf_counter()


def finish_leg(k: int, process: subprocess.Popen, started: float) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"leg K={k} failed ({process.returncode}):\n{err[-4000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


def per_graph(leg: dict) -> dict[str, float]:
    """Milliseconds per compiled graph of a leg's packs that compiled: forward and backward wall,
    each by phase, "other" the rest of the wall (first runs, Dynamo's frame entry)."""
    ok = [p for p in leg["packs"] if p["error"] is None]
    graphs = sum(len(p["members"]) for p in ok)
    bwd_graphs = sum(len(p["members"]) for p in ok if p["backward"])
    out: dict[str, float] = {}
    for side, n in (("forward", graphs), ("backward", bwd_graphs)):
        packs = [p for p in ok if f"{side}_s" in p]
        total = sum(p[f"{side}_s"] for p in packs)
        phases = {ph: sum(p[f"{side}_phases"].get(ph, 0.0) for p in packs) for ph in PHASES}
        out[f"{side}"] = 1000 * total / max(1, n)
        for ph, s in phases.items():
            out[f"{side}:{ph}"] = 1000 * s / max(1, n)
        out[f"{side}:other"] = 1000 * max(0.0, total - sum(phases.values())) / max(1, n)
    # backward ms per graph of the whole leg (forward-only graphs cost 0 there), so totals add up
    out["backward_per_graph"] = out["backward"] * bwd_graphs / max(1, graphs)
    out["total"] = out["forward"] + out["backward_per_graph"]
    out["graphs"] = graphs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--graphs", type=int, default=16)
    ap.add_argument("--pack", default="1,4,8", help="comma-separated K values; 1 (each graph alone) is always run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repeats of every leg (medians reported)")
    ap.add_argument("--threads", type=int, default=1, help="compile threads and torch threads per leg")
    ap.add_argument("--skip", type=int, default=2, help="each slot's first draws left out (Hypothesis's simplest)")
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--inputs-per-compile", type=int, default=4,
                    help="each graph's input siblings run through its compile, as a campaign's (divfuzz fuzz's default 4)")
    ap.add_argument("--parallel", choices=("auto", "yes", "no"), default="auto",
                    help="run a repeat's legs at once (auto: where the host has 4 cores per leg's thread)")
    ap.add_argument("--json", help="write every leg's raw result here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--specs", help=argparse.SUPPRESS)
    ap.add_argument("--report", help="print the tables of a file that --json wrote, and run nothing")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.report:
        legs = {int(k): v for k, v in json.loads(Path(args.report).read_text()).items()}
        report(legs, sorted(legs))
        return
    ks = sorted({1, *(int(k) for k in args.pack.split(","))})
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    parallel = {"yes": True, "no": False}.get(args.parallel, cores >= 4 * len(ks) * args.threads)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="divfuzz-pack-") as d:
        tmp = Path(d)
        specs = draw_specs(args.device, args.graphs, args.seed, args.skip, args.slots)
        specs_file = tmp / "specs.jsonl"
        specs_file.write_text("\n".join(specs) + "\n")
        print(f"{len(specs)} specs drawn (campaign seed {args.seed}, {args.slots} slots, first {args.skip} draws of each "
              f"skipped) in {time.perf_counter() - t_start:.1f} s; device {args.device}, {args.threads} compile/torch "
              f"thread(s) per leg, legs K={','.join(map(str, ks))} x {args.repeats}, "
              f"{'in parallel' if parallel else 'one after the other'} ({cores} cores)", flush=True)
        legs: dict[int, list[dict]] = {k: [] for k in ks}
        for run in range(args.repeats):
            # In parallel, each leg on its own cores, where the host has cores to spare for all of
            # them; else one after the other (interleaved over the repeats).
            started = {k: start_leg(args, k, specs_file, tmp, run) for k in ks} if parallel else {}
            for k in ks:
                leg = finish_leg(k, *(started[k] if parallel else start_leg(args, k, specs_file, tmp, run)))
                legs[k].append(leg)
                g = per_graph(leg)
                print(f"  run {run} K={k}: {g['graphs']} graphs, forward {g['forward']:.0f} ms/graph, "
                      f"backward {g['backward_per_graph']:.0f} ms/graph, leg wall {leg['wall_s']:.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({str(k): v for k, v in legs.items()}))
    report(legs, ks)
    print(f"\ntotal wall {time.perf_counter() - t_start:.0f} s", flush=True)


def report(legs: dict[int, list[dict]], ks: list[int]) -> None:
    med = {k: {key: statistics.median(per_graph(leg)[key] for leg in legs[k]) for key in per_graph(legs[k][0])} for k in ks}
    spread = {k: [per_graph(leg)["total"] for leg in legs[k]] for k in ks}
    base = med[1]
    first_alone = {}  # spec index -> (digest, verdict, forward+backward ms of its compile alone)
    for p in legs[1][0]["packs"]:
        if p["error"] is None:
            first_alone[p["members"][0]] = (p["digests"][0], p["verdicts"][0])
    alone_runs: dict[int, list[float]] = {}  # spec index -> its compile alone (forward+backward ms), per repeat
    for leg in legs[1]:
        for p in leg["packs"]:
            alone_runs.setdefault(p["members"][0], []).append(1000 * (p.get("forward_s", 0.0) + p.get("backward_s", 0.0)))
    alone_ms = {i: statistics.median(runs) for i, runs in alone_runs.items()}
    print("\n## ms per compiled graph, by phase (median over repeats)\n")
    cols = ["forward", *(f"forward:{p}" for p in (*PHASES, "other")), "backward", *(f"backward:{p}" for p in (*PHASES, "other"))]
    print("| K | " + " | ".join(c.replace("forward:", "fwd ").replace("backward:", "bwd ") for c in cols) + " |")
    print("|" + " --- |" * (len(cols) + 1))
    for k in ks:
        print(f"| {k} | " + " | ".join(f"{med[k][c]:.0f}" for c in cols) + " |")
    print("\n(backward columns: per graph that has a backward; fwd/bwd 'other' = first run, frame entry, compile-site set-up)\n")
    print("| K | graphs | fwd+bwd ms/graph (runs) | speed-up vs K=1 | forward speed-up | packs failed "
          "| bits differ from alone | verdicts differ | members with a finding | ms/graph with fallback and confirmations | net speed-up |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in ks:
        leg = legs[k][0]
        packs = leg["packs"]
        failed = [p for p in packs if p["error"] is not None]
        # a failed pack costs its own time plus each member compiled alone (K=1's time)
        fallback = [1000 * p["forward_s"] + sum(alone_ms.get(i, 0.0) for i in p["members"]) for p in failed]
        members = sum(len(p["members"]) for p in packs)
        ok_ms = med[k]["total"] * med[k]["graphs"]
        bits = verdicts = compared = findings = 0
        confirm_ms = 0.0  # a packed member's finding is confirmed by its spec compiled alone (K=1's time)
        for p in packs:
            if p["error"] is not None:
                continue
            for i, dg, vd, fd in zip(p["members"], p["digests"], p["verdicts"], p["findings"]):
                findings += fd is not None
                if k > 1 and fd is not None:
                    confirm_ms += alone_ms.get(i, 0.0)
                if i in first_alone:
                    compared += 1
                    bits += dg != first_alone[i][0]
                    verdicts += vd != first_alone[i][1]
        runs = ", ".join(f"{x:.0f}" for x in spread[k])
        net = (ok_ms + sum(fallback) + confirm_ms) / max(1, members)
        print(f"| {k} | {med[k]['graphs']:.0f} | {med[k]['total']:.0f} ({runs}) | {base['total'] / med[k]['total']:.2f}x "
              f"| {base['forward'] / med[k]['forward']:.2f}x | {len(failed)} of {len(packs)} "
              f"| {bits if k > 1 else '-'} of {compared} | {verdicts if k > 1 else '-'} of {compared} | {findings} of {members} "
              f"| {net:.0f} | {base['total'] / net:.2f}x |")
        for p in failed:
            print(f"    K={k} pack {p['members']}: {p['error']}")
    print("\nA packed member with a finding is compiled again alone, so packing K pays only while the share of "
          "graphs with a finding stays below 1 - (K's ms/graph) / (K=1's): "
          + ", ".join(f"K={k}: {max(0.0, 1 - med[k]['total'] / base['total']):.2f}" for k in ks if k > 1)
          + f"; measured here: {sum(1 for p in legs[1][0]['packs'] for f in p.get('findings', []) if f)} of "
          f"{sum(len(p['members']) for p in legs[1][0]['packs'])} graphs.")


if __name__ == "__main__":
    main()
