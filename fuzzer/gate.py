"""The CI gate: replay a corpus of specs in a worker and hold each verdict to a baseline.

A baseline is a data file per machine key (`baseline-cpu-2.13-avx512.json`): device type, torch
minor version, and CPU capability or GPU architecture, because vectorized CPU kernels differ by ISA
as GPU kernels do by architecture. It lists, per corpus spec, the expected verdict: clean (every output bitwise equal to eager), a known
divergence with its bounds (max ULP, differing fraction, NaN/Inf mismatches, integer flips and
their largest step), or a known error. A spec missing from the baseline is expected clean.

Invariants:
- `GateResult.to_dict()` minus its `timings` field is a pure function of (corpus, baseline, torch,
  device, compile config, margin): three runs give identical JSON. Timings live only under
  `timings`, apart, because users want them but they can never be identical.
- Bad input (a corrupt spec or baseline, a missing baseline, an unknown backend) raises a
  `DivfuzzError` naming the file; what the compiler does is data and decides pass or fail.
- A baseline written for another machine key is refused unless the caller accepts any
  (`--baseline-any`); then the mismatch is a note in every report.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzzer.config import CompileConfig
from fuzzer.worker import CaseRequest, Worker
from generators.errors import DivfuzzError, SpecError
from generators.spec import GraphSpec
from generators.validate import load_spec
from oracles.verdict import FindingKind, Status, Verdict, finding_of

BASELINE_SCHEMA_VERSION = 2  # 2: keyed by CPU capability / GPU architecture (`arch`)
RESULT_SCHEMA_VERSION = 1
DEFAULT_MARGIN = 0.1

_ERROR_STATUSES = {Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASH, Status.HANG, Status.EAGER_ERROR}
# Fuzz findings that fail the gate: errors and discrete findings always; float kinds only when
# compiled is further from fp64 than eager.
_ALWAYS_FAIL_KINDS = {
    FindingKind.CRASH.value,
    FindingKind.HANG.value,
    FindingKind.COMPILE_ERROR.value,
    FindingKind.RUNTIME_ERROR.value,
    FindingKind.NAN_INF.value,
    FindingKind.INT_GROSS.value,
    FindingKind.INT_BOUNDARY.value,
}


class BaselineError(DivfuzzError):
    """A baseline file is missing, not JSON, or not a divfuzz gate baseline."""


# ---- the corpus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusSpec:
    name: str  # the file's stem: the spec's identity in the baseline and in reports
    path: Path
    spec: GraphSpec


def specs_folder(corpus_dir: Path) -> Path:
    """Where a corpus keeps its specs: `DIR/specs/` when it exists, else `DIR` itself."""
    return corpus_dir / "specs" if (corpus_dir / "specs").is_dir() else corpus_dir


def load_corpus(corpus_dir: Path) -> list[CorpusSpec]:
    """Every `*.json` spec of a corpus, sorted by name; a bad file raises SpecError naming it."""
    if not corpus_dir.is_dir():
        raise SpecError(f"{corpus_dir}: corpus folder does not exist")
    folder = specs_folder(corpus_dir)
    result = []
    from fuzzer.corpus import corpus_spec_name, read_spec_text

    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("baseline-"):
            continue
        name = corpus_spec_name(path)  # becomes a folder under --repro-dir: a slug or refused
        result.append(CorpusSpec(name, path, load_spec(read_spec_text(path), source=str(path))))
    if not result:
        raise SpecError(f"{folder}: no *.json specs in this corpus")
    return result


# ---- versions and the baseline file -------------------------------------------------------------


def torch_minor() -> str:
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"{major}.{minor}"


def device_arch(device: str) -> str:
    """What picks the kernels on this device: the CPU capability ATen dispatches to (`avx512`,
    `avx2`, ...; `ATEN_CPU_CAPABILITY` lowers it, and Inductor's C++ codegen follows the same
    variable) or the GPU's compute capability (`sm_90`)."""
    import torch

    if device.startswith("cuda"):
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        return f"sm_{major}{minor}"
    return torch.backends.cpu.get_cpu_capability().lower().replace(" ", "_")


