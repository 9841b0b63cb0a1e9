"""The `divfuzz` command line: fuzz, replay, report (and the commands later modules add).

Exit codes: 0 when it ran (findings are results, not errors); 2 for bad input, with a message
naming what was wrong; a killed campaign also exits 2 after saving, and resumes when re-run.
A failure of divfuzz itself also exits 2, with one line and the path of a log holding the
traceback: never 0, and never 1 (which `gate` and `repro.py` use for "the compiler diverges").
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from generators.errors import DivfuzzError

console = Console(stderr=True)
# Wide when piped (CI logs), so tables are not squeezed to 80 columns.
out = Console() if sys.stdout.isatty() else Console(width=200, soft_wrap=True)  # piped: lines stay whole

_BUDGET = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_budget(text: str) -> float:
    """'90s', '10m', '8h', '1h30m' -> seconds; a bare number is seconds."""
    from fuzzer.errors import ConfigError

    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    m = _BUDGET.match(t)
    if not t or not m or not any(m.groups()):
        raise ConfigError(f"Expected a duration like 90s, 10m, 8h or 1h30m for --budget but got {text!r}")
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return float(h * 3600 + mi * 60 + s)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is there, else 'cpu'; a CUDA device that is not there is an error."""
    import torch

    from fuzzer.errors import DeviceUnavailableError

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


def _compile_config(backend: str, inductor: tuple[str, ...], dynamic: bool, mode: str | None):
    from fuzzer.config import CompileConfig, parse_inductor_overrides, resolve_backend, validate_inductor_overrides

    resolve_backend(backend)
    overrides = parse_inductor_overrides(inductor)
    validate_inductor_overrides(overrides)
    return CompileConfig(backend=backend, dynamic=dynamic or False, mode=mode).with_inductor(**overrides)


# OS errors that are the environment's, not divfuzz's: said plainly, with the path.
_OS_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
}


def check_out_dir(path: Path, option: str) -> Path:
    """Make sure `path` is a folder divfuzz can write, before any work starts, without creating
    anything: a probe file is written to and removed from the deepest folder that exists on the way
    (the writers create the folder when they have something to write, so a refused input leaves no
    trace). Errors name the option and say why (a file in the way, read-only, disk full)."""
    from fuzzer.errors import OutputError

    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"{option} {path}: {parent} is a regular file, not a folder")
    existing = next(p for p in [path, *path.parents] if p.exists())
    try:
        fd, probe = tempfile.mkstemp(prefix=".divfuzz-probe-", dir=existing)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write there ({_OS_REASONS.get(e.errno, e.strerror)})") from None
    return path


def check_out_file(path: Path | None, option: str) -> None:
    """An output file's folder must be writable before the work starts (the file is written at the end)."""
    from fuzzer.errors import OutputError

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


def _internal_failure_log(ctx: click.Context) -> Path:
    """Where an unexpected traceback goes: the command's --out folder when it has one, else /tmp."""
    text = traceback.format_exc()
    out_dir = ctx.meta.get("divfuzz.params", {}).get("out_dir")
    for folder in ([Path(out_dir)] if out_dir else []) + [Path(tempfile.gettempdir())]:
        try:
            if folder.is_dir():
                log = folder / f"divfuzz-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
                log.write_text(text)
                return log
        except OSError:
            continue
    return Path("<nowhere: no folder was writable>")


class DivfuzzGroup(click.Group):
    """Turns divfuzz's own errors into a message and exit code 2; an unexpected exception too,
    with its traceback in a log file (exit 1 would read as "the compiler diverges")."""

    command_class = DivfuzzCommand

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DivfuzzError as e:
            console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            sys.exit(2)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as e:
            where = f" {e.filename}" if e.filename else ""
            reason = _OS_REASONS.get(e.errno, e.strerror or str(e))
            console.print(f"[bold red]error:[/]{where}: {reason} ({type(e).__name__})", highlight=False, soft_wrap=True)
            sys.exit(2)
        except Exception as e:
            log = _internal_failure_log(ctx)
            what = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            console.print(
                f"[bold red]internal error:[/] divfuzz {ctx.invoked_subcommand or ''} failed on its own error, "
                f"not a compiler finding: {what}; traceback in {log}",
                highlight=False, soft_wrap=True,
            )
            sys.exit(2)


