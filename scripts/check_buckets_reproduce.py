"""Does every bucket of a campaign's store reproduce with the commands the report names (issue 35,
item 2)? For each bucket with a folder:

- the report: `divfuzz report --out STORE` lists the bucket with its severity, and a root cause's
  lead with `* why SEVERITY (RULE, output OUTPUT): DETAIL` and `* repro: .../repro.py`; what it
  prints must be the store's stored severity and reason (for a bucket the markdown folds, the
  store's reason is the report's: `report --html` shows it);
- `divfuzz replay FOLDER/spec.json` (under the folder's case.json device and config) must end
  with the bucket's severity, rule and output;
- `python FOLDER/repro.py` must end with `DIVERGES: SEVERITY (RULE, output OUTPUT): ...`, the
  same severity, rule and output;
- output names: the output the reason names is one of the spec's outputs or gradients (or `-`
  for a compiler failure), replay's table and the repro print the same outputs, the spec's
  (then the gradients its run has), and the report's minimized pattern returns the spec's outputs.

    python scripts/check_buckets_reproduce.py STORE_DIR [--timeout 600] [--json FILE]

Prints one line per bucket (agree, or what disagrees) and a total; exits 0 when every bucket
agrees, 1 otherwise. The words of a reason (its numbers) are compared too and counted apart: a
minimized bucket's repro shows the same rule on its minimal graph, with its own numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.reports.bucket_files import REPRO_FILE, SPEC_FILE
from divfuzz.reports.bucket_folder import BucketFolder

# `severity: bug (int-valued-wrong, output v9): ...` (replay) and `DIVERGES: bug (...): ...` (repro.py).
LABELLED = r"(?P<severity>[a-z-]+) \((?P<rule>[^,()]+), output (?P<output>.+?)\): (?P<detail>.*)"
REPLAY_LINE = re.compile(rf"^severity: (?:{LABELLED}|none)$", re.M)
REPRO_LINE = re.compile(rf"^DIVERGES: {LABELLED}$")
REPRO_OUTPUT_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w]*(?::[A-Za-z_]\w*)?): (?:[a-z0-9]+ \d+/\d+ elements|eager )")
TABLE_ROW = re.compile(r"^\| (?P<name>[^|]+?) \| (?P<dtype>[a-z0-9]+) \| ", re.M)
REPORT_ROW = re.compile(r"^\| (?P<id>\d+) \| (?P<severity>[a-z-]+) \| ", re.M)
REPORT_FOLD = re.compile(r"^- (?P<severity>[a-z-]+), .*\(buckets (?P<ids>[\d, .]+)\)$", re.M)
REPORT_ITEM = re.compile(r"^\* why (?P<why>.+)$\n(?:^\* (?!repro).*$\n)*?^\* repro: `(?P<repro>.+)/repro\.py`$", re.M)
REPORT_PATTERN = re.compile(r"^\* minimized pattern: `(?P<pattern>[^`]+)`(?P<cut> \(\d+ ops)?", re.M)


@dataclass
class Said:
    """What one command said about a bucket: severity, rule, output and the reason's words."""

    severity: str | None = None
    rule: str | None = None
    output: str | None = None
    detail: str | None = None
    outputs: list[str] = field(default_factory=list)  # the output names it printed
    note: str = ""

    def identity(self) -> tuple:
        return (self.severity, self.rule, self.output)


@dataclass
class Checked:
    bucket: int
    folder: str
    report: Said
    replay: Said
    repro: Said
    spec_outputs: list[str]
    problems: list[str]
    same_words: bool

    @property
    def agrees(self) -> bool:
        return not self.problems


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "divfuzz.fuzzer", *args]


def _run(argv: list[str], timeout_s: float, cwd: Path | None = None) -> tuple[int | str, str]:
    env = dict(os.environ, COLUMNS="200")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return done.returncode, done.stdout + ("\n" + done.stderr if done.returncode not in (0, 1) else "")