def machine_key(device: str) -> dict[str, str]:
    """The key a baseline is written for and checked against: what changes the numbers."""
    return {"device_type": device.split(":")[0], "torch": torch_minor(), "arch": device_arch(device)}


def describe_key(key: dict[str, str]) -> str:
    return f"{key['device_type']} {key['arch']}, torch {key['torch']}"


def default_baseline_path(corpus_dir: Path, device: str) -> Path:
    key = machine_key(device)
    return corpus_dir / f"baseline-{key['device_type']}-{key['torch']}-{key['arch']}.json"


def summarize_verdict(verdict: Verdict) -> dict[str, Any]:
    """A verdict as baseline data: the status, the error type, and each differing output's measures."""
    outputs: dict[str, Any] = {}
    for o in verdict.outputs:
        if not o.differs:
            continue
        if o.float_cmp is not None:
            f = o.float_cmp
            outputs[o.name] = {
                "kind": "float",
                "dtype": f.dtype,
                "numel": f.numel,
                "n_diff": f.n_diff,
                "diff_fraction": f.n_diff / max(1, f.numel),
                "max_ulp": f.max_ulp,
                "nan_inf_mismatch": f.nan_inf_mismatch,
                "triage": f.triage,
            }
        elif o.int_cmp is not None:
            i = o.int_cmp
            outputs[o.name] = {
                "kind": "int",
                "dtype": i.dtype,
                "numel": i.numel,
                "flips": i.flips,
                "max_step": i.max_step,
                "gross_flips": i.gross_flips + i.unknown_flips,
            }
    return {"status": verdict.status.value, "error_type": verdict.error_type, "outputs": outputs}


@dataclass(frozen=True)
class Baseline:
    path: Path
    device_type: str
    torch: str
    arch: str
    config: dict[str, Any]
    specs: dict[str, dict[str, Any]]
    known_buckets: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "device_type": self.device_type,
            "torch": self.torch,
            "arch": self.arch,
            "config": self.config,
            "specs": {k: self.specs[k] for k in sorted(self.specs)},
            "known_buckets": sorted(self.known_buckets),
        }

    def key(self) -> dict[str, str]:
        return {"device_type": self.device_type, "torch": self.torch, "arch": self.arch}

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")


# The bounds each output kind must hold, and their types: `compare_with_baseline` and the reports
# read every one of them, so a baseline lacking one is refused at load, not with a KeyError later.
_COUNT, _NUMBER, _TEXT = "a non-negative integer", "a finite non-negative number", "a string"
_OUTPUT_FIELDS = {
    "float": {"dtype": _TEXT, "numel": _COUNT, "n_diff": _COUNT, "diff_fraction": _NUMBER, "max_ulp": _NUMBER,
              "nan_inf_mismatch": _COUNT, "triage": _TEXT},
    "int": {"dtype": _TEXT, "numel": _COUNT, "flips": _COUNT, "max_step": _NUMBER, "gross_flips": _COUNT},
}


