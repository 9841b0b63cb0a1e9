"""Gate baselines: one data file per machine key, holding each corpus spec's expected verdict.

A baseline is keyed by device type, torch minor version, and CPU capability or GPU architecture
(`baseline-cpu-2.13-avx512.json`), because vectorized CPU kernels differ by ISA as GPU kernels do
by architecture. It lists, per corpus spec, the expected verdict summary (`summarize_verdict`):
clean (every output bitwise equal to eager), a known divergence with its bounds (max ULP,
differing fraction, NaN/Inf mismatches, integer flips and their largest step), or a known error,
and the severity policy's judgement (`severity`: severity, rule, output; null when clean), which
the gate judges by (`divfuzz.fuzzer.gate.policy`). A spec missing from the baseline is expected clean.
It also records the machine that wrote it (`divfuzz.fuzzer.gate.machine`): within one key the bounds
move with the CPU model, and the gate shows both machines when they do.

Invariants: `load_baseline` refuses a file that lacks any field the policy reads (BaselineError
naming the file and field), and, for judging, an entry without a severity or a file without its
machine (a baseline written before they were recorded): the gate never falls back to raw bounds,
and the message gives the command that rewrites the file (`rewrite_command`). A baseline written
for another machine key is refused unless the caller accepts any (`--baseline-any`), and then
the mismatch is a note in every report.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from divfuzz.fuzzer.gate.machine import check_machine
from divfuzz.records.config import CompileConfig
from divfuzz.records.errors import BaselineError, DivfuzzError
from divfuzz.records.outcomes import Status
from divfuzz.records.severity import Severity, SeverityReason
from divfuzz.records.verdict import Verdict
from divfuzz.records.safe_paths import read_user_file
from divfuzz.fuzzer.finding.judgement import judge

BASELINE_SCHEMA_VERSION = 3  # 2: keyed by CPU capability / GPU architecture (`arch`); 3: the machine, severities required

# The key's fields, as a baseline may hold them: they name files and go into the rewrite command.
KEY_PATTERNS = {"device_type": re.compile(r"cpu|cuda"), "torch": re.compile(r"[0-9]{1,3}\.[0-9]{1,3}"),
                "arch": re.compile(r"[a-z0-9_]{1,32}")}


def torch_minor() -> str:
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"{major}.{minor}"


def device_arch(device: str) -> str:
    """What picks the kernels on this device: the CPU capability ATen dispatches to (`avx512`,
    `avx2`, ...; `ATEN_CPU_CAPABILITY` lowers it, and Inductor's C++ codegen follows the same
    variable) or the GPU's compute capability (`sm_90`)."""
    # lazy: torch-free module: it loads torch only when this runs
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


def default_baseline_name(key: dict[str, str]) -> str:
    return f"baseline-{key['device_type']}-{key['torch']}-{key['arch']}.json"


def default_baseline_path(corpus_dir: Path, device: str) -> Path:
    return corpus_dir / default_baseline_name(machine_key(device))


_UNJUDGED = object()


def summarize_verdict(verdict: Verdict, reason=_UNJUDGED) -> dict[str, Any]:
    """A verdict as baseline data: the status, the error type, each differing output's measures, and
    its severity (`severity_summary`): `reason`, the verdict's `severity_of` when the caller judged
    it already (the gate judges each replay once), else judged here."""
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
    return {"status": verdict.status.value, "error_type": verdict.error_type, "outputs": outputs,
            "severity": severity_summary(judge(verdict).reason if reason is _UNJUDGED else reason)}


def severity_summary(reason: SeverityReason | None) -> dict[str, str] | None:
    """The severity policy's judgement of a verdict (`divfuzz.oracles.severity_policy.severity_of`) as baseline
    data: severity, rule and output, or None when nothing diverges. The rule's sentence is left
    out: its numbers move run to run, and the gate judges the severity, not the numbers."""
    return None if reason is None else {"severity": reason.severity.value, "rule": reason.rule, "output": reason.output}


