"""The `divfuzz` command line: the group that runs every command and turns failures into exit codes.

Exit codes: 0 when it ran (findings are results, not errors); 2 for bad input, with a message
naming what was wrong; a killed campaign also exits 2 after saving, and resumes when re-run.
A failure of divfuzz itself also exits 2, with one line and the path of a log holding the
traceback: never 0, and never 1 (which `gate` and `repro.py` use for "the compiler diverges").
Each command lives in its own module of `divfuzz.fuzzer.cli`, `<command>_command.py`; what they share is `divfuzz.fuzzer.cli.options`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click
from rich.markup import escape

from divfuzz.fuzzer.cli.bench_command import bench
from divfuzz.fuzzer.cli.corpus_command import corpus
from divfuzz.fuzzer.cli.diff_command import diff
from divfuzz.fuzzer.cli.fuzz_command import fuzz
from divfuzz.fuzzer.cli.gate_command import gate
from divfuzz.fuzzer.cli.interrupts import INTERRUPTED_EXIT, signal_received, stop_on_signals
from divfuzz.fuzzer.cli.merge_command import merge
from divfuzz.fuzzer.cli.minimize_command import minimize
from divfuzz.fuzzer.cli.options import OS_REASONS, DivfuzzCommand, console
from divfuzz.fuzzer.cli.recheck_command import recheck
from divfuzz.fuzzer.cli.replay_command import replay
from divfuzz.fuzzer.cli.report_command import report
from divfuzz.records.errors import DivfuzzError
from divfuzz.records.safe_paths import open_plain
from divfuzz.reports.terminal import one_line


def _internal_failure_log(ctx: click.Context) -> Path:
    """Where an unexpected traceback goes: the command's --out folder when it has one, else /tmp."""
    text = traceback.format_exc()
    out_dir = ctx.meta.get("divfuzz.params", {}).get("out_dir")
    for folder in ([Path(out_dir)] if out_dir else []) + [Path(tempfile.gettempdir())]:
        try:
            if folder.is_dir():
                log = folder / f"divfuzz-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
                # a new file of its own: never through a link planted under its name
                fd = open_plain(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, what="error log")
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                return log
        except (OSError, DivfuzzError):
            continue
    return Path("<nowhere: no folder was writable>")


def _exit_interrupted(ctx: click.Context) -> None:
    console.print(f"[bold yellow]interrupted:[/] divfuzz {escape(ctx.invoked_subcommand or '')} stopped by a signal; "
                  "its workers are stopped and no output was half-written", markup=True, soft_wrap=True)
    # CPython marks a KeyboardInterrupt that left an exec() of source text as unhandled, and under
    # `python -m` ends the process by SIGINT (exit -2) whatever exit code follows; hypothesis builds its
    # strategies that way at import, so a Ctrl-C during that import exited -2 about one run in
    # five. An exec that completes clears the mark (signals are ignored from here on).
    exec("None")
    sys.exit(INTERRUPTED_EXIT)


class DivfuzzGroup(click.Group):
    """Turns divfuzz's own errors into a message and exit code 2; an unexpected exception too,
    with its traceback in a log file (exit 1 would read as "the compiler diverges")."""

    command_class = DivfuzzCommand

    def invoke(self, ctx):
        stop_on_signals()  # every command: SIGINT/SIGTERM stop it with exit 2 (divfuzz.fuzzer.cli.interrupts)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _exit_interrupted(ctx)
        except DivfuzzError as e:
            console.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, soft_wrap=True)  # a message's [..] is text, not markup
            sys.exit(2)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as e:
            if signal_received():  # e.g. a write cut by the stop: the signal's consequence
                _exit_interrupted(ctx)
            where = f" {e.filename}:" if e.filename else ""  # no file named: "error: reason", never "error:: reason"
            reason = OS_REASONS.get(e.errno, e.strerror or str(e))
            console.print(f"[bold red]error:[/]{escape(where)} {escape(str(reason))} ({type(e).__name__})", markup=True, soft_wrap=True)
            sys.exit(2)
        except Exception as e:
            if signal_received():  # raised while the command stopped on a signal (interrupts.signal_received)
                _exit_interrupted(ctx)
            log = _internal_failure_log(ctx)
            what = one_line(f"{type(e).__name__}: {e}")
            text = (f"divfuzz {ctx.invoked_subcommand or ''} failed on its own error, not a compiler finding: {what}; "
                    f"traceback in {log}")
            console.print(f"[bold red]internal error:[/] {escape(text)}", markup=True, soft_wrap=True)
            sys.exit(2)


@click.group(cls=DivfuzzGroup, context_settings={"help_option_names": ["-h", "--help"]})  # every command inherits -h
@click.version_option(package_name="divfuzz", help="Show divfuzz's version and exit.")
def main() -> None:
    """divfuzz: find where torch.compile computes different numbers than eager."""


for command in (fuzz, replay, report, diff, merge, bench, gate, corpus, minimize, recheck):
    main.add_command(command)
