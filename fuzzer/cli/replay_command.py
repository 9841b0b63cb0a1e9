"""`divfuzz replay SPEC`: re-run one case in a worker and print its verdict, finding and severity."""

from __future__ import annotations

from pathlib import Path

import click

from divfuzz.fuzzer.cli.options import (
    TIMEOUT,
    DivfuzzCommand,
    against_compile_config,
    against_summary,
    check_compile_options_early,
    check_device_early,
    load_spec_early,
    compile_config,
    compile_options,
    device_option,
    out,
    read_input,
    resolve_device,
)
from divfuzz.records.config import check_backend_syntax


@click.command(cls=DivfuzzCommand)
@click.argument("spec_file", metavar="SPEC.json", type=click.Path(dir_okay=False, path_type=Path))
@device_option
@click.option("--timeout", "timeout_s", type=TIMEOUT, default=300.0, show_default=True, help="Seconds for the case.")
@click.option("--against", default=None, metavar="BACKEND", help="Judge --backend against this second compiler.")
@compile_options
def replay(spec_file, device, timeout_s, against, backend, inductor, dynamic, mode):
    """Re-run one case from a spec.json (in a worker process) and print its verdict."""
    # First, before torch is imported: a missing or bad spec, a bad compile option, a missing GPU.
    spec = load_spec_early(read_input(spec_file), source=str(spec_file))
    check_compile_options_early(backend, inductor)
    if against is not None:
        check_backend_syntax(against, where="--against")
    check_device_early(device)
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.engine.worker import CaseRequest, Worker
    from divfuzz.oracles.severity_policy import case_finding
    from divfuzz.reports.bucket_folder import bucket_case
    from divfuzz.reports.markdown import verdict_table

    device = resolve_device(device)
    config = compile_config(backend, inductor, dynamic, mode)
    against_config = against_compile_config(against, config)
    # A bucket folder's spec runs as its case ran and is judged as its bucket is: under the CPU
    # threads its case.json records (Inductor's CPU kernels follow the thread count) and the
    # switch its culprit names.
    recorded = bucket_case(spec_file)
    threads = recorded.threads if not device.startswith("cuda") else None
    if threads:
        out.print(f"threads (the bucket's case.json): {threads}", highlight=False)
    worker = Worker(device, extra_env={"DIVFUZZ_WORKER_THREADS": str(threads)} if threads else {})
    try:
        verdict = worker.run(CaseRequest(spec, device, config, against=against_config), timeout_s)
    except BaseException:  # a signal (divfuzz.fuzzer.cli.interrupts): the case in flight is not waited for
        worker.abort()
        raise
    finally:
        worker.stop()
    # lazy: CLI start-up: `divfuzz --help` loads no torch and no command's machinery
    from divfuzz.fuzzer.finding.judgement import judge

    switch = recorded.switch
    judged = judge(verdict, switch=switch, subsystem=recorded.subsystem)  # the one judgement, as the bucket's
    finding, reason = judged.finding, judged.reason
    out.print(f"{spec_file}: {verdict.status.value}" + (f" — {verdict.error_type}: {verdict.error_message}" if verdict.error_type else ""), highlight=False)
    out.print(verdict_table(verdict), highlight=False)
    out.print(f"finding: {finding.kind.value} ({finding.triage})" if finding else "finding: none", highlight=False)
    if verdict.against is not None:
        out.print(against_summary(verdict.against), highlight=False, emoji=False)
    if switch:
        out.print(f"culprit switch (the bucket's case.json): {switch}", highlight=False)
    out.print(f"severity: {reason.labelled()}" if reason else "severity: none", highlight=False)