@dataclass(frozen=True)
class Baseline:
    path: Path
    device_type: str
    torch: str
    arch: str
    config: dict[str, Any]
    specs: dict[str, dict[str, Any]]
    known_buckets: tuple[str, ...] = ()
    machine: dict[str, Any] | None = None  # divfuzz.fuzzer.gate.machine.describe_machine of the writer

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "device_type": self.device_type,
            "torch": self.torch,
            "arch": self.arch,
            "config": self.config,
            "machine": self.machine,
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


def load_baseline(path: Path, *, device: str | None = None, corpus_dir: Path | None = None,
                  judging: bool = True) -> Baseline:
    """Read and check a baseline file; every problem raises BaselineError naming the file and the
    field. Checked here: the machine key fields, every bound the comparison reads (finite,
    non-negative), the config, the machine record; not checked here: whether the key matches
    this machine (`check_baseline_key`).

    `judging` (the gate): a file the gate cannot judge by is refused, naming the command that
    rewrites it (`corpus_dir`, default the file's folder, goes into it): an entry without a
    severity, or no machine record. Without `judging` (`corpus prune`, which reads only which
    specs are known divergences) such a file is read as it is."""
    data = _read_baseline_json(path, device)

    def bad(what: str, value: Any) -> BaselineError:
        return BaselineError(f"{path}: expected {what} but got {value!r}"[:2000])

    if not isinstance(data, dict):
        raise bad("a JSON object at the top level", type(data).__name__)
    version = data.get("schema_version")
    _check_schema_version(path, version, bad)
    for name, pattern in KEY_PATTERNS.items():
        if not isinstance(data.get(name), str) or not pattern.fullmatch(data[name]):
            raise bad(f"a {name} matching {pattern.pattern}", data.get(name))
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
    for name, entry in specs.items():
        _check_spec_entry(name, entry, bad)
    known = data.get("known_buckets", [])
    if not isinstance(known, list) or not all(isinstance(k, str) for k in known):
        raise bad("a list of strings for known_buckets", known)
    machine = data.get("machine")
    if machine is not None or version >= 3:
        machine = check_machine(machine, data["device_type"], bad)
    baseline = Baseline(
        path=path,
        device_type=data["device_type"],
        torch=data["torch"],
        arch=data["arch"],
        config=config,
        specs=specs,
        known_buckets=tuple(known),
        machine=machine,
    )
    if judging:
        _refuse_unjudgeable(baseline, corpus_dir if corpus_dir is not None else path.parent)
    return baseline


def _refuse_unjudgeable(baseline: Baseline, corpus_dir: Path) -> None:
    """BaselineError when the gate cannot judge by this file: entries without a severity (the
    gate judges by severity and never falls back to raw bounds, which move with the CPU model
    within one capability), or no record of the machine that wrote it."""
    unjudged = sorted(name for name, entry in baseline.specs.items() if "severity" not in entry)
    if unjudged:
        named = ", ".join(unjudged[:3]) + (f" and {len(unjudged) - 3} more" if len(unjudged) > 3 else "")
        why = (f"specs {named} record no severity (written before baselines recorded severities); "
               f"the gate judges each spec by its severity, never by raw bounds")
    elif baseline.machine is None:
        why = "it records no machine (written before baselines recorded the CPU model or GPU that wrote them)"
    else:
        return
    raise BaselineError(
        f"{baseline.path}: {why}. Rewrite it on a machine of its key ({describe_key(baseline.key())}), "
        f"on a build you trust, and commit it: {rewrite_command(baseline, corpus_dir)}"
    )


def rewrite_command(baseline: Baseline, corpus_dir: Path) -> str:
    """The shell command that writes `baseline` again for its own key and compile config."""
    key = baseline.key()
    words = ["divfuzz", "gate", "--device", key["device_type"], "--corpus", str(corpus_dir)]
    if baseline.path != corpus_dir / default_baseline_name(key):
        words += ["--baseline", str(baseline.path)]
    if baseline.config:
        config = CompileConfig.from_dict(baseline.config)
        if config != CompileConfig():
            words += ["--backend", config.backend]
            for k, v in config.inductor:
                words += ["--inductor", f"{k}={json.dumps(v)}"]
            words += ["--dynamic"] if config.dynamic else []
            words += ["--mode", config.mode] if config.mode else []
    words.append("--update-baseline")
    # ATen dispatches to the capability the variable names, and Inductor's C++ follows it: one
    # x86 host writes the avx2 baseline as well as its own.
    env = f"ATEN_CPU_CAPABILITY={key['arch']} " if key["device_type"] == "cpu" else ""
    return env + " ".join(shlex.quote(w) for w in words)


