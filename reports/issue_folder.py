"""Writing a bug bucket's `issue.py` and `issue.md` (and the compiler's `compile.log`) into its folder.

One place decides what a folder gets: `issue.py` and `issue.md` only for a `bug`
(`divfuzz.reports.issue_script.render_issue_script`), the upstream matches from divfuzz's known-bug
list (`divfuzz.records.known_bugs`), and `compile.log` only when the compiler printed something.
With a `check` (what `write_bucket_folder` passes: `divfuzz.reports.issue_check.run_rendered_script`),
issue.py is run in a fresh process before it is written: it compiles under torch's defaults and
keeps a setting or the thread count only where that run shows the finding needs it
(`divfuzz.reports.issue_check.check_pins`), with a comment that says so; issue.md says which, and
its error log is what the written script printed. A hang's script is not run (it waits
`HANG_S`): it keeps every setting, marked unchecked.
Called by `divfuzz.reports.bucket_folder.write_bucket_folder` on its temporary folder, before that folder
is moved into place, so a bucket's files appear together or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from divfuzz.generators.spec import GraphSpec
from divfuzz.oracles.severity_policy import explaining_mechanism, severity_of
from divfuzz.records.culprit import Culprit
from divfuzz.records.errors import StoreError
from divfuzz.records.known_bugs import KnownBugsError, RootCausePattern, default_known_bugs
from divfuzz.reports.bucket_files import COMPILE_LOG, ISSUE_MARKDOWN, ISSUE_SCRIPT
from divfuzz.reports.issue_check import DefaultsCheck, check_pins
from divfuzz.reports.issue_markdown import render_issue_markdown
from divfuzz.reports.issue_script import candidate_pins, render_issue_script

if TYPE_CHECKING:
    from divfuzz.records.config import CompileConfig
    from divfuzz.records.severity import SeverityReason
    from divfuzz.records.verdict import Verdict

# compile.log keeps at most this many characters: the first and the last half of what was printed.
COMPILE_LOG_MAX_CHARS = 1_000_000


def known_lines(spec: GraphSpec, reason: "SeverityReason", *, device: str, culprit: str | None, mechanism: str = "",
                site: str = "", torch_version: str | None = None, any_rule: bool = False) -> list[str]:
    """The upstream issues divfuzz's known-bug list matches for this finding (by its ops, its
    mechanism and the compiler error's own words), best first, one line each; `torch_version` says
    whether a fix is in the torch the finding ran on; `any_rule` matches by ops, mechanism and
    culprit whatever the rule (where a difference below suspect arises)."""
    try:
        known = default_known_bugs()
    except KnownBugsError:
        return []
    pattern = RootCausePattern.from_spec_dict(spec.to_dict(), rule=reason.rule, culprit=culprit, device_type=device.split(":")[0],
                                              mechanism=mechanism, site=site)
    return [f"pytorch#{m.bug.issue} ({m.bug.state_text(torch_version)}, {_checked_words(m.bug.checked)}; {m.confidence} "
            f"confidence): {m.bug.title}" for m in (known.matches_any_rule(pattern) if any_rule else known.matches(pattern))]


def _checked_words(day: str | None) -> str:
    """When divfuzz's list last checked the entry's state against the public issue."""
    return f"state checked {day}" if day else "state not checked against the issue"


def issue_files(spec: GraphSpec, *, device: str, config: "CompileConfig", verdict: "Verdict | None",
                reason: "SeverityReason | None" = None, culprit: dict | None = None, versions: dict | None = None,
                error_log: str | None = None, check=None, checked: DefaultsCheck | None = None) -> dict[str, bytes]:
    """The files a folder gets for this finding (name -> bytes): issue.py (and its input file) and
    issue.md for a bug, nothing otherwise. `reason` is the stored judgement of the finding (a
    severity is judged once: it is not judged again here); without one, or when it names an output
    the verdict lacks (a minimal spec's), the verdict's severity under the culprit. `check(text,
    files, rule=...)` runs a rendered script in a fresh process (a `ScriptRun`); `checked` is such
    a check already run (an analysis worker's: `divfuzz.fuzzer.triage.analysis`), used as is; with
    neither, the script is written with every pin, unchecked."""
    summary = culprit.get("summary") if isinstance(culprit, dict) else None
    if reason is not None and verdict is not None and reason.output != "-" and all(o.name != reason.output for o in verdict.outputs):
        reason = None  # the stored judgement names an output the minimal spec's verdict lacks: judge that verdict
    if reason is None and verdict is not None:
        key = _culprit_key(culprit)
        reason = severity_of(verdict, switch=(key.switch or None) if key else None, subsystem=key.subsystem if key else None)
    script = render_issue_script(spec, device=device, config=config, reason=reason, verdict=verdict)
    if script is None:
        return {}
    if checked is not None:
        script = render_issue_script(spec, device=device, config=config, reason=reason, verdict=verdict, pins=checked.kept,
                                     pin_note=checked.note)
        if error_log is None:
            error_log = checked.written.output or None
    elif check is not None and reason.rule != "hang":
        def run(pins: tuple[str, ...]):
            rendered = render_issue_script(spec, device=device, config=config, reason=reason, verdict=verdict, pins=pins,
                                           pin_note="needed")
            return check(rendered.text, rendered.files, rule=reason.rule)

        checked = check_pins(candidate_pins(config, device, getattr(verdict, "threads", None)), run)
        script = render_issue_script(spec, device=device, config=config, reason=reason, verdict=verdict, pins=checked.kept,
                                     pin_note=checked.note)
        if error_log is None:
            error_log = checked.written.output or None
    markdown = render_issue_markdown(spec, script, device=device, reason=reason, verdict=verdict, culprit=culprit,
                                     versions=versions,
                                     known=known_lines(spec, reason, device=device, culprit=summary,
                                                       mechanism=explaining_mechanism(verdict, reason) if verdict is not None else "",
                                                       site=(verdict.error_site or "") if verdict is not None else "",
                                                       torch_version=(versions or {}).get("torch")),
                                     config_desc=config.describe(), error_log=error_log, defaults=checked)
    return {ISSUE_SCRIPT: script.text.encode(), ISSUE_MARKDOWN: markdown.encode(), **script.files}


def _culprit_key(culprit: dict | None):
    """The key fields of a stored culprit (`Culprit.key`: the switch that removes the finding, the
    subsystem at fault), or None."""
    if not isinstance(culprit, dict) or not isinstance(culprit.get("stage"), str):
        return None
    try:
        return Culprit.from_dict(culprit).key()
    except (KeyError, TypeError, ValueError, StoreError):
        return None


def clipped_log(text: str) -> str:
    """`text` cut to `COMPILE_LOG_MAX_CHARS`: its first and last halves, and a line saying what was left out."""
    if len(text) <= COMPILE_LOG_MAX_CHARS:
        return text
    half = COMPILE_LOG_MAX_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def write_issue_files(folder: Path, files: dict[str, bytes], compile_log: str | None = None) -> None:
    """Write `files` (from `issue_files`; names are this module's constants) and, when the compiler
    printed anything, `compile.log` into `folder`."""
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if ISSUE_SCRIPT in files:
        os.chmod(folder / ISSUE_SCRIPT, 0o755)
    if compile_log and compile_log.strip():
        (folder / COMPILE_LOG).write_text(clipped_log(compile_log))
