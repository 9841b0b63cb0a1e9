"""Measure what the op cap (`generators.validate.MAX_NODES` / `MAX_DEPTH`) must keep out: the seconds
one case of the costliest shape divfuzz allows takes to compile and run, by node count.

    python scripts/measure_op_cap.py [--device cpu] [--sizes 16,32,64,128] [--backward/--forward]

The shape is issue 56's: two equally deep chains of alternating softmax and layer_norm (the ops
whose backward decompositions are largest) on one (8, 64) input each, with a backward. Each size
runs in a fresh worker process (`Worker`, as a campaign runs a case), so no cache is shared beyond
Inductor's on-disk one, which each size misses (other graphs). Prints one row per size: nodes,
depth, seconds, status. Stdlib and divfuzz only.
"""

from __future__ import annotations

import argparse
import time

from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.records.config import CompileConfig


def two_chains(nodes: int, backward: bool) -> GraphSpec:
    """`nodes` nodes in two chains of nodes // 2, softmax and layer_norm alternating."""
    shape = (8, 64)
    inputs = (TensorSpec("x0", shape, "float32", backward), TensorSpec("x1", shape, "float32", backward))
    made, outputs = [], []
    for chain, start in enumerate(("x0", "x1")):
        previous = start
        for i in range(nodes // 2):
            name = f"c{chain}_{i}"
            if i % 2 == 0:
                made.append(Node(name, "softmax", (previous,), (), "float32", shape))
            else:
                made.append(Node(name, "layer_norm", (previous,), (("affine", False), ("eps", 1e-5)), "float32", shape))
            previous = name
        outputs.append(previous)
    spec = GraphSpec(inputs=inputs, nodes=tuple(made), outputs=tuple(outputs), recipe=InputRecipe("normal", 0),
                     backward=backward)
    validate_spec(spec)
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="16,32,64,128")
    parser.add_argument("--forward", action="store_true", help="no backward")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'depth':>6} {'seconds':>8}  status")
    for n in (int(x) for x in args.sizes.split(",")):
        spec = two_chains(n, not args.forward)
        worker = Worker(args.device)
        try:
            t0 = time.monotonic()
            verdict = worker.run(CaseRequest(spec, args.device, CompileConfig()), args.timeout)
            seconds = time.monotonic() - t0
        finally:
            worker.stop()
        print(f"{n:>6} {n // 2:>6} {seconds:>8.1f}  {verdict.status.value}", flush=True)


if __name__ == "__main__":
    main()
