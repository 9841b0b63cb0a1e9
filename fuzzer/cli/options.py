"""What every divfuzz command shares: the consoles, option parsing (budgets, devices, compile
options, name lists), output-path checks, and the command class. Imports nothing from the
commands themselves (they import this).
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
from pathlib import Path
from dataclasses import replace

import click
from rich.console import Console
from rich.segment import Segment

from divfuzz.fuzzer.engine.torch_source import inductor_config_keys, torch_build
from divfuzz.records.backends import INDUCTOR
from divfuzz.records.config import check_backend_syntax, parse_inductor_overrides
from divfuzz.records.severity import ORDER
from divfuzz.reports.terminal import terminal_safe
from divfuzz.records.errors import ConfigError, DeviceUnavailableError, OutputError, SpecError, UnknownOpError, UnsafePathError
from divfuzz.records.numbers import checked_number, describe_range, parse_number

SEVERITY_CHOICE = click.Choice([s.value for s in ORDER])

# Text from users and files (paths, names, messages) is printed as it is: no rich markup, no
# emoji codes, no highlighting unless a call asks for markup (`markup=True`) for its own fixed
# words and escapes (`rich.markup.escape`) whatever it interpolates.
_PLAIN = {"markup": False, "emoji": False, "highlight": False}


class TerminalSafeConsole(Console):
    """A console that prints every piece of text terminal-safe (`divfuzz.reports.terminal`): an
    ESC, OSC, C1 or bidirectional character from a file is shown as an escape, whatever the call
    and whatever holds the text (a string, a table cell, a live view). Rich's own styles and
    cursor moves are added after, so they still work."""

    def _render_buffer(self, buffer):
        return super()._render_buffer(
            Segment(terminal_safe(text), style, control) if not control else Segment(text, style, control)
            for text, style, control in buffer)


console = TerminalSafeConsole(stderr=True, **_PLAIN)
# Wide when piped (CI logs), so tables are not squeezed to 80 columns.
out = TerminalSafeConsole(**_PLAIN) if sys.stdout.isatty() else TerminalSafeConsole(width=200, soft_wrap=True, **_PLAIN)  # piped: lines stay whole

_BUDGET = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MAX_DURATION_S = 366 * 24 * 3600  # a year: longer is a typo, and past it timers overflow
MAX_WORKERS = 1024


def parse_budget(text: str, option: str = "--budget") -> float:
    """'90s', '10m', '8h', '1h30m' -> seconds; a bare number is seconds. More than 0 and at most
    a year (0 is not "no limit": leave the option out for that); errors name `option`."""
    t = str(text).strip().lower()
    if len(t) > 40:
        raise ConfigError(f"Expected a duration like 90s, 10m, 8h or 1h30m for {option} but got {t[:40]!r}...")
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        m = _BUDGET.match(t)
        if not t or not m or not any(m.groups()):
            raise ConfigError(f"Expected a duration like 90s, 10m, 8h or 1h30m for {option} but got {text!r}")
        h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = float(h * 3600 + mi * 60 + s)
    if seconds <= 0:
        raise ConfigError(f"{option} {text!r}: expected a duration of more than 0 s (leave {option} out for none)")
    return checked_number(seconds, f"{option} {text!r} in seconds", low=1e-3, high=MAX_DURATION_S)


class Number(click.ParamType):
    """A click type for a number: finite and in range, through `divfuzz.records.numbers` (the one rule
    for numbers from any option or file). `nan`, `inf`, a 30-digit seed and a bool are refused
    naming the option, before any work. `--help` shows `metavar` (N, SECONDS, ...), as other
    CLIs do; the range goes into the error message and, where it matters, the option's help."""

    def __init__(self, *, low=None, high=None, integer: bool = False, metavar: str | None = None):
        self.low, self.high, self.integer = low, high, integer
        self.name = describe_range(low=low, high=high, integer=integer)
        self.metavar = metavar or ("N" if integer else "NUMBER")

    def get_metavar(self, param, ctx=None):
        return self.metavar

    def convert(self, value, param, ctx):
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return checked_number(value, "value", low=self.low, high=self.high, integer=self.integer)
            return parse_number(value, "value", low=self.low, high=self.high, integer=self.integer)
        except ConfigError as e:
            self.fail(str(e).removeprefix("value: "), param, ctx)


