"""Severity is judged once per finding and stored; one place owns "judge, then store"; one
writer of bucket folders (issue 36).

Read from the source (`ast`), as the hygiene checks are: which modules call the severity policy
(`severity_of`, `key_severity`, `bucket_severity`) and which write bucket folders. A judgement of
a fresh run (the gate's replays, `replay`, `minimize`, the minimizer's candidates, `--module`) is
legitimate; a read path (reports, diff, HTML, root causes, the summary, `report`, `merge`, the
store itself) reads the stored verdict and calls none.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("records", "generators", "oracles", "reports", "fuzzer")
JUDGES = ("severity_of", "key_severity", "bucket_severity")
FOLDER_WRITERS = ("write_bucket_folder", "write_bucket", "copy_plain_tree", "set_bucket_folder")

# module -> what it judges: every module that may call the severity policy, and why. Every command
# judges a fresh run through the finding room's one function (`divfuzz.fuzzer.finding.judgement.judge`,
# issue 51): the campaign, the gate, replay, minimize SPEC, the analyses and minimize --module.
MAY_JUDGE = {
    "fuzzer/finding/judgement.py": "the one judgement of a run every command calls (severity_of -> case_finding -> bucket_key)",
    "fuzzer/campaign/bucket_folders.py": "the one owner of 'judge, then store' (bucket_severity)",
    "fuzzer/campaign/case_steps.py": "its raw key's severity to route it to the pool (key_severity)",
    "fuzzer/store/schema.py": "the migration of a store older than its keys' fields, once, on conversion",
    "fuzzer/engine/explain.py": "the mechanism experiments' fresh runs (below the finding room: the policy's own experiments)",
    "reports/issue_folder.py": "a minimal spec's own verdict when the stored reason names an output it lacks",
    "reports/repro.py": "the generated repro.py's own run (template text)",
    "oracles/severity_policy.py": "the policy itself",
}
# The commands and stages that judge a fresh run, each through `judge`.
THROUGH_THE_FINDING_ROOM = ("fuzzer/campaign/case_steps.py", "fuzzer/gate/replay.py", "fuzzer/gate/baseline.py",
                            "fuzzer/cli/replay_command.py", "fuzzer/cli/minimize_command.py", "fuzzer/triage/analysis.py",
                            "fuzzer/triage/user_module.py", "fuzzer/triage/capture.py", "fuzzer/triage/module_perf.py",
                            "fuzzer/triage/shrink.py")


def _calls(source: str, names: tuple[str, ...]) -> list[tuple[str, int]]:
    """(name, line) of each call of one of `names`, as a plain name or an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                found.append((name, node.lineno))
    return found


def _imported(source: str) -> set[str]:
    """The modules a source imports, at any level."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _modules() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _callers(names: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
    return {m: c for m, src in _modules().items() if (c := _calls(src, names))}


def test_only_modules_that_judge_a_fresh_run_call_the_severity_policy():
    judging = _callers(JUDGES)
    assert set(judging) <= set(MAY_JUDGE), {m: judging[m] for m in set(judging) - set(MAY_JUDGE)}
    # The read paths call none (listed to say so: a new judgement in any of them fails above too).
    for read_path in ("reports/html.py", "reports/markdown.py", "reports/diff.py", "reports/root_causes.py",
                      "reports/bug_report.py", "fuzzer/cli/report_command.py", "fuzzer/cli/diff_command.py",
                      "fuzzer/campaign/merge.py", "fuzzer/store/store.py", "fuzzer/campaign/loop.py"):
        assert read_path not in judging, (read_path, judging.get(read_path))


def test_every_command_judges_a_fresh_run_through_the_one_judgement():
    modules = _modules()
    for module in THROUGH_THE_FINDING_ROOM:
        assert "divfuzz.fuzzer.finding.judgement" in _imported(modules[module]), module
        assert not _calls(modules[module], ("severity_of", "case_finding", "bucket_key")), (module, _calls(modules[module], ("severity_of", "case_finding", "bucket_key")))


def test_judge_then_store_has_one_owner_and_the_store_derives_nothing():
    by_name = {name: sorted(m for m, calls in _callers((name,)).items()) for name in ("bucket_severity", "key_severity")}
    # What a bucket stores is judged in one place; the store's own code judges nothing.
    assert by_name["bucket_severity"] == ["fuzzer/campaign/bucket_folders.py"], by_name
    assert by_name["key_severity"] == ["fuzzer/campaign/case_steps.py", "fuzzer/store/schema.py",
                                       "oracles/severity_policy.py"], by_name
    imported = {m: _imported(s) for m, s in _modules().items() if m.startswith("fuzzer/store/") and m != "fuzzer/store/schema.py"}
    assert imported and not any("divfuzz.oracles.severity_policy" in names for names in imported.values()), imported


def test_bucket_folders_have_one_writer():
    writers = sorted(_callers(FOLDER_WRITERS))
    # bucket_folders writes and copies a campaign's folders (merge's too); minimize SPEC writes its own
    # out folder, with no store; analysis.write_bucket and safe_paths are the helpers they call.
    assert writers == ["fuzzer/campaign/bucket_folders.py", "fuzzer/cli/minimize_command.py", "fuzzer/triage/analysis.py",
                       "records/safe_paths.py"], writers


def test_the_checks_see_a_call_however_it_is_written():
    source = "import x\nfrom y import severity_of\nseverity_of(v)\nx.key_severity(k)\nf = severity_of\nz.copy_plain_tree(a, b)\n"
    assert _calls(source, JUDGES) == [("severity_of", 3), ("key_severity", 4)]
    assert _calls(source, FOLDER_WRITERS) == [("copy_plain_tree", 6)]
