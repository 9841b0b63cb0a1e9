"""A case's verdict as frozen, torch-free data with a JSON form: per output, the float or integer
comparison of eager and compiled against fp64; for the case, its status and error type.

The oracles (`divfuzz.oracles.compare`) fill these in; every later layer (policy, store, reports, gate)
reads them. Nothing downstream parses error text: the exception type is carried as data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from divfuzz.records.outcomes import FindingKind, Status

# The same()-like margin for fp32: compiled's RMSE vs fp64 may be up to this multiple of eager's.
FP32_RMSE_MULTIPLIER = 2.0


@dataclass(frozen=True)
class FloatComparison:
    dtype: str
    numel: int
    n_diff: int
    max_ulp: int
    ulp_histogram: tuple[tuple[str, int], ...]
    nan_inf_mismatch: int
    triage: str  # "equal" | "compiled-worse" | "compiled-closer" | "same" | "unknown" (no fp64 reference)
    n_worse: int  # differing elements where compiled is further from fp64 than eager
    n_closer: int
    rmse_eager: float  # RMSE vs fp64; 0 (not computed) when eager and compiled are bitwise equal
    rmse_compiled: float
    max_abs_diff: float
    # Per-element measures (defaults: verdicts stored before they existed read as "not measured").
    n_gross_worse: int = 0  # elements where compiled is grossly further from fp64 (GROSS_*)
    max_excess_ulps: float = 0.0  # max over elements of (compiled error - eager error), in ULPs
    eager_max_err_ulps: float = 0.0  # the largest error eager makes vs fp64, in ULPs
    integral: bool = False  # eager and fp64 values are all integers (floor, trunc, floor division)
    n_int_wrong: int = 0  # integral output: elements where eager == fp64 and compiled differs from both
    n_nonfinite_new: int = 0  # compiled NaN/Inf where eager and fp64 are both finite
    # ... of them, those where eager is within a few ULPs of fp64 (-1: not measured, a verdict
    # stored before it was): eager's precision suffices there
    n_nonfinite_eager_near: int = -1
    # ... integer-valued-wrong elements the intermediates alone, moved by a rounding step, move as
    # far (`divfuzz.oracles.conditioning.INNER_DRAWS`; 0: not measured)
    n_int_wrong_ill_inner: int = 0
    # Integral output, over the differing elements (finite on all sides): where eager's integer is
    # not fp64's, and where compiled's is not (-1: not measured, a verdict stored before it was)
    n_int_eager_missed: int = -1
    n_int_compiled_missed: int = -1
    # Up to 64 (eager, compiled) errors vs fp64 of differing elements, in ULPs of the output dtype
    # (divfuzz.oracles.compare.ERROR_SAMPLE_*: the largest excesses, then an even stride); for the report.
    error_sample: tuple[tuple[float, float], ...] = ()
    # At the output's scale (ULPs at max(|fp64|, the output's RMS)): compiled's largest excess over
    # eager; elements where eager is grossly further from fp64 than compiled on both scales.
    max_excess_scale_ulps: float = 0.0
    n_eager_gross_worse: int = 0
    # Conditioning (`divfuzz.oracles.conditioning`): fp64 references on inputs moved by about one ULP, run
    # only for bug candidates; 0 draws = not measured. Gross / integer-valued-wrong elements whose
    # reference moves at least as far as compiled differs from eager are ill-conditioned.
    conditioning_draws: int = 0
    n_gross_ill_conditioned: int = 0
    n_int_wrong_ill_conditioned: int = 0
    # ... of them, those whose pre-image (eager's input to the rounding op) lies within
    # BOUNDARY_ULPS of where the op jumps: rounding at a boundary (0 when no pre-image is known)
    n_int_wrong_boundary: int = 0
    n_nonfinite_ill_conditioned: int = 0
    max_reference_shift: float = 0.0  # the largest such move of the reference, anywhere
    reference_rms: float = 0.0  # the fp64 output's RMS over its finite elements (its scale)
    # Where compiled has new NaN/Inf: the largest finite input magnitude over the dtype's largest
    # finite value (the input's dtype or this output's, the smaller); 0 = not measured.
    input_peak_fraction: float = 0.0
    # Of the `nan_inf_mismatch` elements, those where eager is NaN/Inf exactly as fp64 is (NaN as
    # NaN, an infinity of the same sign): there the non-finite value is the definition, and
    # compiled's other answer is wrong (-1: not measured, a verdict stored before it was).
    n_naninf_eager_exact: int = -1
    # ... of them, those where eager's value is NaN as fp64's is and compiled's is a finite number:
    # a NaN the definition gives (an empty mean, 0/0) turned into a number (-1: not measured).
    n_nan_lost: int = -1
    # ... of them, those some fp64 reference on inputs moved by one ULP makes finite (conditioning)
    n_nan_lost_ill_conditioned: int = 0
    # Whether any floating input holds NaN or Inf (1) or none does (0); measured only where a NaN is
    # lost (`n_nan_lost`), -1 otherwise: a NaN lost with all inputs finite came from the graph itself.
    inputs_nonfinite: int = -1
    # Zeros of the other sign than eager's (-0.0 against +0.0: ULP-equal, yet 1 / z tells them
    # apart), and of them those where fp64's zero has eager's sign.
    n_zero_sign: int = 0
    n_zero_sign_wrong: int = 0

    @property
    def fp32_worse(self) -> bool:
        """True when compiled is further from fp64 than `same()` would accept (its RMSE test)."""
        return self.rmse_compiled > FP32_RMSE_MULTIPLIER * self.rmse_eager

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ulp_histogram"] = [list(p) for p in self.ulp_histogram]
        d["error_sample"] = [list(p) for p in self.error_sample]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FloatComparison:
        d = dict(d)
        d["ulp_histogram"] = tuple((str(k), int(v)) for k, v in d["ulp_histogram"])
        d["error_sample"] = tuple((float(e), float(c)) for e, c in d.get("error_sample") or ())
        return cls(**d)


@dataclass(frozen=True)
class IntComparison:
    dtype: str
    numel: int
    flips: int
    max_step: int
    boundary_flips: int  # pre-image within BOUNDARY_ULPS of a rounding boundary
    gross_flips: int  # pre-image far from any boundary
    unknown_flips: int  # no pre-image known
    min_boundary_ulps: float | None  # smallest pre-image distance among flips
    undefined_flips: int = 0  # the pre-image was NaN, Inf or out of range: an undefined cast
    # fp64 verdict over the flips (the integer computed in float64): who gets it right.
    fp64_known: bool = False
    compiled_correct: int = 0
    eager_correct: int = 0
    neither_correct: int = 0
    # Conditioning (`divfuzz.oracles.conditioning`), 0 draws = not measured: flips far from a boundary whose
    # fp64 integer itself changes on inputs moved by about one ULP.
    conditioning_draws: int = 0
    gross_ill_conditioned: int = 0
    gross_ill_inner: int = 0  # ... of them, those the intermediates alone move (INNER_DRAWS; 0: not measured)
    # Over the flips with a finite fp64 integer (not undefined casts): where eager's integer is not
    # fp64's, and where compiled's is not (-1: not measured, a verdict stored before it was)
    eager_missed: int = -1
    compiled_missed: int = -1

    @property
    def fp64_triage(self) -> str:
        """"compiled-correct", "eager-correct", "neither", "mixed", or "unknown" (no fp64 integer)."""
        if not self.fp64_known:
            return "unknown"
        counted = [(n, name) for n, name in ((self.compiled_correct, "compiled-correct"), (self.eager_correct, "eager-correct"), (self.neither_correct, "neither")) if n]
        if len(counted) == 1:
            return counted[0][1]
        return "mixed" if counted else "unknown"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IntComparison:
        return cls(**d)


@dataclass(frozen=True)
class PerfComparison:
    """One phase of a case timed eager and compiled (`divfuzz.oracles.perf`), as numbers.

    `ratio` is the median of the paired compiled/eager time ratios (one pair per repeat, eager and
    compiled interleaved), `ratio_low`/`ratio_high` its distribution-free confidence interval;
    `margin` is the slowdown the noise allows (`ratio` must exceed 1 + margin to be a finding).
    `overhead_s` is the measured per-call cost of a compiled trivial graph over its eager run on
    the same worker (guards, wrappers): a slowdown no larger than that is the wrapper, not the code.
    """

    phase: str  # "fwd" | "fwd+bwd"
    repeats: int
    eager_median_s: float
    compiled_median_s: float
    ratio: float
    ratio_low: float
    ratio_high: float
    confidence: float
    margin: float
    overhead_s: float = 0.0
    dtype: str = "-"  # the graph's data dtype (what the bucket key shows)
    timer: str = ""  # "cuda-events, L2 flushed" | "perf_counter, N threads"
    clock: str = ""  # the GPU's SM clock before and after, when known

    @property
    def excess_s(self) -> float:
        """Compiled's median time beyond eager's, per call (negative when faster)."""
        return self.compiled_median_s - self.eager_median_s

    def describe(self) -> str:
        return (f"{self.phase}: eager {self.eager_median_s * 1e3:.3f} ms, compiled {self.compiled_median_s * 1e3:.3f} ms, "
                f"ratio {self.ratio:.3f} [{self.ratio_low:.3f}, {self.ratio_high:.3f}] ({self.confidence:.0%} CI, {self.repeats} pairs)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PerfComparison:
        return cls(**d)


@dataclass(frozen=True)
class OutputVerdict:
    name: str  # the output's node name, or "grad:<input>" for a gradient
    float_cmp: FloatComparison | None = None
    int_cmp: IntComparison | None = None
    # Set when compiled's output is missing or has another dtype or shape than eager's (then no
    # values are compared): "dtype float16 eager, float32 compiled", "shape [4] eager, [2, 2] compiled".
    mismatch: str | None = None
    # Set when a returned tensor (not a gradient) has other strides than eager's over its dims
    # of more than one element: "(1, 8) eager, (8, 1) compiled". Data beside the values: eager's
    # output strides are not a documented contract of every op, so it opens a bucket of its own
    # kind (`FindingKind.STRIDE_MISMATCH`), never a bug by itself.
    strides: str | None = None

    @property
    def differs(self) -> bool:
        if self.mismatch or self.strides:
            return True
        if self.float_cmp is not None:
            return self.float_cmp.n_diff > 0 or self.float_cmp.nan_inf_mismatch > 0 or self.float_cmp.n_zero_sign > 0
        return self.int_cmp is not None and self.int_cmp.flips > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "float": self.float_cmp.to_dict() if self.float_cmp else None,
            "int": self.int_cmp.to_dict() if self.int_cmp else None,
        } | ({"mismatch": self.mismatch} if self.mismatch else {}) | ({"strides": self.strides} if self.strides else {})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutputVerdict:
        return cls(
            name=d["name"],
            float_cmp=FloatComparison.from_dict(d["float"]) if d.get("float") else None,
            int_cmp=IntComparison.from_dict(d["int"]) if d.get("int") else None,
            mismatch=str(d["mismatch"]) if d.get("mismatch") else None,
            strides=str(d["strides"])[:200] if d.get("strides") else None,
        )


@dataclass(frozen=True)
class AgainstOutput:
    """One float output under `--against`: each side's RMSE vs fp64, and which compiler is further."""

    name: str
    rmse_eager: float
    rmse_backend: float  # A, the `--backend`
    rmse_against: float  # B, the `--against`
    further: str  # "backend" | "against" | "same" | "equal" (bitwise equal outputs)


