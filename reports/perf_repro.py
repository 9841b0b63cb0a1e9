"""Writing a perf finding as a standalone `repro.py` that needs only torch.

The script builds the graph and its inputs (the same `graph_code` and `inputs_code` as the
numeric repro: each op's `code` template), compiles it with the case's config and, when
attribution named one, again with the culprit knob flipped, and times eager, compiled and
compiled-with-the-knob call by call, interleaved, per phase (`fwd`, and `fwd+bwd` for a training
graph). It prints each median and the ratios to eager, and exits 1 while compiled is slower than
eager by more than the margin, 0 once it is not.

One source for how it times: `oracles/timing.py` is carried by source (as the numeric repro
carries the numeric oracles). Invariant: as for `divfuzz.reports.repro`, nothing from a spec or a store
reaches the script as raw text: names are checked, numbers are printed with `repr` of an int or
float, strings are `repr`s or escaped docstrings.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles import timing as timing_oracle
from divfuzz.reports.repro import carried_source, int_literal, carried_runtime, case_constants, docstring_literal, graph_code, inputs_code

if TYPE_CHECKING:
    from divfuzz.records.config import CompileConfig

# Parsed once, at import, as `divfuzz.reports.repro` does its carried texts (parsing is not thread-safe in CPython 3.11).
_CARRIED_TIMING = carried_source(timing_oracle)

_RUNTIME = '''
def phases(fn, inputs):
    """The timed phases: the forward (no_grad for an inference graph), and forward+backward."""
    if not BACKWARD:
        def fwd():
            with torch.no_grad():
                return fn(*inputs)
        return {"fwd": fwd}
    outs = fn(*inputs)  # with grad: the same cotangents as the engine and the numeric repro draw
    cots = cotangents(outs, SEED)
    targets = [x for x in inputs if x.requires_grad]

    def fwd_bwd():
        outs = fn(*inputs)
        pairs = [(o, c) for o, c in zip(outs, cots) if c is not None and o.requires_grad]
        return torch.autograd.grad([o for o, _ in pairs], targets, [c for _, c in pairs], allow_unused=True)
    return {"fwd": lambda: fn(*inputs), "fwd+bwd": fwd_bwd}


def compile_with(overrides):
    backend = import_backend(BACKEND)
    torch._dynamo.reset()
    if DEVICE_TYPE == "cpu":
        key_compile_caches_by_cpu_isa()
    with torch._inductor.config.patch({**INDUCTOR_CONFIG, **overrides}):
        fn = torch.compile(model, backend=backend, dynamic=DYNAMIC, mode=MODE)
        # Compile forward and backward now, inside the patch (compiling is lazy).
        for run in phases(fn, INPUTS).values():
            run()
    return fn


def main():
    global DEVICE_TYPE, INPUTS
    device = sys.argv[1] if len(sys.argv) > 1 else DEVICE
    DEVICE_TYPE = torch.device(device).type
    print(f"torch {torch.__version__}, python {platform.python_version()}, device {device}"
          + (f" ({torch.cuda.get_device_name()}, CUDA {torch.version.cuda})" if device.startswith("cuda") else ""))
    INPUTS = make_inputs(device)
    sides = {"eager": model, "compiled": compile_with({})}
    if KNOB:
        sides[f"compiled, {KNOB[0]}={KNOB[1]!r}"] = compile_with({KNOB[0]: KNOB[1]})
    timer = Timer(device)
    slower = False
    for phase in phases(model, INPUTS):
        runs = {name: phases(fn, INPUTS)[phase] for name, fn in sides.items()}
        for _ in range(3):  # warm-up
            for run in runs.values():
                run()
        samples = timer.interleaved_samples(list(runs.values()), ROUNDS)
        medians = {name: statistics.median(s) for name, s in zip(runs, samples)}
        print(f"{phase}:")
        for name, m in medians.items():
            print(f"  {name:<40} {m * 1e3:9.3f} ms  ({m / medians['eager']:.2f}x eager)")
        slower |= medians["compiled"] > (1 + MARGIN) * medians["eager"]
    print("compiled is SLOWER than eager" if slower else "compiled is not slower than eager")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def render_perf_repro(
    spec: GraphSpec,
    *,
    device: str,
    config: "CompileConfig",
    title: str,
    margin: float,
    knob: tuple[str, Any] | None = None,
    notes: tuple[str, ...] = (),
    rounds: int = 30,
) -> str:
    """The text of a standalone perf repro for one case; `knob` is the culprit (key, flipped value)."""
    header = [f"divfuzz perf repro: {title}", ""] + list(notes) + [
        "",
        "Run: python repro.py [DEVICE]. Prints eager, compiled" + (" and compiled with the culprit knob flipped" if knob else "")
        + " per phase; exits 1 while compiled is slower than eager by more than the margin, 0 once it is not.",
        f"Compiled with: {config.describe()}",
    ]
    if knob is not None:
        key, value = knob
        if not isinstance(key, str) or not all(part.isidentifier() for part in key.split(".")):
            raise ValueError(f"refusing to print Inductor knob {key!r} as code")
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise ValueError(f"refusing to print knob value {value!r} as code")
    consts = case_constants(spec, device, config) + "\n" + textwrap.dedent(
        f"""
        KNOB = {tuple(knob) if knob is not None else None!r}
        MARGIN = {float(margin)!r}
        ROUNDS = {int_literal(rounds)}
        INPUTS = None
        """
    ).strip()
    imports = ("import contextlib\nimport importlib\nimport platform\nimport statistics\nimport sys\nimport time\n"
               "from typing import Callable, Sequence\n\nimport torch\nimport torch.nn.functional as F")
    return (
        "#!/usr/bin/env python3\n" + docstring_literal("\n".join(header)) + "\n" + imports + "\n\n" + consts
        + "\n\n\n" + _CARRIED_TIMING + "\n\n\n" + inputs_code(spec) + "\n\n\n" + graph_code(spec)
        + "\n\n" + carried_runtime() + "\n\n" + _RUNTIME
    )
