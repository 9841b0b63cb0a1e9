"""The machine a gate baseline was written on, and the one the gate runs on now.

A baseline's key (device type, torch minor, CPU capability or GPU architecture) picks which file
a machine is held to; within one key the bounds still move with the CPU model (two AVX512 EPYCs
gave 0.8% and 7% differing elements on one output of the same spec, at most one ULP on both).
The machine record says which one wrote the file, so a reader can tell why two machines of one
key disagree.

- On the CPU: vendor and model (`/proc/cpuinfo`), the capability ATen dispatches to, the x86
  flags Inductor's C++ code generation reads to pick its vector ISA and build flags
  (`torch/_inductor/cpu_vec_isa.py`: avx2, avx512, avx512_vnni, avx512_bf16, amx_tile, amx_fp16),
  `ATEN_CPU_CAPABILITY` when set (Inductor follows it), and torch's thread count in the worker.
- On a GPU: its name, compute capability, CUDA version, and the worker's CPU thread count.

`describe_machine` runs inside a gate worker (`Worker.call`), where the cases run. A record read
from a baseline is untrusted: `check_machine` bounds every string and number, and what is
printed goes through `printable` (control characters escaped).
"""

from __future__ import annotations

import os
import platform
from typing import Any, Callable

MAX_TEXT = 200  # characters in any machine string
MAX_FLAGS = 32
MAX_THREADS = 65536

# Field name -> (what it holds, as a message says it). Field order is display order.
_TEXT, _TEXT_OR_NULL, _FLAGS, _THREADS = (
    f"a string of at most {MAX_TEXT} characters",
    f"null or a string of at most {MAX_TEXT} characters",
    f"a list of at most {MAX_FLAGS} flag names of at most {MAX_TEXT} characters",
    f"an integer from 1 to {MAX_THREADS}",
)
MACHINE_FIELDS: dict[str, dict[str, str]] = {
    "cpu": {"vendor": _TEXT, "model": _TEXT, "capability": _TEXT, "isa_flags": _FLAGS,
            "aten_cpu_capability": _TEXT_OR_NULL, "threads": _THREADS},
    "cuda": {"gpu": _TEXT, "compute_capability": _TEXT, "cuda": _TEXT_OR_NULL, "threads": _THREADS},
}

# The x86 flags `cpu_vec_isa.py` asks torch about (x86_isa_checker, VecAVX512, VecAMX), in its order.
INDUCTOR_ISA_PROBES = (
    ("avx2", "_is_avx2_supported"),
    ("avx512", "_is_avx512_supported"),
    ("avx512_vnni", "_is_vnni_supported"),
    ("avx512_bf16", "_is_avx512_bf16_supported"),
    ("amx_tile", "_is_amx_tile_supported"),
    ("amx_fp16", "_is_amx_fp16_supported"),
)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def printable(text: Any) -> str:
    """`text` with every non-printable character escaped (`\\x1b`), for a terminal, markdown or XML."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def _clip(text: str) -> str:
    return printable(text.strip())[:MAX_TEXT]


def _cpuinfo() -> dict[str, str]:
    """The first `vendor_id` and `model name` in /proc/cpuinfo (empty where there is none)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if sep and key in ("vendor_id", "model name") and key not in found:
                    found[key] = value.strip()
                if len(found) == 2:
                    break
    except OSError:
        pass
    return found


def inductor_isa_flags() -> list[str]:
    """The flags of INDUCTOR_ISA_PROBES this host has (the host's, whatever ATEN_CPU_CAPABILITY says)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    flags = []
    for name, probe in INDUCTOR_ISA_PROBES:
        check = getattr(torch.cpu, probe, None)
        if check is not None and check():
            flags.append(name)
    if "avx512_vnni" in flags and "avx512" not in flags:  # Inductor's avx512_vnni is avx512 and VNNI
        flags.remove("avx512_vnni")
    return flags


def describe_machine(device: str) -> dict[str, Any]:
    """This process's machine as baseline data (a `Worker.call` target: JSON-able)."""
    # lazy: torch-free module: it loads torch only when this runs
    import torch

    threads = torch.get_num_threads()
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return {"device_type": "cuda", "gpu": _clip(torch.cuda.get_device_name(index)),
                "compute_capability": f"{major}.{minor}", "cuda": torch.version.cuda, "threads": threads}
    info = _cpuinfo()
    aten = os.environ.get("ATEN_CPU_CAPABILITY")
    return {
        "device_type": "cpu",
        "vendor": _clip(info.get("vendor_id") or "unknown"),
        "model": _clip(info.get("model name") or platform.processor() or platform.machine() or "unknown"),
        "capability": _clip(torch.backends.cpu.get_cpu_capability()),
        "isa_flags": inductor_isa_flags(),
        "aten_cpu_capability": None if aten is None else _clip(aten),
        "threads": threads,
    }


def check_machine(machine: Any, device_type: str, bad: Callable[[str, Any], Exception]) -> dict[str, Any]:
    """A machine record read from a baseline, checked field by field; `bad(what, value)` builds the
    exception naming the field. Unknown fields are refused too: the record is shown to people."""
    fields = MACHINE_FIELDS.get(device_type)
    if fields is None:
        raise bad("device_type cpu or cuda for a machine record", device_type)
    if not isinstance(machine, dict):
        raise bad("an object for machine", machine)
    if machine.get("device_type") != device_type:
        raise bad(f"machine.device_type {device_type!r} (the baseline's)", machine.get("device_type"))
    extra = sorted(set(machine) - set(fields) - {"device_type"})
    if extra:
        raise bad(f"only the fields {sorted(fields)} in machine", extra[:5])
    for name, kind in fields.items():
        if name not in machine:
            raise bad(f"{kind} for machine.{name}", _MISSING)
        if not _machine_field_ok(machine[name], kind):
            raise bad(f"{kind} for machine.{name}", machine[name])
    return machine


def _machine_field_ok(value: Any, kind: str) -> bool:
    def text(v: Any) -> bool:
        return isinstance(v, str) and len(v) <= MAX_TEXT

    if kind == _TEXT:
        return text(value)
    if kind == _TEXT_OR_NULL:
        return value is None or text(value)
    if kind == _FLAGS:
        return isinstance(value, list) and len(value) <= MAX_FLAGS and all(text(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_THREADS


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return " ".join(printable(v) for v in value) or "-"
    return printable(value)


def machine_rows(baseline: dict[str, Any] | None, current: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The two machines side by side, one row per field, escaped for display: `field`,
    `baseline`, `current` (`unrecorded` where a side has no record) and `differs`."""
    device_type = (current or baseline or {}).get("device_type", "cpu")
    rows = []
    for name in MACHINE_FIELDS.get(device_type, {}):
        b = _show(baseline.get(name)) if baseline else "unrecorded"
        c = _show(current.get(name)) if current else "unrecorded"
        rows.append({"field": name, "baseline": b, "current": c, "differs": b != c})
    return rows
