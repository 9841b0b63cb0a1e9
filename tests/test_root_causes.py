"""Root causes are what a reader sees (issue 20, point 5): buckets whose minimized pattern and
culprit agree fold into one root cause (`divfuzz.reports.root_causes`), and `report`, `report --html`,
`diff` and `fuzz`'s 80x24 summary list root causes with their raw buckets counted beneath.

Every store here is a real SQLite store written through the `Store` API the campaign uses: a
finding is stored under its raw key with a pending analysis (`add_case_for_analysis`), and its
analysis is filed as the campaign files it (`resolve_root_cause`, then `set_bucket_analysis` on
the bucket it created). No compile: the minimized specs and culprits are what an analysis returns.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from divfuzz.fuzzer.campaign.bucket_folders import Filing
from divfuzz.fuzzer.campaign.loop import CampaignResult, Progress
from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.generators.spec import GraphSpec, InputRecipe, Node, TensorSpec
from divfuzz.fuzzer.engine.bucketing import root_cause_key
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict
from divfuzz.reports.diff import diff_sides, diff_text, side_from_store
from divfuzz.reports.html import collect, render_html
from divfuzz.reports.root_causes import EAGER_WORSE, graph_pattern, root_cause_groups

ROOT = Path(__file__).resolve().parents[1]
LOWERING = "inductor lowering of aten.div"
_ULP = {"float32": "fp32-ulp", "bfloat16": "bf16-ulp", "float16": "fp16-ulp"}


def _verdict(dtype: str, n_diff: int = 9) -> dict:
    f = FloatComparison(
        dtype=dtype, numel=4096, n_diff=n_diff, max_ulp=40, ulp_histogram=(("1", 5), ("5-16", 4)), nan_inf_mismatch=0,
        triage="compiled-worse", n_worse=n_diff, n_closer=0, rmse_eager=1e-3, rmse_compiled=4e-3, max_abs_diff=1.0,
        error_sample=((0.25, 3.0), (0.5, 1.5)),
    )
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v1", float_cmp=f),)).to_dict()


# A rule of each severity (`RULE_SEVERITY`): a floor division off by one fires int-valued-wrong;
# the others are rules no known bug of div lists (`corpus/known-bugs.json`), so only it is known.
_RULE = {"bug": "int-valued-wrong", "suspect": "rmse-worse", EAGER_WORSE: "eager-gross-worse", "noise": "within-same"}


_KIND_RULE = {"type-mismatch": "output-type-mismatch"}


def _reason(sev: str, detail: str = "") -> dict:
    return {"severity": sev, "rule": _RULE[sev], "output": "v1", "detail": detail or f"planted {sev}"}


def culprit_key(text: str) -> CulpritKey:
    """The culprit fields an analysis names, from the text `CulpritKey.describe` gives for them."""
    if text.startswith("inductor lowering of "):
        key = CulpritKey("inductor", "lowerings", text.removeprefix("inductor lowering of "))
    elif text.startswith("decomposition of "):
        key = CulpritKey("aot_eager_decomp_partition", "decomposition", text.removeprefix("decomposition of "))
    elif m := re.fullmatch(r"inductor: (\w+) removes it", text):
        key = CulpritKey("inductor", switch=m.group(1))
    elif m := re.fullmatch(r"(\w+) \(no single subsystem\)", text):
        key = CulpritKey(m.group(1))
    else:
        key = CulpritKey("inductor", text.removeprefix("inductor: "))
    assert key.describe() == text, (key, text)
    return key


def floor_div(dtype: str = "float32", rows: int = 8, divisor: float = 0.1, mode: str | None = "floor",
              before: tuple[str, ...] = ()) -> GraphSpec:
    """`div(x, divisor, rounding_mode=mode)`, after the unary ops `before` (the ops that surround
    it in a drawn graph and that minimization removes)."""
    nodes, last = [], "x0"
    for i, op in enumerate((*before, "div"), start=1):
        params = (("divisor", divisor), ("mode", mode)) if op == "div" else ()
        nodes.append(Node(f"v{i}", op, (last,), params, dtype, (rows, 16)))
        last = f"v{i}"
    return GraphSpec(inputs=(TensorSpec("x0", (rows, 16), dtype),), nodes=tuple(nodes), outputs=(last,),
                     recipe=InputRecipe("decimal_grid", rows))


def mul_then_div(dtype: str = "float32") -> GraphSpec:
    """The same ops as a floor division after a multiply, but wired otherwise: div reads x1."""
    return GraphSpec(
        inputs=(TensorSpec("x0", (8, 16), dtype), TensorSpec("x1", (8, 16), dtype)),
        nodes=(Node("v1", "mul", ("x0", "x1"), (), dtype, (8, 16)),
               Node("v2", "div", ("x1",), (("divisor", 0.1), ("mode", "floor")), dtype, (8, 16))),
        outputs=("v1", "v2"),
    )


class Campaign:
    """Findings stored and analysed as `divfuzz.fuzzer.campaign.loop` stores and files them."""

    def __init__(self, folder: Path, *, device: str = "cpu", seed: int = 1):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.store = Store(folder / STORE_NAME)
        self.filing = Filing(self.store, folder, timeout_s=None)  # files as the campaign files: it judges, the store stores
        self.device = device
        self.run, _ = self.store.start_run(seed=seed, device=device, config={"backend": "inductor"}, options={},
                                           versions={"torch": "2.13.0+cpu"})
        self.idx = 0

    def find(self, spec: GraphSpec, *, severity: str = "bug", cases: int = 1, kind: str | None = None) -> BucketKey:
        """`cases` cases of `spec` stored under its raw key (the graph's op set), analysis pending;
        `kind` (default: the ULP kind of the last node's dtype) names another finding, rated by
        `_KIND_RULE`'s rule."""
        dtype = spec.nodes[-1].dtype
        raw = BucketKey(kind or _ULP[dtype], "-" if kind else dtype, self.device, ops=tuple(sorted(set(spec.op_names))),
                        autocast=spec.autocast or "", backward=spec.backward,
                        rule=_KIND_RULE[kind] if kind else _RULE[severity])
        for _ in range(cases):
            row = dict(run_id=self.run, slot=0, idx=self.idx, spec_digest=f"{spec.digest()}-{self.idx}",
                       spec_json=spec.to_json(indent=None), device=self.device, config={"backend": "inductor"},
                       verdict=_verdict(dtype), score=1.0, wall_s=0.5, finding_kind=raw.kind)
            reason = {**_reason(severity), "rule": raw.rule}
            self.filing.store_case(row, key=None, raw_key=raw, triage="compiled-worse", severity=reason,
                                   for_analysis=True)
            self.idx += 1
        return raw

    def file(self, raw: BucketKey, minimal: GraphSpec | None, culprit: str, *, severity: str | None = None,
             minimized: bool = True) -> int:
        """File `raw`'s analysis: its root-cause key (the minimal spec's ops and the culprit's fields),
        the store's own re-keying, and the analysis record on the bucket it created (as
        `Filing.write_folder`). `severity`, when given, is what the filed bucket must be."""
        spec = minimal or floor_div()
        fields = culprit_key(culprit)
        key = root_cause_key(raw, spec, fields)
        filed = self.filing.file_in_slot(raw, key)
        if severity is not None and filed.bucket_id is not None:  # None: a raw key filed before, under another root cause
            assert filed.severity == severity == self.store.bucket(filed.bucket_id).severity, (filed, severity)
        record = ({"spec": spec.to_dict(), "ops_before": 6, "ops_after": len(spec.nodes), "elements_before": 4096,
                   "elements_after": 128, "passes": [], "predicate_calls": 9, "wall_s": 12.0, "budget_exhausted": False}
                  if minimized else {"spec": spec.to_dict(), "note": "not minimized: a hang finding costs a whole timeout"})
        if filed.created:
            subsystem = fields.subsystem or (f"inductor_{fields.switch}" if fields.switch else None)
            self.store.set_bucket_analysis(filed.bucket_id, minimized=record, culprit={
                "stage": fields.stage, "summary": culprit, "subsystem": subsystem, "detail": fields.detail or None,
                "fixes": [fields.switch] if fields.switch else [],
                "ladder": [["aot_eager", "ok"], ["aot_eager_decomp_partition", "ok"], ["inductor", raw.kind]]})
        return filed.bucket_id

    def close(self) -> None:
        self.store.finish_run(self.run)
        self.store.close()

    def reopen(self) -> Store:
        return Store(self.folder / STORE_NAME, create=False)


# The example: one floor division filled 5 bug buckets whose raw keys differ by the ops around it.
SURROUNDINGS = (("relu",), ("abs", "relu"), ("neg",), ("exp", "neg"), ("abs",))
DTYPES = ("float32", "bfloat16", "float32", "float16", "bfloat16")


def plant_floor_division(c: Campaign, *, analysed: bool = True) -> list[BucketKey]:
    raws = [c.find(floor_div(dtype, rows=8 * (i + 1), before=ops), cases=i + 1)
            for i, (ops, dtype) in enumerate(zip(SURROUNDINGS, DTYPES))]
    if analysed:  # each shrinks to the lone floor division: other sizes, dtypes and divisors
        for i, raw in enumerate(raws):
            c.file(raw, floor_div(raw.dtype, rows=2 + i, divisor=(0.1, 0.3, 2.5, 7.0, 0.1)[i]), LOWERING)
    return raws


# ---- the grouping rule ----------------------------------------------------------------------------


def test_the_floor_division_s_five_buckets_are_one_root_cause_once_minimized(tmp_path):
    c = Campaign(tmp_path)
    plant_floor_division(c, analysed=False)
    pending = root_cause_groups(c.store.buckets())
    assert len(pending) == 5 and all(not rc.minimized and len(rc.buckets) == 1 for rc in pending)  # alone until analysed
    raws = [b.key for b in c.store.buckets()]
    assert all(raw.culprit is None for raw in raws)
    for i, raw in enumerate(sorted(raws, key=str)):
        c.file(raw, floor_div(raw.dtype, rows=2 + i, divisor=(0.1, 0.3, 2.5, 7.0, 0.1)[i]), LOWERING)
    buckets = c.store.buckets()
    assert len(buckets) == 3  # the store's keys still differ by dtype and kind: fp32, bf16, fp16
    [rc] = root_cause_groups(buckets)
    assert rc.severity == "bug" and rc.culprit == LOWERING and rc.cases == 15 and len(rc.buckets) == 3
    assert rc.pattern == "v1 = div(x0; mode=floor) -> v1"  # no size, dtype or divisor in it
    assert (rc.lead.key.dtype, rc.lead.count) == ("bfloat16", 7)  # most cases lead: bf16 2 + 5, fp32 1 + 3, fp16 4
    assert rc.counted() == "3 buckets (3 bug), 15 cases"
    assert [b["cases"] for b in rc.to_dict()["buckets"]] == [7, 4, 4] and rc.to_dict()["pattern"] == rc.pattern
    c.close()


@pytest.mark.parametrize("other, culprit, minimized, folds", [
    (floor_div("bfloat16", rows=5, divisor=7.0), LOWERING, True, True),  # other size, dtype, divisor: one cause
    (floor_div("bfloat16"), "decomposition of aten.div", True, False),  # another culprit
    (floor_div("bfloat16", mode="trunc"), LOWERING, True, False),  # another rounding mode
    (floor_div("bfloat16", mode=None), LOWERING, True, False),  # true division
    (mul_then_div("bfloat16"), LOWERING, True, False),  # other ops, other wiring
    (floor_div("bfloat16"), LOWERING, False, False),  # attributed but not minimized: alone
], ids=["same-pattern-and-culprit", "other-culprit", "trunc", "true-division", "rewired", "not-minimized"])
def test_only_the_same_minimized_pattern_and_culprit_fold(tmp_path, other, culprit, minimized, folds):
    c = Campaign(tmp_path)
    first = c.file(c.find(floor_div(before=("relu",))), floor_div(rows=2), LOWERING)
    second = c.file(c.find(floor_div("bfloat16", before=("abs", "neg"))), other, culprit, minimized=minimized)
    assert first != second  # two buckets in the store (fp32 and bf16 keys)
    groups = sorted(sorted(b.id for b in rc.buckets) for rc in root_cause_groups(c.store.buckets()))
    assert groups == ([[first, second]] if folds else [[first], [second]])
    c.close()


def test_a_finding_about_eager_never_shares_a_root_cause_with_the_compiler_s(tmp_path):
    c = Campaign(tmp_path)
    bug = c.file(c.find(floor_div(before=("relu",))), floor_div(), LOWERING)
    eager = c.file(c.find(floor_div("bfloat16", before=("abs",)), severity=EAGER_WORSE), floor_div("bfloat16"), LOWERING,
                   severity=EAGER_WORSE)
    causes = root_cause_groups(c.store.buckets())
    assert [([b.id for b in rc.buckets], rc.severity) for rc in causes] == [([bug], "bug"), ([eager], EAGER_WORSE)]
    c.close()


def test_the_pattern_reads_wiring_and_modes_not_sizes():
    assert graph_pattern(mul_then_div().to_dict()) == "v1 = mul(x0, x1); v2 = div(x1; mode=floor) -> v1, v2"
    assert graph_pattern(floor_div(rows=3).to_dict()) == graph_pattern(floor_div("float16", rows=900, divisor=7.0).to_dict())
    assert graph_pattern({"schema_version": 1, "inputs": "<not a list>"}) is None  # a damaged spec: no pattern, alone


def test_the_rule_imports_no_torch(tmp_path):
    c = Campaign(tmp_path)
    plant_floor_division(c)
    c.close()
    code = ("import sys; from divfuzz.fuzzer.store import Store; from divfuzz.reports.root_causes import root_cause_groups; "
            f"print(len(root_cause_groups(Store({str(tmp_path / STORE_NAME)!r}, create=False).buckets())), "
            "'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.stdout.split() == ["1", "False"], r.stderr


# ---- what readers see -----------------------------------------------------------------------------


def mixed_store(folder: Path) -> dict[str, int]:
    """The floor division (3 bug buckets, one root cause), a suspect, an eager-worse finding, a
    by-design and a pending raw bug bucket."""
    c = Campaign(folder)
    plant_floor_division(c)
    ids = {"floor": c.store.buckets()[0].id}
    # other culprits: the store's key (ops @ culprit, per dtype) would otherwise merge them with the floor division
    ids["suspect"] = c.file(c.find(floor_div(before=("sigmoid",), mode="trunc"), severity="suspect"),
                            floor_div(mode="trunc"), "inductor (no single subsystem)", severity="suspect")
    ids["eager"] = c.file(c.find(floor_div("float16", before=("log",), mode=None), severity=EAGER_WORSE),
                          floor_div("float16", mode=None), "decomposition of aten.div", severity=EAGER_WORSE)
    # a suspect difference that a documented precision switch removes: by-design once attributed
    ids["by-design"] = c.file(c.find(floor_div("bfloat16", before=("tanh",), mode=None), severity="suspect"),
                              floor_div("bfloat16", mode=None), "inductor: emulate_precision_casts removes it", severity="by-design")
    c.find(floor_div("bfloat16", before=("sin", "cos")))  # stays pending: a raw bug bucket
    ids["pending"] = max(b.id for b in c.store.buckets())
    c.close()
    return ids


def test_markdown_lists_root_causes_with_their_buckets_counted_and_eager_apart(tmp_path):
    ids = mixed_store(tmp_path)
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    text = r.output
    assert "Severity (buckets): 4 bug, 1 suspect, 1 by-design, 0 noise; 1 eager-worse, about eager" in text
    assert "Root causes: 2 bug, 1 suspect, 1 by-design, 0 noise; 1 eager-worse, about eager." in text
    assert "## bug: 2 root causes, 4 buckets, 16 cases" in text  # the floor division (15 cases) and the pending one
    floor = text[text.index("### 1. `div @ inductor lowering of aten.div` (bug · cpu · known: pytorch#197895 (open"):text.index("### 2. ")]
    assert "(bug · cpu · new)" in text[text.index("### 2. "):]  # the pending sin/cos graph matches no known bug
    assert "* 3 buckets (3 bug), 15 cases:" in floor
    rows = [line for line in floor.splitlines() if re.match(r"^\| \d+ \| bug \|", line)]  # its raw buckets, beneath
    assert [r.split(" | ")[2] for r in rows] == ["bf16-ulp", "fp32-ulp", "fp16-ulp"] and all("6 → 1 ops" in r for r in rows)
    assert "not minimized yet" in text[text.index("### 2. "):]
    heads = [text.index(h) for h in ("## bug", "## suspect", "## eager-worse", "## by-design and noise")]
    assert heads == sorted(heads)
    eager = text[heads[2]:heads[3]]
    assert f"| {ids['eager']} | eager-worse |" in eager and "bug" not in eager.split("\n", 1)[0]


def test_html_leads_with_root_causes_and_only_bug_cards_carry_plots(tmp_path):
    ids = mixed_store(tmp_path)
    store = Store(tmp_path / STORE_NAME, create=False)
    page = render_html(collect(store), tmp_path / "report.html")
    n_buckets = len(store.buckets())
    store.close()
    assert len(re.findall(r'<article class="card', page)) == n_buckets  # every raw bucket keeps its card
    floor = re.search(r'<section class="root-cause sev-bug" id="rc-(\d+)" data-root-cause="\d+" data-buckets="3">', page)
    assert floor and "3 buckets (3 bug), 15 cases" in page
    order = [page.index(f'id="{s}"') for s in ("sev-bug", "sev-suspect", "sev-eager-worse", "sev-by-design", "campaign")]
    assert order == sorted(order)
    assert "root causes by severity: " in page
    cards = {int(m.group(2)): m.group(0) for m in re.finditer(
        r'<article class="card sev-([a-z-]+)[^"]*" id="bucket-(\d+)".*?</article>', page, re.S)}
    with_plots = {i for i, card in cards.items() if "<svg" in card}
    assert with_plots == {int(floor.group(1)), ids["pending"]}  # the bug root causes' lead cards, nothing else
    for i, card in cards.items():
        if i not in with_plots:
            assert "data-plot" not in card and f"--bucket {i} --html" in card


def test_report_bucket_draws_one_compact_card_s_plots(tmp_path):
    ids = mixed_store(tmp_path)
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--bucket", str(ids["suspect"]), "--html",
                                  str(tmp_path / "b.html")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    page = (tmp_path / "b.html").read_text()
    assert f'data-plot="ulp-histogram-{ids["suspect"]}-float32"' in page
    assert len(re.findall(r'<article class="card', page)) == 1
    bad = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--bucket", "999", "--html", str(tmp_path / "x.html")])
    assert bad.exit_code == 2 and "no bucket 999" in bad.stderr and not (tmp_path / "x.html").exists()


def test_diff_tells_a_new_root_cause_from_new_buckets_of_a_known_one(tmp_path):
    old = Campaign(tmp_path / "old")
    old.file(old.find(floor_div(before=("relu",))), floor_div(), LOWERING)
    old.close()
    new = Campaign(tmp_path / "new", seed=2)
    new.file(new.find(floor_div(before=("relu",))), floor_div(), LOWERING)
    new.file(new.find(floor_div("bfloat16", before=("abs",))), floor_div("bfloat16", rows=4), LOWERING)  # known cause, new bucket
    new.file(new.find(floor_div("float16", before=("neg",), mode="trunc")), floor_div("float16", mode="trunc"), LOWERING)
    new.close()
    sides = []
    for c in (old, new):
        store = c.reopen()
        sides.append(side_from_store(store, label=c.folder.name))
        store.close()
    d = diff_sides(*sides)
    assert len(d.new_buckets) == 2
    rows = {r.status: r for r in d.root_causes("new")}
    assert set(rows) == {"new root cause", "known root cause, new buckets"}
    assert rows["known root cause, new buckets"].buckets[0].dtype == "bfloat16"
    text = diff_text(d)
    assert "root causes: 1 new, 1 known with new buckets, 0 gone" in text
    assert text.index("new root cause [bug]") < text.index("raw buckets:")
    data = json.loads(CliRunner().invoke(main, ["diff", str(old.folder), str(new.folder), "--json"]).stdout)
    assert sorted(r["status"] for r in data["root_causes"]["new"]) == ["known root cause, new buckets", "new root cause"]


# ---- the 80x24 summary at the end of `divfuzz fuzz` ------------------------------------------------


def test_fuzz_s_summary_fits_one_80x24_screen(tmp_path, monkeypatch):
    """40 bug root causes (one of them the floor division's 3 buckets), 60 suspects, an eager-worse
    one and a pending analysis: the summary and report.html's line fit 80x24 (the store in
    `divfuzz-out/`, as the README's command leaves it)."""
    from divfuzz.fuzzer.cli.fuzz_command import _print_summary, _write_report_html
    from divfuzz.fuzzer.cli.options import console, out

    monkeypatch.chdir(tmp_path)
    out_dir = Path("divfuzz-out")
    c = Campaign(out_dir)
    plant_floor_division(c)
    chain = ("relu", "abs", "neg", "exp", "sigmoid", "tanh", "log", "sin", "cos", "sign")
    for i in range(39):  # distinct patterns: two ops of the chain before a floor division, with long culprits
        ops = (chain[i % 10], chain[(i // 10 + i + 1) % 10])
        c.file(c.find(floor_div(before=ops)), floor_div(before=ops), f"inductor lowering of aten.div, variant {i} " + "x" * 60)
    for i in range(60):
        c.file(c.find(floor_div("float16", before=(chain[i % 10], chain[(i + 3) % 10], chain[(i // 10) % 10]), mode="trunc"),
                      severity="suspect"), floor_div("float16", mode="trunc"), f"inductor: suspect culprit {i}", severity="suspect")
    c.file(c.find(floor_div("bfloat16", before=("sign", "cos", "sin")), severity=EAGER_WORSE),
           floor_div("bfloat16", before=("sign",)), LOWERING, severity=EAGER_WORSE)
    suspects = sum(b.severity == "suspect" for b in c.store.buckets())  # some drawn op sets repeat: fewer than 60
    c.close()
    result = CampaignResult(run_id=c.run, resumed=False, progress=Progress(started=time.monotonic() - 95, cases=300),
                            store_path=out_dir / STORE_NAME, interrupted=False, pending_analyses=1)
    with out.capture() as summary, console.capture() as report_line:
        _print_summary(result)
        _write_report_html(result.store_path, out_dir / "report.html")
    screen = summary.get() + report_line.get()
    lines = screen.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80, screen
    rendered = io.StringIO()
    Console(file=rendered, width=80, color_system=None).print(screen, end="", markup=False, highlight=False)
    assert rendered.getvalue().splitlines() == lines  # nothing wraps at 80 columns
    assert f"buckets:     42 bug, {suspects} suspect, 0 by-design, 0 noise" in screen
    assert f"root causes: 40 bug, {suspects} suspect, 0 by-design, 0 noise" in screen
    assert "about eager, not counted above: 1 eager-worse root causes (1 buckets)" in screen
    assert "1 analysis pending" in screen
    # Every root cause here matches one known upstream issue: they read as one line (by_upstream).
    assert re.search(r"^  #\d+ \d+ cases \(new this run\)  pytorch#197895  40 culprits \(40\): div,", screen, re.M), screen
    assert len(re.findall(r"^  #\d+", screen, re.M)) == 1 and "more bug root causes" not in screen
    assert lines[-1] == "report: divfuzz-out/report.html"


def test_the_first_screen_gives_one_line_to_a_lowering_met_through_several_op_patterns(tmp_path):
    """Three patterns that shrink to three root causes of one lowering read as one line; two of a
    switch that removes them (many different bugs may share a switch) and one alone keep theirs."""
    from divfuzz.reports.root_causes import by_culprit, summary_lines

    c = Campaign(tmp_path)
    plant_floor_division(c)  # 15 cases: div @ LOWERING
    sin = c.find(floor_div(before=("sin", "relu")), cases=4)
    c.file(sin, floor_div(before=("sin",)), LOWERING)
    wired = c.find(mul_then_div(), cases=2)
    c.file(wired, mul_then_div(), LOWERING)
    switch = "inductor: emulate_precision_casts removes it"
    for ops, n in ((("cos",), 3), (("tanh",), 1)):
        raw = c.find(floor_div("bfloat16", before=ops), cases=n)
        c.file(raw, floor_div("bfloat16", before=ops), switch)
    alone = c.find(floor_div(before=("exp",), mode=None), cases=5)
    c.file(alone, floor_div(mode=None), "decomposition of aten.div")
    causes = root_cause_groups(c.store.buckets())
    assert len(causes) == 6
    groups = by_culprit(causes)
    assert [len(g) for g in groups] == [3, 1, 1, 1]  # 21 cases, 5, 3, 1
    assert {rc.culprit for rc in groups[0]} == {LOWERING} and groups[0][0].cases == 15
    lines = summary_lines(causes, width=200, new_in_run=c.run)
    # New root causes first (the two a switch removes), then the known upstream one: the lowering's
    # three root causes and the decomposition's, which match the same issue, read as one line.
    assert [line.endswith(f"@ {switch}") for line in lines[:2]] == [True, True] and all("  new  " in line for line in lines[:2])
    assert re.fullmatch(r"  #\d+ 26 cases \(new this run\)  pytorch#197895  2 culprits \(4\): div, sin\+div, mul\+div", lines[2]), lines[2]
    assert len(lines) == 3
    # Cut to fit: the lines left out count the root causes they hold.
    cut = summary_lines(causes, width=80, max_lines=2)
    assert cut[-1] == "  ... and 5 more bug root causes" and len(cut) == 2  # the first line holds one new root cause and max(map(len, cut)) <= 80
    # The report opens with the same lines, uncut, before the root causes one by one.
    from divfuzz.reports.markdown import iter_buckets_markdown

    report = "".join(iter_buckets_markdown(c.store)).splitlines()
    start = report.index(next(line for line in report if line.startswith("## First screen")))
    screen = report[start + 2:report.index("", start + 2)]
    assert len(screen) == 3 and all(line.startswith("- #") for line in screen), screen
    assert "pytorch#197895" in screen[2] and "2 culprits (4): div, sin+div, mul+div" in screen[2], screen
    assert start < report.index(next(line for line in report if line.startswith("## bug:")))
    c.close()


def upsample(mode: str, autocast: str | None = "bfloat16") -> GraphSpec:
    """One interpolation of a bfloat16 input, under `autocast`: its minimized dtype-change pattern."""
    op = f"interpolate_{mode}"
    params = (("align_corners", False), ("scale_factor", 0.5)) if mode == "bilinear" else (("mode", "nearest-exact"), ("scale_factor", 0.5))
    return GraphSpec(inputs=(TensorSpec("x1", (1, 2, 2), "bfloat16"),),
                     nodes=(Node("v1", op, ("x1",), params, "bfloat16", (1, 1, 1)),), outputs=("v1",), autocast=autocast)


def test_dtype_changes_at_one_stage_under_one_autocast_read_as_one_line_with_their_ops(tmp_path):
    """Two interpolations whose output dtype changes at aot_eager under bfloat16 autocast (H100
    seed 163: float32 eager, bfloat16 compiled) are one line: one typing rule of one stage, met by
    two ops. A dtype change with no autocast, or under another autocast at another stage, keeps its
    own line."""
    from divfuzz.reports.root_causes import summary_lines

    c = Campaign(tmp_path, device="cuda")
    for mode, autocast, culprit, n in (("nearest", "bfloat16", "aot_eager (no single subsystem)", 4),
                                       ("bilinear", "bfloat16", "aot_eager (no single subsystem)", 3),
                                       ("bilinear", None, "aot_eager (no single subsystem)", 2),
                                       ("bilinear", "float16", "inductor (no single subsystem)", 1)):
        spec = upsample(mode, autocast)
        raw = c.find(spec, cases=n, kind="type-mismatch")
        c.file(raw, spec, culprit, severity="bug")
    causes = root_cause_groups(c.store.buckets())
    assert len(causes) == 4 and all(rc.severity == "bug" for rc in causes)
    lines = summary_lines(causes, width=300)
    assert len(lines) == 3, lines
    assert re.fullmatch(r"  #\d+ 7 cases  new  output dtype or shape changed @ aot_eager \(no single subsystem\) \(2\): "
                        r"interpolate_nearest \(autocast bfloat16\), interpolate_bilinear \(autocast bfloat16\)", lines[0]), lines
    assert "2 cases" in lines[1] and "interpolate_bilinear @ aot_eager" in lines[1], lines
    assert "1 case " in lines[2] and "@ inductor" in lines[2], lines
    c.close()


def unary_chain(*ops: str, dtype: str = "float32") -> GraphSpec:
    nodes, last = [], "x0"
    for i, op in enumerate(ops, start=1):
        nodes.append(Node(f"v{i}", op, (last,), (), dtype, (8, 16)))
        last = f"v{i}"
    return GraphSpec(inputs=(TensorSpec("x0", (8, 16), dtype),), nodes=tuple(nodes), outputs=(last,))


def test_new_bug_candidates_whose_analysis_has_not_run_share_one_last_line_and_known_ones_join_theirs(tmp_path):
    """Raw bug buckets the budget left unanalysed (no minimal graph, no culprit) are candidates:
    the new ones read as one last line that says so and how to finish them; one that matches a
    known upstream issue counts on that issue's line. Analysed root causes keep a line each."""
    from divfuzz.reports.root_causes import summary_lines

    c = Campaign(tmp_path)
    plant_floor_division(c)  # analysed: div @ LOWERING, pytorch#197895
    c.find(floor_div(before=("cos",)), cases=2)  # unanalysed, of the known issue
    analysed = c.find(unary_chain("tanh", "exp"), cases=3)
    c.file(analysed, unary_chain("exp"), "inductor lowering of exp")
    for ops, n in ((("sin", "exp"), 4), (("sigmoid", "relu"), 1)):
        c.find(unary_chain(*ops), cases=n)  # unanalysed, new
    lines = summary_lines(root_cause_groups(c.store.buckets()), width=300)
    assert len(lines) == 3, lines
    assert lines[0].endswith("  new  exp @ inductor lowering of exp"), lines
    assert "pytorch#197895" in lines[1] and "17 cases" in lines[1], lines  # 15 analysed + 2 awaiting
    assert re.fullmatch(r"  #\d+ 5 cases  2 not analysed yet \(the budget ended first; divfuzz minimize --pending "
                        r"finishes them\): exp\+sin, relu\+sigmoid", lines[2]), lines  # a raw key sorts its ops
    c.close()


def test_report_new_only_hides_root_causes_that_match_a_known_upstream_bug(tmp_path):
    mixed_store(tmp_path)
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--new-only"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "--new-only: 1 root causes that match a known upstream bug are hidden." in r.output
    assert "pytorch#197895" not in r.output and "cos+div+sin (not attributed yet)" in r.output


def test_report_shows_per_op_coverage_with_buckets_by_severity(tmp_path):
    mixed_store(tmp_path)
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    table = r.output[r.output.index("## Op coverage"):]
    div = next(line for line in table.splitlines() if line.startswith("| div |"))
    cells = [c.strip() for c in div.strip("|").split("|")]
    assert int(cells[2]) >= 8 and "bug" in cells[4] and "eager-worse" in cells[4]  # every case holds a div
    assert "Never drawn (" in table and "argmax" in table.split("Never drawn", 1)[1]
