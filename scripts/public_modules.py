"""Run `divfuzz minimize --module` over the public-issue modules in corpus/public-modules/ and score
divfuzz's answer against the maintainers' decision recorded in each module's header.

    python scripts/public_modules.py [--device cpu] [--budget 90] [--only PATTERN] [--out DIR] [--jobs 1]

Each module `i<ISSUE>_<name>.py` is a rewrite of the repro in one pytorch/pytorch issue. Its docstring
opens with a one-line title, then these header lines (checked before anything runs; a missing or bad
one exits 2 naming the file and the field):

    issue: pytorch/pytorch#N       N is the issue number, and the file name's i<N>_ prefix
    expected: bug | not-bug        what the maintainers decided
    device: cpu | cuda | any       where the thread shows it
    grounds: <quote or fixing PR>  why `expected` says so
    train: yes | no                optional (default no): judge a training step (`minimize --train`);
                                   for issues whose divergence is in the gradients

and the module defines `make_case()`. Modules whose `device:` is neither --device nor `any` are
skipped (listed as such). For every other module the script runs

    divfuzz minimize --module FILE:make_case --device D --budget B --repro-dir OUT/<name> [--train]

keeps its stdout and stderr in OUT/<name>.log, and reads:

- the headline: the severity word after `headline: ` on the last line that starts with `headline:`
  (`error` when divfuzz exited non-zero or printed no headline, `timeout` when it overran);
- repro: whether any cause folder OUT/<name>/NN-*/ holds `repro.py` or `issue.py` and a
  `culprit.json` with `"reproduced": true`.

A module is "labelled bug" when its headline is `bug` (divfuzz's bug headline carries a repro that
exits 1). It agrees when expected bug <-> labelled bug. The table, the totals (bugs caught, not-bugs
labelled bug, agreement) and OUT/summary.json follow. Stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULES_DIR = REPO / "corpus" / "public-modules"
NAME_RE = re.compile(r"^i(\d+)_[a-z0-9_]+\.py$")
FIELDS = {
    "issue": re.compile(r"^pytorch/pytorch#(\d+)$"),
    "expected": re.compile(r"^(bug|not-bug)$"),
    "device": re.compile(r"^(cpu|cuda|any)$"),
    "grounds": re.compile(r"^\S.*$"),
}
OPTIONAL = {"train": re.compile(r"^(yes|no|true|false)$")}
HEADLINE_RE = re.compile(r"^headline:\s*([A-Za-z][A-Za-z-]*)")
# minimize --module enforces --budget itself, plus a stated grace; this is only a last resort
# against a hung worker.
KILL_AFTER_S = lambda budget: 2 * budget + 300  # noqa: E731


class HeaderError(Exception):
    pass


def parse_header(path: Path) -> dict:
    """The module's header fields, validated (HeaderError names the file and the field)."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as e:
        raise HeaderError(f"{path}: cannot be parsed: {e}") from e
    doc = ast.get_docstring(tree, clean=True)
    if not doc:
        raise HeaderError(f"{path}: no module docstring (title and header fields)")
    lines = doc.splitlines()
    if not lines[0].strip() or re.match(r"^(%s):" % "|".join([*FIELDS, *OPTIONAL]), lines[0]):
        raise HeaderError(f"{path}: field 'title': the docstring's first line must be the issue title")
    found: dict[str, str] = {}
    for line in lines[1:]:
        m = re.match(r"^([a-z]+):\s*(.*?)\s*$", line)
        if m and (m.group(1) in FIELDS or m.group(1) in OPTIONAL):
            if m.group(1) in found:
                raise HeaderError(f"{path}: field '{m.group(1)}': given twice")
            found[m.group(1)] = m.group(2)
    for name, pattern in {**FIELDS, **OPTIONAL}.items():
        if name not in found:
            if name in FIELDS:
                raise HeaderError(f"{path}: field '{name}': missing (want a line '{name}: ...' in the docstring)")
            continue
        if not pattern.match(found[name]):
            raise HeaderError(f"{path}: field '{name}': bad value {found[name]!r}")
    m = NAME_RE.match(path.name)
    if not m:
        raise HeaderError(f"{path}: field 'file name': want i<ISSUE>_<short_name>.py")
    issue = int(FIELDS["issue"].match(found["issue"]).group(1))
    if int(m.group(1)) != issue:
        raise HeaderError(f"{path}: field 'issue': #{issue} does not match the file name's i{m.group(1)}_")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "make_case" for n in tree.body):
        raise HeaderError(f"{path}: field 'make_case': no top-level def make_case()")
    return {
        "file": str(path),
        "name": path.stem,
        "title": lines[0].strip(),
        "issue": issue,
        "expected": found["expected"],
        "device": found["device"],
        "grounds": found["grounds"],
        "train": found.get("train", "no") in ("yes", "true"),
    }