SEED = Number(low=0, high=2**63 - 1, integer=True, metavar="SEED")  # SQLite's integer holds it
TIMEOUT = Number(low=1, high=7 * 24 * 3600, metavar="SECONDS")
WORKER_COUNT = Number(low=1, high=MAX_WORKERS, integer=True)
CASE_COUNT = Number(low=1, high=2**63 - 1, integer=True)
RUN_ID = Number(low=1, high=2**63 - 1, integer=True, metavar="RUN")
BUCKET_ID = Number(low=1, high=2**63 - 1, integer=True, metavar="N")  # a store's row id: SQLite's integer holds it


class WorkersType(click.ParamType):
    """`auto` or a whole number of at least `minimum`."""

    name = "auto|N"

    def __init__(self, minimum: int = 1):
        self.minimum = minimum

    def get_metavar(self, param, ctx=None):
        return "auto|N"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "auto":
            return value
        try:
            count = int(value) if len(str(value)) <= 20 else None
            if count is None or count > MAX_WORKERS:
                raise ValueError(value)
        except (TypeError, ValueError):
            self.fail(f"Expected auto or a whole number from {self.minimum} to {MAX_WORKERS} but got {str(value)[:40]!r}", param, ctx)
        if count < self.minimum:
            self.fail(f"Expected auto or a whole number of at least {self.minimum} but got {value!r}", param, ctx)
        return count


WORKERS = WorkersType()
WORKERS_HELP = ("Worker processes: auto (sized from this host's cores, GPUs and free memory) or a count.")

DEVICE_HELP = "auto (a CUDA GPU when there is one, else the CPU), cpu, cuda or cuda:N."


def device_option(f):
    """`--device`, the same for every command that runs cases."""
    return click.option("--device", default="auto", show_default=True, metavar="DEVICE", help=DEVICE_HELP)(f)


_DEVICE_NAME = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]{1,4})$")


def check_device_early(device: str) -> None:
    """Refuse a device that cannot be used here, before torch is imported (seconds on a warm host,
    about 22 s on a cold one): a name that is not auto, cpu, cuda or cuda:N, or CUDA where this
    host certainly has none (`_no_cuda_here`). Where it cannot be told without torch, it passes,
    and `resolve_device` decides with torch."""
    if not _DEVICE_NAME.match(str(device)):
        raise DeviceUnavailableError(f"Expected --device auto, cpu or cuda[:N] but got {str(device)[:60]!r}")
    if device.startswith("cuda"):
        why = _no_cuda_here()
        if why is not None:
            raise DeviceUnavailableError(f"--device {device}: no CUDA GPU is available to this torch ({why})")