@dataclass(frozen=True)
class Against:
    """A compiler-against-compiler case (`--against`): the verdict's outputs compare A (`backend`,
    in the "compiled" role) with B (`against`, in the "eager" role), so a triage of compiled-worse
    means A is further from fp64 than B; eager stays a third point in `outputs`.
    `further_from_fp64` is the judgement: the backend name further from fp64 over the outputs,
    "same" when neither, "equal" when A and B agree bitwise; `failed` names the side that errored."""

    backend: str
    against: str
    further_from_fp64: str
    outputs: tuple[AgainstOutput, ...] = ()
    failed: str | None = None  # "backend" | "against" | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outputs"] = [asdict(o) for o in self.outputs]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Against:
        d = dict(d)
        d["outputs"] = tuple(AgainstOutput(**o) for o in d.get("outputs", ()))
        return cls(**d)


def nested_span(name: str) -> bool:
    """A span timed inside another, whose seconds are also in the outer one (not added again when
    a case's time is split by stage): "<span>_backward", the backward's compile and first run
    inside its compile span ("compile_backward" inside "compile"), and "<span>:<phase>", a phase
    of a compile by torch's own timers ("compile:dynamo" inside "compile";
    `divfuzz.fuzzer.engine.compile_phases`)."""
    return name.endswith("_backward") or is_phase_span(name)