def _field_ok(value: Any, kind: str) -> bool:
    if kind == _TEXT:
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == _COUNT:
        return isinstance(value, int) and value >= 0
    return math.isfinite(value) and value >= 0


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_baseline(path: Path, *, device: str | None = None) -> Baseline:
    """Read and check a baseline file; every problem raises BaselineError naming the file and the
    field. Checked here: the machine key fields, every bound the comparison reads (finite,
    non-negative), the config; not checked here: whether the key matches this machine
    (`check_baseline_key`)."""
    if not path.exists():
        hint = f" for {describe_key(machine_key(device))}" if device else ""
        others = sorted(p.name for p in path.parent.glob("baseline-*.json")) if path.parent.is_dir() else []
        raise BaselineError(
            f"{path}: no baseline{hint}. A missing baseline is not a pass: write one with "
            f"`divfuzz gate --update-baseline` (on a build you trust) and commit it"
            + (f" (this corpus has {', '.join(others)})" if others else "")
        )
    try:
        data = json.loads(path.read_text(), parse_constant=_refuse_constant)
    except (OSError, UnicodeDecodeError) as e:
        raise BaselineError(f"{path}: cannot read baseline ({e})") from None
    except json.JSONDecodeError as e:
        raise BaselineError(f"{path}: baseline is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # NaN, Infinity or -Infinity: Python's json reads them, JSON does not
        raise BaselineError(f"{path}: baseline is not valid JSON ({e})") from None
    except RecursionError:
        raise BaselineError(f"{path}: baseline JSON is nested too deeply") from None

    def bad(what: str, value: Any) -> BaselineError:
        return BaselineError(f"{path}: expected {what} but got {value!r}"[:2000])

    if not isinstance(data, dict):
        raise bad("a JSON object at the top level", type(data).__name__)
    version = data.get("schema_version")
    if isinstance(version, bool):  # JSON true is no version (and Python would read it as 1)
        raise bad(f"schema_version 1..{BASELINE_SCHEMA_VERSION}", version)
    if version == 1:
        raise BaselineError(
            f"{path}: a schema_version 1 baseline is keyed by torch version only, not by CPU capability or GPU "
            f"architecture; write it again with `divfuzz gate --update-baseline`"
        )
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= BASELINE_SCHEMA_VERSION:
        raise bad(f"schema_version 1..{BASELINE_SCHEMA_VERSION}", version)
    for name in ("device_type", "torch", "arch"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise bad(f"a non-empty string for {name}", data.get(name))
    config = data.get("config", {})
    if not isinstance(config, dict):
        raise bad("an object for config", config)
    if config:
        try:
            CompileConfig.from_dict(config)
        except (KeyError, TypeError, ValueError, AttributeError, DivfuzzError) as e:
            raise bad(f"a compile config for config ({e})", config) from None
    specs = data.get("specs")
    if not isinstance(specs, dict):
        raise bad("an object for specs", specs)
    statuses = {s.value for s in Status}
    for name, entry in specs.items():
        if not isinstance(entry, dict) or entry.get("status") not in statuses or not isinstance(entry.get("outputs"), dict):
            raise bad(f"specs.{name} to be an object with a status and outputs", entry)
        if not isinstance(entry.get("error_type"), (str, type(None))):
            raise bad(f"a string or null for specs.{name}.error_type", entry.get("error_type"))
        if not isinstance(entry.get("digest"), (str, type(None))):
            raise bad(f"a string for specs.{name}.digest", entry.get("digest"))
        for out_name, o in entry["outputs"].items():
            where = f"specs.{name}.outputs.{out_name}"
            if not isinstance(o, dict) or o.get("kind") not in _OUTPUT_FIELDS:
                raise bad(f"{where} to be an object of kind float or int", o)
            for field_name, kind in _OUTPUT_FIELDS[o["kind"]].items():
                if not _field_ok(o.get(field_name), kind):
                    raise bad(f"{kind} for {where}.{field_name}", o.get(field_name, "<missing>"))
    known = data.get("known_buckets", [])
    if not isinstance(known, list) or not all(isinstance(k, str) for k in known):
        raise bad("a list of strings for known_buckets", known)
    return Baseline(
        path=path,
        device_type=data["device_type"],
        torch=data["torch"],
        arch=data["arch"],
        config=config,
        specs=specs,
        known_buckets=tuple(known),
    )


def check_baseline_key(baseline: Baseline, device: str, *, accept_any: bool) -> list[str]:
    """Notes for the reports when the baseline was written for another machine key; without
    `accept_any` such a baseline is refused (its bounds say nothing about this machine's kernels)."""
    here = machine_key(device)
    if baseline.key() == here:
        return []
    mismatch = (
        f"baseline mismatch: {baseline.path} was written for {describe_key(baseline.key())}; "
        f"this machine is {describe_key(here)}"
    )
    if not accept_any:
        raise BaselineError(
            f"{mismatch}. Use the baseline for this machine ({default_baseline_path(baseline.path.parent, device).name}), "
            f"write one with `divfuzz gate --update-baseline`, or pass --baseline-any to compare anyway"
        )
    return [mismatch]


# ---- comparing one spec with its baseline -------------------------------------------------------


def _allowed(bound: float, margin: float, *, integer: bool) -> float:
    limit = bound * (1.0 + margin)
    return math.floor(limit + 1e-9) if integer else limit


def _describe(o: dict[str, Any]) -> str:
    if o["kind"] == "float":
        s = f"{o['n_diff']}/{o['numel']} {o['dtype']} elements differ, max {o['max_ulp']} ULP, fp64 triage {o['triage']}"
        return s + (f", {o['nan_inf_mismatch']} NaN/Inf mismatches" if o["nan_inf_mismatch"] else "")
    return f"{o['flips']}/{o['numel']} {o['dtype']} flips, max step {o['max_step']}, {o['gross_flips']} far from a boundary"


def describe_summary(summary: dict[str, Any]) -> str:
    """One line for a verdict summary: what a person reads in JUnit and markdown."""
    status = summary["status"]
    if status in {s.value for s in _ERROR_STATUSES} or status == Status.NONDETERMINISTIC.value:
        return f"{status}" + (f" ({summary['error_type']})" if summary.get("error_type") else "")
    if not summary["outputs"]:
        return "clean (bitwise equal to eager)"
    return "; ".join(f"{name}: {_describe(o)}" for name, o in summary["outputs"].items())


def compare_with_baseline(
    observed: dict[str, Any], expected: dict[str, Any] | None, *, margin: float
) -> tuple[list[str], list[str]]:
    """(problems, improvements) of one spec's observed summary against its baseline entry.

    A pure function. Problems fail the gate: a clean output that now differs, a bound exceeded
    by more than `margin` (relative), more NaN/Inf mismatches, new gross integer flips, a new or
    different error. Improvements are reported: a known divergence gone or smaller, an error gone.
    """
    problems: list[str] = []
    improvements: list[str] = []
    exp = expected if expected is not None else {"status": Status.OK.value, "error_type": None, "outputs": {}}
    obs_status, exp_status = observed["status"], exp["status"]
    errors = {s.value for s in _ERROR_STATUSES} | {Status.NONDETERMINISTIC.value}
    if obs_status in errors:
        if (obs_status, observed.get("error_type")) != (exp_status, exp.get("error_type")):
            problems.append(f"new error: {describe_summary(observed)} (baseline: {describe_summary(exp)})")
        return problems, improvements
    if exp_status in errors:
        improvements.append(f"the baseline's {describe_summary(exp)} is gone")
    for name, o in observed["outputs"].items():
        e = exp["outputs"].get(name)
        if e is None or e["kind"] != o["kind"]:
            problems.append(f"{name}: {_describe(o)}; the baseline expects it equal to eager")
            continue
        if o["kind"] == "float":
            checks = (("max ULP", "max_ulp", True), ("differing fraction", "diff_fraction", False))
            if o["nan_inf_mismatch"] > e["nan_inf_mismatch"]:
                problems.append(
                    f"{name}: NaN/Inf placement changed: {o['nan_inf_mismatch']} mismatches (baseline {e['nan_inf_mismatch']})"
                )
            elif o["nan_inf_mismatch"] < e["nan_inf_mismatch"]:
                improvements.append(f"{name}: NaN/Inf mismatches {e['nan_inf_mismatch']} -> {o['nan_inf_mismatch']}")
        else:
            checks = (("integer flips", "flips", True), ("max step", "max_step", True))
            if o["gross_flips"] > 0 and e.get("gross_flips", 0) == 0:
                problems.append(f"{name}: {o['gross_flips']} flips far from a rounding boundary (baseline: none)")
        for label, key, integer in checks:
            allowed = _allowed(e[key], margin, integer=integer)
            if o[key] > allowed:
                problems.append(
                    f"{name}: {label} {_fmt(o[key])} exceeds the baseline's {_fmt(e[key])} "
                    f"(allowed {_fmt(allowed)} with margin {margin:g})"
                )
            elif o[key] < e[key]:
                improvements.append(f"{name}: {label} {_fmt(e[key])} -> {_fmt(o[key])}")
    for name, e in exp["outputs"].items():
        if name not in observed["outputs"]:
            improvements.append(f"{name}: now equal to eager (baseline: {_describe(e)})")
    return problems, improvements


def _fmt(v: float) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


# ---- the gate run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateOptions:
    device: str
    corpus_dir: Path
    baseline_path: Path | None = None
    config: CompileConfig = field(default_factory=CompileConfig)
    margin: float = DEFAULT_MARGIN
    timeout_s: float = 300.0
    budget_s: float | None = None
    fuzz_budget_s: float | None = None
    fuzz_cases: int | None = None
    seed: int = 0
    repro_dir: Path | None = None
    only: tuple[str, ...] = ()  # spec names to replay (empty: all)
    baseline_any: bool = False  # compare with a baseline written for another machine key (noted)


@dataclass
class SpecResult:
    name: str
    digest: str
    observed: dict[str, Any] | None  # None when not run (the budget ran out)
    expected: dict[str, Any] | None
    problems: list[str]
    improvements: list[str]
    bucket: str | None  # the bucket key this verdict would land in, if any
    wall_s: float = 0.0
    severity: dict | None = None  # oracles.severity.SeverityReason of the verdict, if it diverges

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "digest": self.digest,
            "result": "pass" if self.passed else "fail",
            "verdict": describe_summary(self.observed) if self.observed else "not run",
            "observed": self.observed,
            "expected": self.expected,
            "in_baseline": self.expected is not None,
            "problems": self.problems,
            "improvements": self.improvements,
            "bucket": self.bucket,
            "severity": self.severity,
        }


@dataclass
class GateResult:
    device: str
    torch_version: str
    config: CompileConfig
    baseline_path: Path | None
    margin: float
    specs: list[SpecResult]
    notes: list[str]
    fuzz: dict[str, Any] | None = None
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        fuzz_ok = not self.fuzz or not self.fuzz["failing"]
        return all(s.passed for s in self.specs) and fuzz_ok

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self, *, with_timings: bool = True) -> dict[str, Any]:
        d = {
            "schema_version": RESULT_SCHEMA_VERSION,
            "result": "pass" if self.passed else "fail",
            "exit_code": self.exit_code,
            "device": self.device,
            "torch": self.torch_version,
            "config": self.config.to_dict(),
            "baseline": str(self.baseline_path) if self.baseline_path else None,
            "margin": self.margin,
            "counts": {
                "specs": len(self.specs),
                "passed": sum(s.passed for s in self.specs),
                "failed": sum(not s.passed for s in self.specs),
                "improved": sum(bool(s.improvements) and s.passed for s in self.specs),
            },
            "notes": self.notes,
            "specs": [s.to_dict() for s in self.specs],
            "fuzz": self.fuzz,
        }
        if with_timings:
            d["timings"] = self.timings
        return d


