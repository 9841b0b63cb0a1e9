"""Does one graph on one input get one answer from the campaign's path and from `minimize --module`'s?

    python scripts/path_agreement.py [--specs 40] [--seed 0] [--max-ops 4] [--device cpu]

Draws specs with the campaign's strategy (forward only, no autocast, no new program dimensions:
what a user module of plain ops holds), judges each as a campaign case (`execute_case`, then the
one judgement) and as a user module's captured graph: the spec's own function lowered to aten with
make_fx, eager vs inductor judged by `minimize --module`'s judge with its mechanism experiments
(the reduced cause's `_verdict`, `_with_rounding_decides`, `_with_dropped_cast`). Prints each
disagreement and the totals: specs, both none, same severity, same severity and rule, and the
bug/not-bug split. Both runs compile the same graph on the same inputs in one process.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter


def judged_both_ways(*, specs: int, seed_value: int, max_ops: int, device: str) -> list[tuple]:
    """(spec, the campaign's reason, the module path's reason, an error or "") for `specs` drawn specs."""
    import torch
    from hypothesis import HealthCheck, given, seed, settings
    from torch.fx.experimental.proxy_tensor import make_fx

    from divfuzz.fuzzer.engine.execute import execute_case
    from divfuzz.fuzzer.finding.judgement import judge
    from divfuzz.fuzzer.triage.user_module import _reference_outputs, _run, _verdict, _with_dropped_cast, _with_rounding_decides
    from divfuzz.generators.build import build_callable, make_inputs
    from divfuzz.generators.strategies import graph_specs
    from divfuzz.records.config import CompileConfig

    rows: list[tuple] = []

    @seed(seed_value)
    @settings(max_examples=specs, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graph_specs(max_ops=max_ops, backward=False, allow_autocast=False, layouts=False, dynamic=False))
    def one(spec):
        campaign = judge(execute_case(spec, device, CompileConfig())).reason
        inputs = make_inputs(spec, device)
        fn = build_callable(spec, device.split(":")[0])
        try:
            with torch.no_grad():
                gm = make_fx(lambda *xs: fn(*xs))(*inputs)
            a, b = _run(gm, inputs, "eager"), _run(gm, inputs, "inductor")
            kept = _reference_outputs(gm, inputs)
            verdict = _verdict(gm, inputs, a, b, ref=kept)
            decided = _with_rounding_decides(verdict, gm, inputs, a, b)
            verdict = decided if decided is not verdict else _with_dropped_cast(verdict, gm, inputs, a, b, kept)
            module = judge(verdict).reason
        except Exception as e:  # noqa: BLE001 - a measurement: say what failed and go on
            rows.append((spec, campaign, None, f"{type(e).__name__}: {str(e)[:120]}"))
            return
        rows.append((spec, campaign, module, ""))

    one()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-ops", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    rows = judged_both_ways(specs=args.specs, seed_value=args.seed, max_ops=args.max_ops, device=args.device)
    counts = Counter()
    for spec, c, m, err in rows:
        counts["specs"] += 1
        if err:
            counts["module path failed"] += 1
            print(f"FAILED {','.join(spec.op_names)}: {err}")
            continue
        cs, ms = (c.severity.value if c else "none"), (m.severity.value if m else "none")
        counts["same severity"] += cs == ms
        counts["same severity and rule"] += cs == ms and (c.rule if c else "") == (m.rule if m else "")
        counts["both none"] += cs == ms == "none"
        counts["same bug / not-bug"] += (cs == "bug") == (ms == "bug")
        if cs != ms:
            print(f"{','.join(spec.op_names)} ({spec.recipe.kind}): campaign {cs} ({c.rule if c else '-'}), "
                  f"module {ms} ({m.rule if m else '-'})")
    print("; ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