def is_phase_span(name: str) -> bool:
    """Whether a timings name is a compile phase, "<span>:<phase>" (inside its compile span)."""
    return ":" in name


# The longest error message and error site a verdict holds: the worker clips what it reports,
# and a verdict read from a store (data divfuzz may not have written) is clipped again.
MAX_ERROR_MESSAGE_CHARS = 2000
MAX_ERROR_SITE_CHARS = 240


def _clipped(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) else None


@dataclass(frozen=True)
class Explanation:
    """A mechanism that accounts for a divergence without a compiler defect, found by an
    experiment over the same case (`divfuzz.fuzzer.engine.explain`): its id (a key of
    `divfuzz.oracles.mechanisms.MECHANISMS`), the output it explains, one sentence with the
    experiment's numbers, and those numbers as data."""

    mechanism: str
    output: str
    detail: str
    measures: tuple[tuple[str, float], ...] = ()
    # The device type the case ran on ("" when not recorded): the public record decides some
    # mechanisms per device (`divfuzz.records.mechanism_table.Mechanism.on_devices`).
    device_type: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {"mechanism": self.mechanism, "output": self.output, "detail": self.detail, "measures": dict(self.measures)}
        return d | ({"device_type": self.device_type} if self.device_type else {})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Explanation:
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("mechanism", "output", "detail")):
            raise ValueError(f"Expected an explanation with mechanism, output and detail strings but got {d!r:.80}")
        measures = d.get("measures") or {}
        if not isinstance(measures, dict):
            raise ValueError(f"Expected explanation measures as an object but got {measures!r:.80}")
        device_type = d.get("device_type") or ""
        if not isinstance(device_type, str):
            raise ValueError(f"Expected an explanation's device_type as a string but got {device_type!r:.80}")
        return cls(d["mechanism"][:80], d["output"][:200], d["detail"][:1000],
                   tuple(sorted((str(k)[:80], float(v)) for k, v in measures.items())), device_type[:20])