def _bucket_of(verdict: Verdict, spec: GraphSpec, device: str) -> str | None:
    from fuzzer.buckets import bucket_key

    finding = finding_of(verdict)
    return str(bucket_key(finding, spec, device)) if finding else None


def _severity_of(verdict: Verdict) -> dict | None:
    """The severity policy's judgement, as it goes into the gate's JSON (exit codes do not use it)."""
    from oracles.severity import severity_of

    reason = severity_of(verdict)
    return reason.to_dict() if reason else None


def replay_corpus(
    specs: list[CorpusSpec],
    *,
    device: str,
    config: CompileConfig,
    timeout_s: float,
    budget_s: float | None,
    on_case=lambda entry, verdict, wall_s: None,
) -> tuple[dict[str, Verdict | None], dict[str, float], float]:
    """Each spec's verdict (None when the budget ran out first), its wall time, and worker start-up."""
    worker = Worker(device)
    verdicts: dict[str, Verdict | None] = {}
    walls: dict[str, float] = {}
    t_start = time.perf_counter()
    try:
        worker.start()
        for entry in specs:
            if budget_s is not None and time.perf_counter() - t_start > budget_s:
                verdicts[entry.name] = None
                continue
            t0 = time.perf_counter()
            verdicts[entry.name] = worker.run(CaseRequest(entry.spec, device, config), timeout_s)
            walls[entry.name] = round(time.perf_counter() - t0, 3)
            on_case(entry, verdicts[entry.name], walls[entry.name])
    finally:
        worker.stop()
    return verdicts, walls, round(worker.startup_s, 3)