def _no_cuda_here() -> str | None:
    """Why this host certainly has no CUDA device for torch, told without importing it, or None
    when only torch can tell: a torch built without CUDA or ROCm; CUDA_VISIBLE_DEVICES hiding every
    GPU; a Linux host (not WSL, whose GPUs have no /dev/nvidia* node) without NVIDIA's device nodes."""
    build = torch_build()
    if build is None:
        return None
    version = build["__version__"]
    if not build.get("cuda") and not build.get("hip"):
        return f"{version}, built without CUDA"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return f"{version}; CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    nvidia_only = build.get("cuda") and not build.get("hip")
    if (nvidia_only and sys.platform.startswith("linux") and not os.path.exists("/dev/dxg")
            and not os.path.exists("/dev/nvidiactl") and not any(Path("/dev").glob("nvidia[0-9]*"))):
        return f"{version}; this host has no NVIDIA GPU device (/dev/nvidia*)"
    return None


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is there, else 'cpu'; a CUDA device that is not there is an error."""
    check_device_early(device)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"--device {device}: no CUDA GPU is available to this torch ({torch.__version__})")
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
        return device
    if device != "cpu":
        raise DeviceUnavailableError(f"Expected --device auto, cpu or cuda[:N] but got {device!r}")
    return device


def check_compile_options_early(backend: str, inductor: tuple[str, ...], where: str = "--inductor") -> None:
    """Refuse a malformed --backend and a bad --inductor item before torch is imported (in well
    under a second, where the import takes 2 to 20 s): a key that is not one of the switches a
    config may set (`divfuzz.records.config.check_inductor_override`), a value of the wrong type,
    or a switch this torch's Inductor does not have (its `config.py` read as text,
    `divfuzz.fuzzer.engine.torch_source`). What only torch can tell (a backend that does not
    resolve; a config file that could not be read) `compile_config` decides later."""
    check_backend_syntax(backend, where="--backend")
    overrides = parse_inductor_overrides(inductor)
    keys = inductor_config_keys() if overrides else None
    for key in overrides:
        if keys is not None and key not in keys:
            raise ConfigError(f"{where}: unknown Inductor config key {key!r}: the installed torch's Inductor has no such "
                              "switch (torch/_inductor/config.py)")


def compile_config(backend: str, inductor: tuple[str, ...], dynamic: bool, mode: str | None):
    """The CompileConfig of the compile options, checked with torch (the backend resolves, every
    Inductor key exists); `check_compile_options_early` has refused what is bad without torch."""
    check_compile_options_early(backend, inductor)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.records.config import CompileConfig
    from divfuzz.fuzzer.engine.compile import resolve_backend, validate_inductor_overrides

    resolve_backend(backend)
    overrides = parse_inductor_overrides(inductor)
    validate_inductor_overrides(overrides)
    return CompileConfig(backend=backend, dynamic=dynamic or False, mode=mode).with_inductor(**overrides)


def against_compile_config(against: str | None, config):
    """`--against B`: `config` with B as its backend (the same Inductor overrides, dynamic and mode);
    ConfigError (exit 2) for a name that does not resolve."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.engine.compile import resolve_backend

    if against is None:
        return None
    check_backend_syntax(against, where="--against")
    resolve_backend(against)
    return replace(config, backend=against)


def check_backend_capabilities(config, against, ops, dtypes) -> None:
    """ConfigError (exit 2) when `--ops` or `--dtypes` ask for what a backend declares it cannot compile."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.records.backends import capabilities_of, check_requested

    names = " and ".join(repr(b) for b in (config.backend, against.backend if against else None) if b)
    check_requested(capabilities_of(config.backend, against.backend if against else None), ops, dtypes, backends=names)


# OS errors that are the environment's, not divfuzz's: said plainly, with the path.
OS_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
}


def check_out_dir(path: Path, option: str, *, no_link: bool = False) -> Path:
    """Make sure `path` is a folder divfuzz can write, before any work starts, without creating
    anything: a probe file is written to and removed from the deepest folder that exists on the way
    (the writers create the folder when they have something to write, so a refused input leaves no
    trace). Errors name the option and say why (a file in the way, read-only, disk full). With
    `no_link`, a symlink at `path` is refused too: for a folder whose writer never writes through
    one (`minimize --repro-dir`, written as a bucket folder is), said here rather than at the end."""
    if no_link and os.path.islink(path):
        raise UnsafePathError(f"{option} {path}: is a symlink (to {os.readlink(path)}); divfuzz writes it only as a real "
                              "folder, never through a link: refused before any work, and left as it is (name the folder "
                              "it points to, or another)")
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"{option} {path}: {parent} is {'a regular file' if parent.is_file() else 'not a folder'}, not a folder")
    existing = next(p for p in [path, *path.parents] if p.exists())
    try:
        fd, probe = tempfile.mkstemp(prefix=".divfuzz-probe-", dir=existing)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write there ({OS_REASONS.get(e.errno, e.strerror)})") from None
    return path


def check_out_file(path: Path | None, option: str) -> None:
    """An output file's folder must be writable before the work starts (the file is written at the end)."""
    if path is None:
        return
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a folder, expected a file path")
    check_out_dir(path.parent, option)
    path.parent.mkdir(parents=True, exist_ok=True)  # the file itself is written at the end