@dataclass(frozen=True)
class Verdict:
    status: Status
    outputs: tuple[OutputVerdict, ...] = ()
    error_type: str | None = None  # e.g. "BackendCompilerFailed(PlantedCompileError)"
    error_message: str | None = None
    timings: tuple[tuple[str, float], ...] = field(default=(), compare=False)
    # Where in the compiler an error was raised (`divfuzz.fuzzer.engine.error_site`): errors of one
    # site share a bucket whatever the graph. None for other statuses, and where no frame names it.
    error_site: str | None = None
    perf: tuple[PerfComparison, ...] = ()  # the perf oracle's phases; empty for a numeric verdict
    against: Against | None = None  # set only by `--against` cases; older verdicts read as None
    # What explains a bug candidate without a compiler defect, when an experiment found it (None:
    # no experiment ran, or none explained it).
    explanation: Explanation | None = None
    # torch's intra-op threads on the CPU when the case ran (None: not recorded, or a GPU case).
    # Inductor's CPU kernels and eager's reductions split work by thread, so their bits follow it:
    # a bucket's replay and repro.py run under the same count (`divfuzz.reports.bucket_folder.bucket_case`).
    threads: int | None = field(default=None, compare=False)
    # How the worker died during this case, each time, when running it again in a fresh worker
    # answered (`divfuzz.fuzzer.engine.worker.Worker`): a death that does not repeat (a kill from
    # outside, the OOM killer) is an infrastructure event, never a finding; this verdict is the
    # re-run's. Empty when no worker died.
    worker_deaths: tuple[str, ...] = field(default=(), compare=False)
    # A shape sibling of a graph compiled for dynamic shapes (`divfuzz.generators.shape_siblings`)
    # that made Dynamo compile again, in words ("x0 [16, 8] after [8, 8], dims marked dynamic
    # (0,): 1 more graph compiled"); None when no compile was added (or the case is no such
    # sibling). It makes the verdict diverge, and opens a `recompile` bucket.
    recompile: str | None = None

    def span_seconds(self) -> float:
        """The seconds its case spent in the worker's timed spans (nested ones counted once)."""
        return sum(seconds for name, seconds in self.timings if not nested_span(name))

    def to_dict(self) -> dict[str, Any]:
        d = {
            "status": self.status.value,
            "outputs": [o.to_dict() for o in self.outputs],
            "error_type": self.error_type,
            "error_message": self.error_message,
            "timings": dict(self.timings),
        } | ({"against": self.against.to_dict()} if self.against else {})
        if self.error_site is not None:  # verdicts without one keep their stored form
            d["error_site"] = self.error_site
        if self.perf:  # numeric verdicts keep their stored form
            d["perf"] = [p.to_dict() for p in self.perf]
        if self.explanation is not None:
            d["explanation"] = self.explanation.to_dict()
        if self.threads is not None:
            d["threads"] = self.threads
        if self.worker_deaths:
            d["worker_deaths"] = list(self.worker_deaths)
        if self.recompile is not None:
            d["recompile"] = self.recompile
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            status=Status(d["status"]),
            outputs=tuple(OutputVerdict.from_dict(o) for o in d.get("outputs", ())),
            error_type=d.get("error_type"),
            error_message=_clipped(d.get("error_message"), MAX_ERROR_MESSAGE_CHARS),
            timings=tuple(sorted((d.get("timings") or {}).items())),
            perf=tuple(PerfComparison.from_dict(p) for p in d.get("perf", ())),
            against=Against.from_dict(d["against"]) if d.get("against") else None,
            error_site=_clipped(d.get("error_site"), MAX_ERROR_SITE_CHARS),
            explanation=Explanation.from_dict(d["explanation"]) if d.get("explanation") else None,
            threads=_threads(d.get("threads")),
            worker_deaths=_deaths(d.get("worker_deaths")),
            recompile=_clipped(d.get("recompile"), MAX_ERROR_SITE_CHARS),
        )


def _deaths(value: Any) -> tuple[str, ...]:
    """Stored worker deaths: a list of short texts (at most 8 kept), else none recorded."""
    if not isinstance(value, list):
        return ()
    return tuple(x[:200] for x in value[:8] if isinstance(x, str))


def _threads(value: Any) -> int | None:
    """A stored thread count: a positive int (not a bool), else not recorded."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096 else None


@dataclass(frozen=True)
class Finding:
    """What a verdict is worth a bucket for: its kind, the dtype it shows in, and its triage."""

    kind: FindingKind
    dtype: str  # the output dtype, or "-" for errors
    triage: str  # fp64 triage for float kinds, "boundary"/"gross" for ints, the error type for errors
    output: str  # which output shows it most
    site: str | None = None  # errors: where the compiler raised it (`Verdict.error_site`), else None