def update_baseline(opts: GateOptions, *, log=print) -> Baseline:
    """Replay the corpus and write what it gives as the baseline (plus fuzz buckets, with --fuzz)."""
    specs = load_corpus(opts.corpus_dir)
    path = opts.baseline_path or default_baseline_path(opts.corpus_dir, opts.device)
    verdicts, walls, _ = replay_corpus(
        specs,
        device=opts.device,
        config=opts.config,
        timeout_s=opts.timeout_s,
        budget_s=None,
        on_case=lambda e, v, w: log(f"{e.name}: {describe_summary(summarize_verdict(v))} ({w:.1f} s)"),
    )
    entries = {}
    for s in specs:
        entry = summarize_verdict(verdicts[s.name])
        entry["digest"] = s.spec.digest()
        entries[s.name] = entry
    known: list[str] = []
    if opts.fuzz_budget_s or opts.fuzz_cases:
        fuzz = run_fuzz(opts, known=(), corpus_buckets=set())
        known = sorted({f["bucket"] for f in fuzz["findings"]})
    key = machine_key(opts.device)
    baseline = Baseline(
        path=path,
        device_type=key["device_type"],
        torch=key["torch"],
        arch=key["arch"],
        config=opts.config.to_dict(),
        specs=entries,
        known_buckets=tuple(known),
    )
    baseline.write()
    return baseline


