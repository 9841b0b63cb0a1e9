"""A campaign's options, and the one place they are built (`build`): `divfuzz fuzz`,
the gate's short campaign (`divfuzz.fuzzer.gate.gate_fuzz`) and `divfuzz bench` name what they
choose differently (inputs per compile, minimization, workers) as arguments of one builder, so a
default changed here changes for every command that does not name it.

Invariant: an option's meaning and default live on `CampaignOptions`; the rule for the default
number of inputs per compile lives in `build`; no command constructs `CampaignOptions`
itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from divfuzz.generators.input_siblings import DEFAULT_INPUTS_PER_COMPILE, MAX_INPUTS_PER_COMPILE
from divfuzz.generators.shape_siblings import SHAPE_SIBLINGS
from divfuzz.generators.strategies import campaign_recipe_seed, graph_specs, perf_graph_specs
from divfuzz.records.backends import ALL_DTYPES, backend_of, capabilities_of
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import ConfigError


def build(*, device: str, out_dir: Path, inputs_per_compile: int | None, minimize: bool, workers: int,
          config: CompileConfig | None = None, oracle: str = "numeric", against: CompileConfig | None = None,
          **fields) -> "CampaignOptions":
    """A campaign's options. What commands choose differently is named, with no default here:
    `inputs_per_compile` (None: DEFAULT_INPUTS_PER_COMPILE for a numeric campaign of one compiler,
    else 1, as `divfuzz fuzz` documents), `minimize` and `workers`. `fields` are the other
    `CampaignOptions` fields, each with the dataclass's default when not given, but for
    `analysis_cuts`: off when the environment sets `DIVFUZZ_ANALYSIS_CUTS=off` (hidden: the
    benchmark's leg without the change, `scripts/bench_analyses.py`)."""
    fields.setdefault("analysis_cuts", os.environ.get(ANALYSIS_CUTS_ENV, "on") != "off")
    if inputs_per_compile is None:  # siblings run under the numeric oracle of one compiler, on one host or a fleet
        inputs_per_compile = DEFAULT_INPUTS_PER_COMPILE if oracle == "numeric" and against is None else 1
    return CampaignOptions(device=device, out_dir=out_dir, config=config if config is not None else CompileConfig(),
                           oracle=oracle, against=against, inputs_per_compile=inputs_per_compile, minimize=minimize,
                           workers=workers, **fields)


# The environment variable that turns `analysis_cuts` off (`off`), for a two-leg benchmark.
ANALYSIS_CUTS_ENV = "DIVFUZZ_ANALYSIS_CUTS"

# The `torch.compile` modes a CUDA campaign under Inductor draws a share of its graphs in
# (`graph_specs(modes=...)`): templates and epilogue fusion, and CUDA graphs.
CAMPAIGN_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")


def check_inputs_per_compile(opts: "CampaignOptions") -> None:
    """ConfigError unless `opts.inputs_per_compile` is 1, or within 1..MAX_INPUTS_PER_COMPILE for a
    numeric campaign of one compiler (a perf case times its own compile's code, an `--against`
    case runs two compiles). On one host or a fleet alike: a fleet's node runs a whole group per
    request (`divfuzz.fuzzer.campaign.cluster`)."""
    n = opts.inputs_per_compile
    if n == 1:
        return
    if not isinstance(n, int) or not 1 <= n <= MAX_INPUTS_PER_COMPILE:
        raise ConfigError(f"--inputs-per-compile: expected 1 to {MAX_INPUTS_PER_COMPILE} (one per input recipe) but got {n!r}")
    for on, why in ((opts.oracle != "numeric", f"--oracle {opts.oracle}"), (opts.against is not None, "--against")):
        if on:
            raise ConfigError(f"--inputs-per-compile {n} with {why}: input siblings run under the numeric oracle "
                              "of one compiler; pass --inputs-per-compile 1")



@dataclass(frozen=True)
class CampaignOptions:
    device: str
    out_dir: Path
    config: CompileConfig = field(default_factory=CompileConfig)
    seed: int = 0
    budget_s: float | None = None
    max_cases: int | None = None
    workers: int = 1
    strict: bool = False
    timeout_s: float = 300.0
    max_ops: int = 12
    ops: tuple[str, ...] | None = None  # restrict generation to these ops
    dtypes: tuple[str, ...] | None = None  # restrict data dtypes
    minimize: bool = False
    profile: bool = False  # also time a warm compiled run per case (for `divfuzz bench`)
    minimize_budget_s: float = 120.0  # per new root cause (divfuzz.fuzzer.triage.analysis)
    oracle: str = "numeric"  # divfuzz.records.outcomes.ORACLES: "perf" times eager vs compiled instead
    perf_margin: float | None = None  # the perf oracle's noise margin (None: divfuzz.oracles.perf.DEFAULT_MARGIN)
    against: CompileConfig | None = None  # `--against`: judge config's compiler against this one (divfuzz.fuzzer.engine.against)
    unguarded_casts: bool = False  # `--unguarded-casts`: draw float->int casts without their NaN/range guard
    # Inputs one compile serves: each drawn spec, then its `inputs_per_compile - 1` input siblings
    # (`divfuzz.generators.input_siblings`: the same graph under other recipes) through its
    # compile, each a case of its own. 1 with the perf oracle or `--against`.
    inputs_per_compile: int = 1
    # With minimize: bucket analysis workers beside the slots (None: `size_analysis_workers`);
    # 0 analyses inline, in the slot. Not part of `identity`: it changes when buckets are
    # re-keyed, never which cases run or where they end up.
    analysis_workers: int | None = None
    # The time.monotonic() `budget_s` counts from: the command's start (`divfuzz fuzz` passes it),
    # so sizing and start-up are inside the budget; None: the campaign's own start. Not identity.
    budget_from: float | None = None
    # Issue 54's cuts to the analyses' cost: the bisector starts past the stage ladder's clear rungs
    # (`attribute_case`'s `seeded_bisect`), and drawing stops early enough for the open bug
    # analyses to start (`schedule.drawing_reserve`'s `start_floor`). False only for a benchmark's
    # leg without them. Not identity: it changes how long analyses take, never which cases run.
    analysis_cuts: bool = True

    def identity(self) -> dict:
        """What makes two campaigns the same (so that one resumes the other)."""
        return {
            "max_cases": self.max_cases,
            "workers": self.workers,
            "strict": self.strict,
            "max_ops": self.max_ops,
            "ops": list(self.ops) if self.ops else None,
            "dtypes": list(self.dtypes) if self.dtypes else None,
            **({"oracle": self.oracle, "perf_margin": self.perf_margin} if self.oracle != "numeric" else {}),
        } | ({"against": self.against.to_dict()} if self.against else {}) | ({"unguarded_casts": True} if self.unguarded_casts else {}) | (
            {"inputs_per_compile": self.inputs_per_compile} if self.inputs_per_compile != 1 else {})

    @property
    def members_per_draw(self) -> int:
        """Cases one drawn spec may run through its compile: itself, its input siblings, and where it
        compiles for dynamic shapes its shape siblings (`divfuzz.generators.shape_siblings`); with
        one input per compile, itself alone. Member j of draw idx is stored at idx * this + j."""
        return self.inputs_per_compile + SHAPE_SIBLINGS if self.inputs_per_compile > 1 else 1

    def strategy(self, slot: int = 0):
        """What slot `slot` draws from: each slot starts its ops at its own place (`graph_specs`'s
        `op_offset`), so that two slots' first draws (Hypothesis's simplest ones) differ, and the
        campaign's seed gives those first draws their inputs (`zero_recipe_seed`), so that two
        seeds' first draws differ too (Hypothesis's simplest examples ignore its seed)."""
        recipe_seed = campaign_recipe_seed(self.seed)
        if self.oracle == "perf":
            return perf_graph_specs(device_type=self.device.split(":")[0], max_ops=self.max_ops, ops=self.ops,
                                    op_offset=slot, zero_recipe_seed=recipe_seed,
                                    **({"dtypes": self.dtypes} if self.dtypes else {}))
        kwargs = {"max_ops": self.max_ops, "ops": self.ops, "guard_casts": not self.unguarded_casts, "op_offset": slot,
                  "zero_recipe_seed": recipe_seed}
        if self.device.startswith("cuda") and backend_of(self.config.backend).is_inductor and not self.config.mode and self.against is None:
            kwargs["modes"] = CAMPAIGN_MODES  # the modes users run, on the device they are for
        if self.dtypes:
            kwargs["dtypes"] = self.dtypes
        caps = capabilities_of(self.config.backend, self.against.backend if self.against else None)
        if caps.unsupported or caps.dtypes != ALL_DTYPES or not caps.backward or not caps.autocast:  # draw within the backends' capabilities
            kwargs.update(allowed=caps.allows, allow_backward=caps.backward, allow_autocast=caps.autocast,
                          dtypes=tuple(d for d in kwargs.get("dtypes", caps.dtypes) if d in caps.dtypes))
        return graph_specs(**kwargs)