def _read_baseline_json(path: Path, device: str | None) -> Any:
    """The file's JSON (strict: no NaN or Infinity), or BaselineError saying why there is none."""
    if not path.exists():
        hint = f" for {describe_key(machine_key(device))}" if device else ""
        others = sorted(p.name for p in path.parent.glob("baseline-*.json")) if path.parent.is_dir() else []
        raise BaselineError(
            f"{path}: no baseline{hint}. A missing baseline is not a pass: write one with "
            f"`divfuzz gate --update-baseline` (on a build you trust) and commit it"
            + (f" (this corpus has {', '.join(others)})" if others else "")
        )
    try:
        return json.loads(read_user_file(path, what="baseline"), parse_constant=_refuse_constant)
    except (OSError, UnicodeDecodeError) as e:
        raise BaselineError(f"{path}: cannot read baseline ({e})") from None
    except json.JSONDecodeError as e:
        raise BaselineError(f"{path}: baseline is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a baseline (its JSON is nested deeper than Python reads)") from None
    except ValueError as e:  # NaN, Infinity or -Infinity: Python's json reads them, JSON does not
        raise BaselineError(f"{path}: baseline is not valid JSON ({e})") from None
    except RecursionError:
        raise BaselineError(f"{path}: baseline JSON is nested too deeply") from None


def _check_schema_version(path: Path, version: Any, bad) -> None:
    if isinstance(version, bool):  # JSON true is no version (and Python would read it as 1)
        raise bad(f"schema_version 1..{BASELINE_SCHEMA_VERSION}", version)
    if version == 1:
        raise BaselineError(
            f"{path}: a schema_version 1 baseline is keyed by torch version only, not by CPU capability or GPU "
            f"architecture; write it again with `divfuzz gate --update-baseline`"
        )
    if not isinstance(version, int) or not 1 <= version <= BASELINE_SCHEMA_VERSION:
        raise bad(f"schema_version 1..{BASELINE_SCHEMA_VERSION}", version)


def _check_spec_entry(name: str, entry: Any, bad) -> None:
    """One spec's expected summary: a status, an error type or null, and every bound of each output."""
    if not isinstance(entry, dict) or entry.get("status") not in {s.value for s in Status} or not isinstance(entry.get("outputs"), dict):
        raise bad(f"specs.{name} to be an object with a status and outputs", entry)
    if not isinstance(entry.get("error_type"), (str, type(None))):
        raise bad(f"a string or null for specs.{name}.error_type", entry.get("error_type"))
    if not isinstance(entry.get("digest"), (str, type(None))):
        raise bad(f"a string for specs.{name}.digest", entry.get("digest"))
    if "severity" in entry:
        sev = entry["severity"]
        valid = {s.value for s in Severity}
        if sev is not None and not (isinstance(sev, dict) and sev.get("severity") in valid
                                    and isinstance(sev.get("rule"), str) and isinstance(sev.get("output"), str)):
            raise bad(f"null or an object with a severity in {sorted(valid)}, a rule and an output for specs.{name}.severity", sev)
    for out_name, o in entry["outputs"].items():
        where = f"specs.{name}.outputs.{out_name}"
        if not isinstance(o, dict) or o.get("kind") not in _OUTPUT_FIELDS:
            raise bad(f"{where} to be an object of kind float or int", o)
        for field_name, kind in _OUTPUT_FIELDS[o["kind"]].items():
            if not _field_ok(o.get(field_name), kind):
                raise bad(f"{kind} for {where}.{field_name}", o.get(field_name, "<missing>"))


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