def run_gate(opts: GateOptions, *, log=lambda msg: None) -> GateResult:
    """Replay the corpus, hold each spec to the baseline, then (optionally) fuzz briefly."""
    import torch

    t0 = time.perf_counter()
    specs = load_corpus(opts.corpus_dir)
    if opts.only:
        unknown = sorted(set(opts.only) - {s.name for s in specs})
        if unknown:
            raise SpecError(f"{opts.corpus_dir}: no corpus specs named {', '.join(unknown)}")
        specs = [s for s in specs if s.name in opts.only]
    path = opts.baseline_path or default_baseline_path(opts.corpus_dir, opts.device)
    baseline = load_baseline(path, device=opts.device)
    notes: list[str] = check_baseline_key(baseline, opts.device, accept_any=opts.baseline_any)
    if baseline.config and baseline.config != opts.config.to_dict():
        notes.append(f"the baseline was written with backend {CompileConfig.from_dict(baseline.config).describe()}; this run uses {opts.config.describe()}")
    names = {s.name for s in specs}
    stale = sorted(set(baseline.specs) - names) if not opts.only else []
    if stale:
        notes.append(f"baseline entries with no corpus spec (ignored): {', '.join(stale)}")

    verdicts, walls, startup = replay_corpus(
        specs,
        device=opts.device,
        config=opts.config,
        timeout_s=opts.timeout_s,
        budget_s=opts.budget_s,
        on_case=lambda e, v, w: log(f"{e.name}: {describe_summary(summarize_verdict(v))} ({w:.1f} s)"),
    )
    results: list[SpecResult] = []
    for s in specs:
        verdict = verdicts[s.name]
        expected = baseline.specs.get(s.name)
        digest = s.spec.digest()
        if verdict is None:
            results.append(SpecResult(s.name, digest, None, expected, [f"not run: the gate's budget of {opts.budget_s:g} s ran out"], [], None))
            continue
        observed = summarize_verdict(verdict)
        problems, improvements = compare_with_baseline(observed, expected, margin=opts.margin)
        if expected is not None and expected.get("digest") not in (None, digest):
            problems.insert(0, f"the spec changed since the baseline was written (digest {digest}, baseline {expected['digest']}); re-run --update-baseline")
        results.append(
            SpecResult(s.name, digest, observed, expected, problems, improvements, _bucket_of(verdict, s.spec, opts.device), walls.get(s.name, 0.0), _severity_of(verdict))
        )
    t_replay = time.perf_counter() - t0

    fuzz = None
    if opts.fuzz_budget_s or opts.fuzz_cases:
        corpus_buckets = {r.bucket for r in results if r.bucket and r.expected and r.expected["status"] != "ok"}
        fuzz = run_fuzz(opts, known=baseline.known_buckets, corpus_buckets=corpus_buckets)
    result = GateResult(
        device=opts.device,
        torch_version=torch.__version__,
        config=opts.config,
        baseline_path=path,
        margin=opts.margin,
        specs=results,
        notes=notes,
        fuzz=fuzz,
        timings={
            "total_s": round(time.perf_counter() - t0, 3),
            "replay_s": round(t_replay, 3),
            "worker_startup_s": startup,
            "per_spec_s": walls,
        },
    )
    if opts.repro_dir is not None:
        write_failure_repros(result, specs, opts)
    return result