def divfuzz_command() -> list[str]:
    exe = shutil.which("divfuzz")
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from divfuzz.fuzzer.cli.main import main; sys.argv[0] = 'divfuzz'; sys.exit(main())"]


def cause_folders(repro_dir: Path) -> list[dict]:
    """Every NN-*/ cause folder minimize wrote, with what its culprit.json says."""
    out = []
    if not repro_dir.is_dir():
        return out
    for folder in sorted(p for p in repro_dir.iterdir() if p.is_dir()):
        culprit = folder / "culprit.json"
        if not culprit.is_file():
            continue
        try:
            data = json.loads(culprit.read_text())
        except (OSError, ValueError):
            data = {}
        sev = data.get("severity") or {}
        out.append({
            "folder": folder.name,
            "reproduced": data.get("reproduced") is True,
            "has_script": (folder / "repro.py").is_file() or (folder / "issue.py").is_file(),
            "severity": sev.get("severity"),
            "rule": sev.get("rule"),
            "culprit": data.get("summary") or (data.get("culprit") or {}).get("summary"),
            "not_reproduced_why": data.get("not_reproduced_why"),
        })
    return out


def run_one(mod: dict, *, device: str, budget: float, out: Path) -> dict:
    repro_dir = out / mod["name"]
    if repro_dir.exists():
        shutil.rmtree(repro_dir)
    cmd = divfuzz_command() + ["minimize", "--module", f"{mod['file']}:make_case", "--device", device,
                               "--budget", f"{budget:g}", "--repro-dir", str(repro_dir)]
    if mod["train"]:
        cmd.append("--train")
    t0 = time.monotonic()
    timed_out = False
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=KILL_AFTER_S(budget), cwd=REPO)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        timed_out = True
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = None
    seconds = time.monotonic() - t0
    (out / f"{mod['name']}.log").write_text(
        f"$ {' '.join(cmd)}\n# rc={rc} seconds={seconds:.1f}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    headline_line = None
    for line in stdout.splitlines():
        if line.startswith("headline:"):
            headline_line = line.strip()
    m = HEADLINE_RE.match(headline_line or "")
    if timed_out:
        headline = "timeout"
    elif rc != 0 or not m:
        headline = "error"
    else:
        headline = m.group(1)
    causes = cause_folders(repro_dir)
    repro = any(c["reproduced"] and c["has_script"] for c in causes)
    labelled_bug = headline == "bug"
    expected_bug = mod["expected"] == "bug"
    return {**mod, "headline": headline, "headline_line": headline_line, "repro": repro,
            "labelled_bug": labelled_bug, "agrees": labelled_bug == expected_bug, "seconds": round(seconds, 1),
            "rc": rc, "causes": causes, "log": str(out / f"{mod['name']}.log"), "repro_dir": str(repro_dir)}


def table(rows: list[dict]) -> str:
    head = ("module", "expected", "headline", "repro", "agrees", "seconds")
    body = [(r["name"], r["expected"], r["headline"], "yes" if r["repro"] else "no",
             "yes" if r["agrees"] else "NO", f"{r['seconds']:.0f}") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    fmt = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    lines = [fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(lines + [fmt(b) for b in body])


def totals(rows: list[dict]) -> dict:
    bugs = [r for r in rows if r["expected"] == "bug"]
    not_bugs = [r for r in rows if r["expected"] == "not-bug"]
    return {
        "modules": len(rows),
        "bugs": len(bugs),
        "bugs_caught": sum(r["labelled_bug"] for r in bugs),
        "not_bugs": len(not_bugs),
        "not_bugs_labelled_bug": sum(r["labelled_bug"] for r in not_bugs),
        "agreements": sum(r["agrees"] for r in rows),
        "errors": sum(r["headline"] in ("error", "timeout") for r in rows),
        "headlines": {h: sum(r["headline"] == h for r in rows) for h in sorted({r["headline"] for r in rows})},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (modules marked `any` always run) [cpu]")
    ap.add_argument("--budget", type=float, default=90.0, help="minimize --budget per module, in seconds [90]")
    ap.add_argument("--only", default=None, metavar="PATTERN",
                    help="only modules whose name matches PATTERN (a glob such as 'i18*', else a substring)")
    ap.add_argument("--out", default="public-modules-out", help="output folder [public-modules-out]")
    ap.add_argument("--jobs", type=int, default=1, help="modules run at once [1]")
    ap.add_argument("--modules-dir", default=str(MODULES_DIR), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.budget <= 0:
        print(f"--budget: must be positive, got {args.budget:g}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"--jobs: must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    modules_dir = Path(args.modules_dir)
    files = sorted(p for p in modules_dir.glob("*.py") if not p.name.startswith("_"))
    if not files:
        print(f"{modules_dir}: no modules", file=sys.stderr)
        return 2
    try:
        mods = [parse_header(p) for p in files]
    except HeaderError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.only:
        pat = args.only
        glob = any(ch in pat for ch in "*?[")
        mods = [m for m in mods
                if (fnmatch.fnmatch(m["name"], pat) or fnmatch.fnmatch(Path(m["file"]).name, pat) if glob
                    else pat in m["name"])]
        if not mods:
            print(f"--only {pat!r}: matches no module in {modules_dir}", file=sys.stderr)
            return 2
    dev_kind = args.device.split(":")[0]
    runnable = [m for m in mods if m["device"] in (dev_kind, "any")]
    skipped = [m for m in mods if m not in runnable]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len(runnable)} module(s) to run on {args.device} with --budget {args.budget:g}, "
          f"{len(skipped)} skipped; logs and repro folders in {out}/", flush=True)

    rows: list[dict] = []

    def done(r: dict) -> None:
        rows.append(r)
        print(f"[{len(rows)}/{len(runnable)}] {r['name']}: expected {r['expected']}, headline {r['headline']}"
              f"{' (repro)' if r['repro'] else ''}, {'agrees' if r['agrees'] else 'DISAGREES'}, {r['seconds']:.0f} s",
              flush=True)

    started = time.monotonic()
    if args.jobs == 1:
        for m in runnable:
            done(run_one(m, device=args.device, budget=args.budget, out=out))
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futs = [pool.submit(run_one, m, device=args.device, budget=args.budget, out=out) for m in runnable]
            for f in concurrent.futures.as_completed(futs):
                done(f.result())
    order = {m["name"]: i for i, m in enumerate(runnable)}
    rows.sort(key=lambda r: order[r["name"]])
    t = totals(rows)
    print()
    print(table(rows))
    print()
    if skipped:
        print(f"skipped (device is not {dev_kind} or any): " + ", ".join(f"{m['name']} ({m['device']})" for m in skipped))
    pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
    print(f"bugs caught: {t['bugs_caught']}/{t['bugs']} ({pct(t['bugs_caught'], t['bugs'])})")
    print(f"not-bugs labelled bug: {t['not_bugs_labelled_bug']}/{t['not_bugs']} ({pct(t['not_bugs_labelled_bug'], t['not_bugs'])})")
    print(f"agreement: {t['agreements']}/{t['modules']} ({pct(t['agreements'], t['modules'])})")
    if t["errors"]:
        print(f"errors or timeouts: {t['errors']} (see the .log files)")
    summary = {
        "schema": "divfuzz-public-modules-summary", "schema_version": 1,
        "device": args.device, "budget_s": args.budget, "jobs": args.jobs, "only": args.only,
        "modules_dir": str(modules_dir), "wall_s": round(time.monotonic() - started, 1),
        "totals": t, "rows": rows,
        "skipped": [{k: m[k] for k in ("name", "issue", "expected", "device")} for m in skipped],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"written: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