@click.group(cls=DivfuzzGroup)
@click.version_option(package_name="divfuzz")
def main() -> None:
    """divfuzz: find where torch.compile computes different numbers than eager."""


def compile_options(f):
    f = click.option("--backend", default="inductor", show_default=True, help="Registered backend name or module:function.")(f)
    f = click.option("--inductor", multiple=True, metavar="KEY=VALUE", help="Inductor config override (repeatable).")(f)
    f = click.option("--dynamic", is_flag=True, help="Compile with dynamic=True.")(f)
    f = click.option("--mode", default=None, help="torch.compile mode (e.g. max-autotune).")(f)
    return f


@main.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
@click.option("--budget", default=None, help="Wall-clock budget, e.g. 10m or 8h (default 10m unless --max-cases).")
@click.option("--max-cases", type=click.IntRange(min=1), default=None, help="Stop after this many cases.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300.0, show_default=True, help="Seconds per case.")
@click.option("--max-ops", type=click.IntRange(1, 40), default=12, show_default=True)
@click.option("--strict", is_flag=True, help="Bucket every fp32 bit difference, not only compiled-worse ones.")
@click.option("--ops", default=None, help="Comma-separated op names to draw from (default: all).")
@click.option("--dtypes", default=None, help="Comma-separated data dtypes (float32,bfloat16,float16).")
@click.option("--no-live", is_flag=True, help="No live view (plain progress lines).")
@click.option("--no-minimize", is_flag=True, help="Do not minimize and attribute new buckets.")
@click.option("--min-severity", type=click.Choice(["bug", "suspect", "by-design", "noise"]), default="noise", show_default=True, help="Hide buckets below this severity in the summary.")
@compile_options
def fuzz(device, budget, max_cases, seed, out_dir, workers, timeout_s, max_ops, strict, ops, dtypes, no_live, no_minimize, min_severity, backend, inductor, dynamic, mode):
    """Run a campaign: draw graphs, compare eager and compiled, bucket what diverges."""
    from fuzzer.campaign import CampaignOptions, run_campaign

    check_out_dir(out_dir, "--out")  # first: before torch and Inductor are imported
    budget_s = parse_budget(budget) if budget else (None if max_cases else 600.0)
    op_names = _names(ops, "--ops", known=_registered_ops())
    dtype_names = _names(dtypes, "--dtypes", known=("float32", "bfloat16", "float16"))
    device = resolve_device(device)
    config = _compile_config(backend, inductor, dynamic, mode)
    opts = CampaignOptions(
        device=device,
        out_dir=out_dir,
        config=config,
        seed=seed,
        budget_s=budget_s,
        max_cases=max_cases,
        workers=workers,
        strict=strict,
        timeout_s=timeout_s,
        max_ops=max_ops,
        minimize=not no_minimize,
        ops=op_names,
        dtypes=dtype_names,
    )
    signal.signal(signal.SIGTERM, _interrupt_once)
    signal.signal(signal.SIGINT, _interrupt_once)
    console.print(
        f"divfuzz fuzz: device {device}, backend {config.describe()}, seed {seed}, "
        f"{'budget ' + str(int(budget_s)) + ' s (+ ' + str(int(_grace())) + ' s grace for minimization)' if budget_s else ''}{' max ' + str(max_cases) + ' cases' if max_cases else ''}, "
        f"store {out_dir / 'divfuzz.sqlite'}",
        highlight=False,
    )
    live_view = _LiveView(opts) if not no_live and console.is_terminal else _LineView(opts)
    with live_view:
        result = run_campaign(opts, on_progress=live_view.update)
    _print_summary(result, min_severity)
    if result.interrupted:
        console.print(
            f"[bold yellow]interrupted:[/] {result.progress.cases} cases stored; run the same command again to resume",
            highlight=False,
        )
        sys.exit(2)


def _interrupt_once(signum, frame) -> None:
    """SIGINT/SIGTERM: stop the campaign (KeyboardInterrupt) once, and ignore the signals that
    follow while it saves and reports: `timeout` and CI runners send several, and a second one
    must not cut the shutdown short (the campaign gives its slots at most 30 s)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


class _LineView:
    """Progress as plain lines (CI logs, pipes): one every 10 cases."""

    def __init__(self, opts):
        self.opts = opts

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, p) -> None:
        if p.cases % 10 == 0:
            console.print(_status_line(self.opts, p), highlight=False)


class _LiveView(_LineView):
    def __enter__(self):
        self.live = Live(console=console, refresh_per_second=2, transient=True)
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def update(self, p) -> None:
        self.live.update(_status_line(self.opts, p))


def _grace() -> float:
    from fuzzer.campaign import BUDGET_GRACE_S

    return BUDGET_GRACE_S


def _status_line(opts, p) -> str:
    elapsed = time.time() - p.started
    rate = p.cases / elapsed * 60 if elapsed > 0 else 0.0
    left = f", {max(0, opts.budget_s - elapsed):.0f} s left" if opts.budget_s else ""
    done = f"/{opts.max_cases}" if opts.max_cases else ""
    return (
        f"{p.cases}{done} cases ({rate:.1f}/min), {p.findings} findings in {len(p.buckets)} buckets "
        f"({p.new_buckets} new){left}"
    )


def _print_summary(result, min_severity: str = "noise") -> None:
    """The run's buckets led by severity: bug, then suspect, each with its reason; by-design and
    noise folded into one line per culprit."""
    from fuzzer.store import Store
    from oracles.severity import ORDER, Severity
    from reports.markdown import culprit_of, fold_by_culprit

    p = result.progress
    store = Store(result.store_path, create=False)
    try:
        elapsed = time.time() - p.started
        out.print(
            f"run {result.run_id}{' (resumed)' if result.resumed else ''}: {p.cases} cases in {elapsed:.0f} s "
            f"({p.cases / elapsed * 60 if elapsed else 0:.1f}/min); statuses "
            + ", ".join(f"{k} {v}" for k, v in sorted(p.by_status.items()))
            + (f"; {p.skipped} stored cases skipped" if p.skipped else ""),
            highlight=False,
        )
        if result.cut_at_grace:
            from fuzzer.campaign import BUDGET_GRACE_S

            out.print(f"budget reached: minimization got what was left plus {BUDGET_GRACE_S:g} s of grace; "
                      "work still in flight then was dropped (re-run to resume it)", highlight=False)
        floor = Severity(min_severity)
        buckets = store.buckets(run_id=result.run_id)
        out.print("buckets by severity: " + ", ".join(f"{sum(b.severity == s.value for b in buckets)} {s.value}" for s in ORDER), highlight=False)
        table = Table(title=f"bug and suspect buckets of run {result.run_id}")
        for col in ("id", "severity", "kind", "dtype", "ops", "culprit", "reason", "cases", "new", "folder"):
            table.add_column(col)
        for sev in (Severity.BUG, Severity.SUSPECT):
            if not sev.at_least(floor):
                continue
            for b in sorted((b for b in buckets if b.severity == sev.value), key=lambda b: (-b.count, b.id)):
                k = b.key
                table.add_row(
                    str(b.id), sev.value, k.kind + (f" {k.detail}" if k.detail else ""), k.dtype, k.signature.split(" @ ")[0],
                    culprit_of(b), (b.severity_reason or {}).get("detail", ""), str(b.count),
                    "yes" if b.first_run_id == result.run_id else "", b.folder or "",
                )
        out.print(table)
        folded = [b for b in buckets if b.severity in ("by-design", "noise") and Severity(b.severity).at_least(floor)]
        for sev, culprit, n, cases, ids in fold_by_culprit(folded):
            out.print(f"{sev}: {culprit}: {n} buckets, {cases} cases (buckets {', '.join(map(str, ids[:12]))}{', ...' if len(ids) > 12 else ''})", highlight=False)
    finally:
        store.close()


@main.command()
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--device", default="auto", show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300.0, show_default=True)
@compile_options
def replay(spec_file, device, timeout_s, backend, inductor, dynamic, mode):
    """Re-run one case from a spec.json (in a worker process) and print its verdict."""
    from fuzzer.worker import CaseRequest, Worker
    from generators.validate import load_spec
    from oracles.verdict import finding_of
    from reports.markdown import verdict_table

    spec = load_spec(_read(spec_file), source=str(spec_file))
    device = resolve_device(device)
    config = _compile_config(backend, inductor, dynamic, mode)
    worker = Worker(device)
    try:
        verdict = worker.run(CaseRequest(spec, device, config), timeout_s)
    finally:
        worker.stop()
    finding = finding_of(verdict)
    out.print(f"{spec_file}: {verdict.status.value}" + (f" — {verdict.error_type}: {verdict.error_message}" if verdict.error_type else ""), highlight=False)
    out.print(verdict_table(verdict), highlight=False)
    out.print(f"finding: {finding.kind.value} ({finding.triage})" if finding else "finding: none", highlight=False)
    from oracles.severity import severity_of

    reason = severity_of(verdict)
    out.print(f"severity: {reason}" if reason else "severity: none", highlight=False)


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("divfuzz-out"), show_default=True)
@click.option("--run", "run_id", type=int, default=None, help="Only buckets seen in this run.")
@click.option("--min-severity", type=click.Choice(["bug", "suspect", "by-design", "noise"]), default="noise", show_default=True, help="Hide buckets below this severity.")
def report(out_dir, run_id, min_severity):
    """Print the buckets of a store as markdown."""
    from fuzzer.campaign import STORE_NAME
    from fuzzer.errors import StoreError
    from fuzzer.store import Store
    from reports.markdown import buckets_markdown

    path = out_dir / STORE_NAME
    if not path.exists():
        raise StoreError(f"{path}: no store here (run `divfuzz fuzz --out {out_dir}` first)")
    store = Store(path, create=False)
    try:
        _judge_unjudged(store)
        out.print(buckets_markdown(store, run_id=run_id, min_severity=min_severity), markup=False, highlight=False)
    finally:
        store.close()


def _judge_unjudged(store) -> None:
    """Buckets of a store written before severities existed get one, from their first case's
    stored verdict and their culprit (the same policy the campaign applies)."""
    from oracles.severity import severity_of
    from oracles.verdict import Verdict
    from reports.markdown import culprit_of

    for b in store.buckets():
        if b.severity_reason is not None or b.first_case_id is None:
            continue
        reason = severity_of(Verdict.from_dict(store.case(b.first_case_id).verdict), culprit=culprit_of(b))
        if reason is not None:
            store.set_bucket_severity(b.id, reason.to_dict())


@main.command()
@click.option("--device", default="auto", show_default=True)
@click.option("--cases", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench(device, cases, seed):
    """Measure cases per minute and how a case's wall time splits (compile, runs, oracles, store...)."""
    from fuzzer.bench import bench_table, run_bench

    out.print(bench_table(run_bench(resolve_device(device), cases, seed=seed)), markup=False, highlight=False)


def _registered_ops() -> tuple[str, ...]:
    from generators.registry import all_ops

    return tuple(sorted(all_ops()))


def _names(text: str | None, option: str, *, known: tuple[str, ...]) -> tuple[str, ...] | None:
    from generators.errors import UnknownOpError

    if not text:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UnknownOpError(f"{option}: unknown name(s) {unknown or text!r}; known: {', '.join(known)}")
    return names


def _read(path: Path) -> str:
    from generators.errors import SpecError

    try:
        return path.read_text()
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file") from None


from fuzzer.cli_gate import corpus as _corpus_group, gate as _gate_command  # noqa: E402
main.add_command(_gate_command); main.add_command(_corpus_group)
from fuzzer.cli_minimize import minimize as _minimize_command; main.add_command(_minimize_command)  # noqa: E402