def run_fuzz(opts: GateOptions, *, known: tuple[str, ...], corpus_buckets: set[str]) -> dict[str, Any]:
    """A short seeded campaign; findings that are errors, discrete or compiled-worse, and not
    known (in the baseline's known_buckets or a known corpus divergence), fail the gate.

    With `fuzz_cases` the campaign is a fixed number of cases: deterministic. With only a time
    budget the number of cases depends on the machine's speed.
    """
    from fuzzer.campaign import CampaignOptions, run_campaign
    from fuzzer.store import Store
    from reports.files import child_path

    tmp = Path(tempfile.mkdtemp(prefix="divfuzz-gate-fuzz-"))
    try:
        copts = CampaignOptions(
            device=opts.device,
            out_dir=tmp,
            config=opts.config,
            seed=opts.seed,
            budget_s=opts.fuzz_budget_s,
            max_cases=opts.fuzz_cases,
            timeout_s=opts.timeout_s,
        )
        outcome = run_campaign(copts)
        store = Store(outcome.store_path)
        try:
            findings = []
            for b in store.buckets(run_id=outcome.run_id):
                key = str(b.key)
                gate_worthy = b.key.kind in _ALWAYS_FAIL_KINDS or b.triage == "compiled-worse"
                is_known = key in known or key in corpus_buckets
                folder = None
                if gate_worthy and not is_known and opts.repro_dir is not None and b.folder:
                    (opts.repro_dir / "fuzz").mkdir(parents=True, exist_ok=True)
                    dest = child_path(opts.repro_dir / "fuzz", Path(b.folder).name, what="bucket folder")
                    shutil.copytree(b.folder, dest, dirs_exist_ok=True)
                    folder = str(dest)
                findings.append(
                    {"bucket": key, "kind": b.key.kind, "triage": b.triage, "cases": b.count,
                     "fails_gate": gate_worthy and not is_known, "known": is_known, "repro": folder}
                )
            stats = store.run_stats(outcome.run_id)
        finally:
            store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "seed": opts.seed,
        "max_cases": opts.fuzz_cases,
        "budget_s": opts.fuzz_budget_s,
        "cases": stats["cases"],
        "by_status": dict(sorted(stats["by_status"].items())),
        "findings": findings,
        "failing": [f["bucket"] for f in findings if f["fails_gate"]],
    }


def write_failure_repros(result: GateResult, specs: list[CorpusSpec], opts: GateOptions) -> list[Path]:
    """For each failing spec: a folder with spec.json, gate.json (its result) and repro.py."""
    from reports.files import child_path
    from reports.repro import render_repro

    by_name = {s.name: s for s in specs}
    written = []
    for r in result.specs:
        if r.passed or r.observed is None:
            continue
        opts.repro_dir.mkdir(parents=True, exist_ok=True)
        # The name comes from a corpus file: it must stay a direct child of --repro-dir.
        folder = child_path(opts.repro_dir, r.name, what="corpus spec name")
        folder.mkdir(exist_ok=True)
        spec = by_name[r.name].spec
        (folder / "spec.json").write_text(spec.to_json() + "\n")
        (folder / "gate.json").write_text(json.dumps(r.to_dict(), indent=2) + "\n")
        notes = tuple(f"gate: {p}" for p in r.problems)
        (folder / "repro.py").write_text(
            render_repro(spec, device=opts.device, config=opts.config, title=f"divfuzz gate: {r.name}", notes=notes, timeout_s=int(opts.timeout_s))
        )
        (folder / "repro.py").chmod(0o755)
        written.append(folder)
    return written