class DivfuzzCommand(click.Command):
    """A command that leaves its parsed options in the shared `ctx.meta`, so that the group's
    error handler can put a traceback log into the command's --out folder."""

    def invoke(self, ctx):
        ctx.meta["divfuzz.params"] = ctx.params
        return super().invoke(ctx)


BACKEND_HELP = "The compiler under test: a torch.compile backend name, onnxrt, nvfuser, or module:function."
INDUCTOR_HELP = "An Inductor config switch for the compile, e.g. emulate_precision_casts=true (repeatable)."


def compile_options(f):
    f = click.option("--backend", default=INDUCTOR, show_default=True, metavar="NAME", help=BACKEND_HELP)(f)
    f = click.option("--inductor", multiple=True, metavar="KEY=VALUE", help=INDUCTOR_HELP)(f)
    f = click.option("--dynamic", is_flag=True, help="Compile with dynamic=True.")(f)
    f = click.option("--mode", default=None, metavar="MODE", help="torch.compile mode, e.g. max-autotune.")(f)
    return f


def oracle_options(f):
    """`--oracle numeric|perf` and `--perf-margin`: what a case is judged by."""
    f = click.option("--perf-margin", type=Number(low=0.0, high=10.0, metavar="FRACTION"), default=None,
                     help="Perf oracle: the slowdown timing noise allows, as a fraction from 0 to 10 "
                          "(default: measured per device).")(f)
    f = click.option("--oracle", type=click.Choice(["numeric", "perf"]), default="numeric", show_default=True,
                     help="numeric: eager vs compiled vs fp64 numbers; perf: eager vs compiled time (slower-fwd, slower-bwd).")(f)
    return f


def registered_ops() -> tuple[str, ...]:
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.generators.registry import all_ops

    return tuple(sorted(all_ops()))


def names_option(text: str | None, option: str, *, known: tuple[str, ...]) -> tuple[str, ...] | None:
    if not text:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UnknownOpError(f"{option}: unknown name(s) {unknown or text!r}; known: {', '.join(known)}")
    return names


def read_input(path: Path) -> str:
    """A file the user named (a spec): symlinks followed, but a FIFO or a device is refused, never waited on."""
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.records.safe_paths import read_user_file

    try:
        return read_user_file(path, what="input")
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file") from None


def load_spec_early(text: str, source: str):
    """The GraphSpec of a spec file's text, loaded and validated (`divfuzz.generators.validate.load_spec`: SpecError,
    UnknownOpError or InvalidGraphError naming the file and field) before torch is imported: the
    validator is torch-free, so a bad spec is refused in well under a second."""
    # lazy: CLI start-up: `divfuzz --help` loads no op registry, no torch and no command's machinery
    from divfuzz.generators.validate import load_spec

    return load_spec(text, source=source)


def against_summary(against) -> str:
    """One line per `--against` verdict: who is further from fp64, with each output's RMSEs."""
    if against.failed:
        return f"against: {against.backend} vs {against.against}: the {against.failed} side failed"
    rows = "; ".join(f"{p.name}: eager {p.rmse_eager:.3g}, {against.backend} {p.rmse_backend:.3g}, "
                     f"{against.against} {p.rmse_against:.3g} (further: {p.further})" for p in against.outputs if p.further != "equal")
    return f"against: {against.backend} vs {against.against}: further from fp64: {against.further_from_fp64}" + (f" — RMSE vs fp64: {rows}" if rows else "")