def config_args(case: dict) -> list[str]:
    """`replay`'s options for the device and compile config a bucket's case.json records."""
    config = case.get("config") or {}
    args = ["--device", str(case.get("device", "cpu"))]
    if config.get("backend", "inductor") != "inductor":
        args += ["--backend", str(config["backend"])]
    for key, value in sorted((config.get("inductor") or {}).items()):
        args += ["--inductor", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    if config.get("dynamic"):
        args.append("--dynamic")
    if config.get("mode"):
        args += ["--mode", str(config["mode"])]
    return args


def spec_outputs(spec) -> list[str]:
    """The outputs a spec's run may name: its outputs, then the gradient of each input that
    requires grad (an input that no output reaches gets none)."""
    grads = [f"grad:{t.name}" for t in spec.inputs if t.requires_grad] if spec.backward else []
    return list(spec.outputs) + grads


def names_the_spec_s(printed: list[str], spec) -> bool:
    """`printed` is what a run of `spec` names: its outputs, then some of its inputs' gradients, in order."""
    n = len(spec.outputs)
    grads = iter(spec_outputs(spec)[n:])
    return printed[:n] == list(spec.outputs) and all(name in grads for name in printed[n:])


def replay_said(folder: Path, case: dict, timeout_s: float) -> Said:
    code, text = _run(_cli("replay", str(folder / SPEC_FILE), *config_args(case)), timeout_s)
    m = REPLAY_LINE.search(text)
    if code != 0 or m is None:
        return Said(note=f"replay exited {code}: {text.strip().splitlines()[-1:] if text.strip() else ''}")
    names = [r["name"] for r in TABLE_ROW.finditer(text) if r["name"] != "output"]
    if m["severity"] is None:
        return Said(severity="none", outputs=names)
    return Said(m["severity"], m["rule"], m["output"], m["detail"], names)


def repro_said(folder: Path, timeout_s: float) -> Said:
    code, text = _run([sys.executable, REPRO_FILE], timeout_s, cwd=folder)
    lines = text.strip().splitlines()
    names = [m["name"] for m in map(REPRO_OUTPUT_LINE.match, lines) if m]
    m = REPRO_LINE.match(lines[-1]) if lines else None
    if m is None:
        last = lines[-1] if lines else ""
        return Said(severity="none" if code == 0 else None, outputs=names, note=f"exit {code}, last line {last[:160]!r}")
    return Said(m["severity"], m["rule"], m["output"], m["detail"], names, note=f"exit {code}")


def report_view(store_dir: Path, timeout_s: float) -> tuple[dict[int, str], dict[str, str], dict[str, str], str]:
    """From `divfuzz report`'s markdown: bucket id -> severity, lead folder -> why line, lead
    folder -> its minimized pattern (whole ones only), and the text."""
    code, text = _run(_cli("report", "--out", str(store_dir)), timeout_s)
    if code != 0:
        raise SystemExit(f"divfuzz report --out {store_dir} exited {code}:\n{text}")
    severity = {int(m["id"]): m["severity"] for m in REPORT_ROW.finditer(text)}
    for m in REPORT_FOLD.finditer(text):
        for part in m["ids"].split(","):
            if part.strip().isdigit():
                severity[int(part)] = m["severity"]
    why = {m["repro"]: m["why"] for m in REPORT_ITEM.finditer(text)}
    patterns = {}
    for item in re.split(r"^### ", text, flags=re.M)[1:]:
        p, r = REPORT_PATTERN.search(item), re.search(r"^\* repro: `(.+)/repro\.py`$", item, re.M)
        if p and r and not p["cut"]:
            patterns[r[1]] = p["pattern"]
    return severity, why, patterns, text


def check_bucket(bucket, store_dir: Path, report: tuple, timeout_s: float) -> Checked:
    severities, whys, patterns, _ = report
    loaded = BucketFolder.load(store_dir, bucket.id, bucket.key)  # placed by its id and key, checked as it is read
    folder = loaded.path
    reason = bucket.severity_reason or {}
    said = Said(bucket.severity, reason.get("rule"), reason.get("output"), reason.get("detail"))
    problems = []
    listed = severities.get(bucket.id)
    if listed is not None and listed != bucket.severity:
        problems.append(f"the report lists it as {listed}, the store as {bucket.severity}")
    why = whys.get(bucket.folder) or whys.get(str(folder)) or whys.get(str(folder.resolve()))
    if why is not None and why != f"{bucket.severity} ({said.rule}, output {said.output}): {said.detail}":
        problems.append(f"the report's why line is not the stored reason: {why[:120]}")
    spec = loaded.spec
    names = spec_outputs(spec)
    replay = replay_said(folder, {"device": loaded.device, "config": loaded.config.to_dict()}, timeout_s)
    repro = repro_said(folder, timeout_s)
    if replay.identity() != said.identity():
        problems.append(f"replay: {replay.severity} ({replay.rule}, output {replay.output}){' ' + replay.note if replay.note else ''}")
    if repro.identity() != said.identity():
        problems.append(f"repro.py: {repro.severity} ({repro.rule}, output {repro.output}) [{repro.note}]")
    if said.output not in (*names, "-"):
        problems.append(f"the reason names output {said.output}, the spec has {names}")
    if replay.outputs and not names_the_spec_s(replay.outputs, spec):
        problems.append(f"replay's outputs {replay.outputs} are not the spec's {names}")
    if repro.outputs and not names_the_spec_s(repro.outputs, spec):
        problems.append(f"repro.py's outputs {repro.outputs} are not the spec's {names}")
    if replay.outputs and repro.outputs and replay.outputs != repro.outputs:
        problems.append(f"replay names the outputs {replay.outputs}, repro.py {repro.outputs}")
    pattern = patterns.get(bucket.folder) or patterns.get(str(folder)) or patterns.get(str(folder.resolve()))
    if pattern is not None:
        returned = [n.strip() for n in pattern.split(" -> ")[-1].split(" [")[0].split(",")]
        if returned != list(spec.outputs):
            problems.append(f"the report's pattern returns {returned}, the spec {list(spec.outputs)}")
    same_words = said.detail is not None and said.detail == repro.detail == replay.detail
    return Checked(bucket.id, str(folder), said, replay, repro, names, problems, same_words)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir", type=Path, help="a campaign folder (divfuzz fuzz --out)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per replay and per repro.py")
    parser.add_argument("--json", type=Path, default=None, help="also write every bucket's comparison here")
    args = parser.parse_args(argv)
    store = Store(args.store_dir / STORE_NAME, create=False)
    try:
        buckets = [b for b in store.buckets() if b.folder]
    finally:
        store.close()
    report = report_view(args.store_dir, args.timeout)
    results = []
    for bucket in sorted(buckets, key=lambda b: b.id):
        c = check_bucket(bucket, args.store_dir, report, args.timeout)
        results.append(c)
        r = c.report
        head = f"#{c.bucket} {r.severity} ({r.rule}, output {r.output})"
        print(f"{head}: agree{'' if c.same_words else ' (repro numbers differ: a minimized graph)'}" if c.agrees
              else f"{head}: DISAGREE: " + "; ".join(c.problems), flush=True)
    agree = sum(c.agrees for c in results)
    print(f"{len(results)} buckets checked, {agree} agree, {len(results) - agree} disagree; "
          f"{sum(c.same_words for c in results)} with the same words in report, replay and repro.py")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(c) | {"agrees": c.agrees} for c in results], indent=2) + "\n")
    return 0 if agree == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
