"""The nightly report: one self-contained HTML page of a store, led by `bug`, with plots.

`collect(store, run_id=None)` reads what the page needs from a store (any object with the
`Store` read methods: this module never imports `fuzzer`); `render_html(data, html_path)` is a
pure function of that data and of where the page will live (links are relative to it).

Invariants:
- self-contained: no script, no external stylesheet, font, image or link other than the
  bucket folders' own `repro.py` and `report.md` (relative, percent-quoted paths): the page
  opens offline, on an air-gapped cluster or as a CI artifact;
- everything that came from a store (op and spec names, keys, culprits, error messages, folder
  paths, version strings) is HTML-escaped; code is printed only from a spec that `GraphSpec`
  validated, through `divfuzz.reports.repro.graph_code`;
- the page lists root causes (`divfuzz.reports.root_causes`: buckets whose minimized pattern and culprit
  agree), each with its raw buckets counted beneath: `bug`, then `suspect`, then the findings
  about eager (`eager-worse`) in a section of their own, never counted with the compiler's;
  `by-design` and `noise` are folded (`<details>`) with counts per culprit; every bucket gets one
  card (`<article class="card">`, anchored `#bucket-N`);
- only a bug root cause's lead card inlines plots (over every case of the root cause); every
  other card is compact: no plot, its code, ladder and verdict folded, and the command that
  draws its plots (`divfuzz report --bucket N`), which keeps a nightly page small;
- plots are drawn from the stored verdicts only (see `divfuzz.reports.plots` for why hand-written SVG):
  per-element errors are the verdicts' `error_sample` (up to 64 differing elements per output);
  a verdict stored before it existed has none, and the plot says so rather than invent points;
- bounded (issue 40: a store of 100,001 buckets took 7.2 GB and gave a 394 MB page): each section
  shows at most `MAX_ROOT_CAUSES_PER_SECTION` root causes (most severe first, as `root_causes`
  orders them), each with at most `MAX_OTHER_CARDS` compact cards and `MAX_TABLE_ROWS` rows, a
  fold row at most `MAX_FOLD_IDS` bucket links, a plot at most `PLOT_CASES_PER_ROOT_CAUSE`
  cases and a curve over time at most `MAX_PLOT_STEPS` steps; what is left out is counted, with
  the command that shows it. `collect` reads no bucket row it does not show: the store files the
  buckets by root cause and counts them in SQLite (`Store.root_cause_index`), and `collect` asks
  for each section's totals, its first root causes and their first buckets. It reads the cases a
  page at a time (`Store.iter_case_summaries`), keeping sums, and the campaign plots' store times
  as a sorted stream (`Store.iter_case_times`); the page is written piece by piece
  (`write_html`). Memory grows with what is shown, not with the buckets or the cases;
- no control character reaches the page raw (a NUL in a stored key included): `escaped` writes
  each as a visible escape (`divfuzz.reports.terminal.terminal_safe`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from divfuzz.reports.store_view import StoreView
from divfuzz.reports import plots
from divfuzz.reports.root_causes import COMPILER_ORDER, EAGER_WORSE, RootCause, culprit_of, severity_rank
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.errors import DivfuzzError
from divfuzz.records.verdict import is_phase_span
from divfuzz.reports.terminal import terminal_safe
from divfuzz.reports.bucket_files import REPORT_FILE, REPRO_FILE

# The per-element scatter: at most this many points per (bucket, dtype), taken case by case in
# store order; errors under the floor (exact on one side) are drawn at it, on log axes.
ELEMENT_POINTS_MAX = 256
ELEMENT_ERROR_FLOOR = 1e-3

# What one page shows at most (the module docstring, "bounded").
MAX_ROOT_CAUSES_PER_SECTION = 50
MAX_OTHER_CARDS = 5
MAX_TABLE_ROWS = 50
MAX_FOLD_IDS = 20
PLOT_CASES_PER_ROOT_CAUSE = 64
MAX_PLOT_STEPS = 500  # the new-buckets curve: past this many buckets, one step for several

# Verdict timing spans, in the order a case runs them (others follow, by name).
TIMING_ORDER = ("build", "eager", "reference", "compile", "compiled_run", "oracles", "case")


@dataclass(frozen=True)
class RunTimeline:
    """A run's cases over time, as the campaign plots draw them (`run_timeline`)."""

    last_at: float  # the store time of its last case
    rate: list  # (minutes since the run started, cases/s): about 20 points
    found: list  # (minutes, buckets opened so far): a step per bucket, at most MAX_PLOT_STEPS


@dataclass
class CampaignStats:
    """What the header and the campaign plots need from every case, summed as the cases stream by."""

    cases: int = 0
    timelines: dict = field(default_factory=dict)  # run id -> RunTimeline, for the runs with cases in scope
    drawn: Counter = field(default_factory=Counter)  # op -> cases drawing it
    found: Counter = field(default_factory=Counter)  # op -> those in a bucket
    d_drawn: Counter = field(default_factory=Counter)
    d_found: Counter = field(default_factory=Counter)
    spans: Counter = field(default_factory=Counter)  # timing span -> seconds summed over the cases

    def add(self, c: dict) -> None:
        self.cases += 1
        _count_ops_and_dtypes(c, self.drawn, self.found, self.d_drawn, self.d_found)
        timings = c["verdict"].get("timings") or {}
        own = 0.0
        for name, sec in (timings.items() if isinstance(timings, dict) else ()):
            if is_phase_span(str(name)):  # a compile's phase: its seconds are in its compile span (`bench --breakdown` shows them)
                continue
            if isinstance(sec, (int, float)) and math.isfinite(sec):
                self.spans[str(name)] += float(sec)
                own += float(sec)
        self.spans["worker round trip"] += max(0.0, float(c["wall_s"]) - own)


@dataclass(frozen=True)
class Section:
    """One severity's part of a page: its totals over every root cause, and what it shows."""

    severity: str
    root_causes: int
    buckets: int
    cases: int
    shown: list  # its first MAX_ROOT_CAUSES_PER_SECTION root causes, each holding its first MAX_TABLE_ROWS buckets
    folds: list  # by-design and noise: (severity, culprit, root causes, buckets, cases, first MAX_FOLD_IDS bucket ids)


@dataclass(frozen=True)
class ReportData:
    """What the page shows, read from a store once."""

    store_path: str
    run_id: int | None  # only this run's buckets and cases, or None for the whole store
    runs: list[dict[str, Any]]  # Store.runs()
    bucket_counts: Counter  # severity -> buckets in scope
    cause_counts: Counter  # severity -> root causes in scope
    sections: dict[str, Section]  # severity -> its section, for each severity with a root cause
    cases: list[dict[str, Any]]  # the cases the page's cards show (`page_plan`), as Store.case_summaries() gives them
    stats: CampaignStats = field(default_factory=CampaignStats)  # every case of the scope, summed

    @property
    def bucket_total(self) -> int:
        return sum(self.bucket_counts.values())


def collect(store: StoreView, *, run_id: int | None = None, bucket_id: int | None = None, plots: str = "bug") -> ReportData:
    """Read a store (or one run of it, or one bucket: `bucket_id`) for `render_html` with `plots`:
    each severity's totals and the root causes it shows, with their first buckets (the store
    files and counts the buckets in SQLite: `Store.root_cause_index`), every case summed as it
    streams by (`CampaignStats`), and the cases of the cards the page shows (`page_plan`: a
    plotted root cause's first cases, every card's first case)."""
    runs = store.runs()
    if run_id is not None:
        runs = [r for r in runs if r["id"] == run_id]
    with store.root_cause_index(run_id=run_id, bucket_id=bucket_id) as index:
        bucket_counts, cause_counts = index.bucket_counts(), index.cause_counts()
        sections = {}
        for sev in sorted(cause_counts, key=lambda s: (severity_rank(s), s)):
            shown = list(index.causes(sev, limit=MAX_ROOT_CAUSES_PER_SECTION, buckets=MAX_TABLE_ROWS))
            folds = index.folds(sev, ids=MAX_FOLD_IDS) if sev in ("by-design", "noise") else []
            sections[sev] = Section(sev, *index.section(sev), shown=shown, folds=folds)
    stats = CampaignStats()
    for c in store.iter_case_summaries(run_id=run_id, bucket_id=bucket_id):  # a bucket's page: its own cases
        stats.add(c)
    for run in runs:
        timeline = run_timeline(store, run, bucket_id=bucket_id)
        if timeline is not None:
            stats.timelines[run["id"]] = timeline
    cases: list[dict] = []
    for rc, cards, plotted in page_plan(sections, plots=plots):
        left = PLOT_CASES_PER_ROOT_CAUSE
        for b in cards:
            want = left if plotted else 0
            got = store.bucket_case_summaries(b.id, limit=want, also=b.first_case_id)
            cases += [c for c in got if run_id is None or c["run_id"] == run_id]
            left -= min(want, len(got))
    return ReportData(store_path=str(store.path), run_id=run_id, runs=runs, bucket_counts=bucket_counts,
                      cause_counts=cause_counts, sections=sections, cases=cases, stats=stats)


def run_timeline(store: StoreView, run: dict, *, bucket_id: int | None = None) -> RunTimeline | None:
    """A run's cases (of one bucket, with `bucket_id`) over time, from their store times read in
    order (`Store.iter_case_times`): the throughput, about 20 points (a window of 1/20 of its
    cases each), and the buckets it opened, a step at each (at most MAX_PLOT_STEPS steps: past
    that, one step for several). None when the run has no case in scope."""
    n = store.case_count(run_id=run["id"], bucket_id=bucket_id)
    if not n:
        return None
    t0 = run["started_at"]
    window = max(1, n // 20)
    rate, t_lo, last = [], t0, None
    for j, at in enumerate(store.iter_case_times(run_id=run["id"], bucket_id=bucket_id), start=1):
        last = at
        if j % window == 0:
            if at - t_lo > 0:
                rate.append(((at - t0) / 60, window / (at - t_lo)))
            t_lo = at
    if last is None:  # its cases were deleted since they were counted
        return None
    opened = store.case_count(run_id=run["id"], bucket_id=bucket_id, opened=True)
    stride = max(1, -(-opened // MAX_PLOT_STEPS))  # a step every `stride` buckets
    found, n_new = [(0.0, 0.0)], 0
    for k, at in enumerate(store.iter_case_times(run_id=run["id"], bucket_id=bucket_id, opened=True), start=1):
        if k % stride == 0 or k == opened:  # a step: flat until the case that found it
            minute = (at - t0) / 60
            found += [(minute, float(n_new)), (minute, float(k))]
            n_new = k
    found.append(((last - t0) / 60, float(n_new)))
    return RunTimeline(last_at=last, rate=rate, found=found)


def page_plan(sections: dict[str, Section], *, plots: str) -> list[tuple[RootCause, list, bool]]:
    """The root causes a page shows, each with the buckets that get a card (its lead first) and
    whether its lead card is plotted: at most `MAX_ROOT_CAUSES_PER_SECTION` per severity, at most
    1 + `MAX_OTHER_CARDS` cards each. A pure function of the sections: `collect` reads the cases
    of these cards, `render_html` draws them."""
    return [(rc, list(rc.buckets[: 1 + MAX_OTHER_CARDS]), plots == "all" or rc.severity == "bug")
            for section in sections.values() for rc in section.shown[:MAX_ROOT_CAUSES_PER_SECTION]]


def escaped(value: Any) -> str:
    """`value` as HTML text, quotes included: every stored string on a page goes through it. A
    control or bidirectional character (a NUL in a stored key) is written as a visible escape."""
    return escape(terminal_safe(str(value)), quote=True)


def _when(ts: float | None) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _link(target: Path, html_path: Path, text: str) -> str:
    """A link to a file beside the page, relative to it; plain text when the file is not there.
    The path is percent-quoted whole, so a stored folder like `javascript:...` stays a path."""
    if not target.is_file():
        return f'<span class="missing">{escaped(text)} (not found)</span>'
    rel = os.path.relpath(target.resolve(), html_path.resolve().parent)
    return f'<a href="{escaped(quote(rel, safe="/"))}">{escaped(text)}</a>'


# ---- the header ---------------------------------------------------------------------------------


def _run_seconds(run: dict, stats: CampaignStats) -> float:
    own = stats.timelines.get(run["id"])
    end = run["finished_at"] or (own.last_at if own is not None else run["started_at"])
    return max(0.0, end - run["started_at"])


def _header(data: ReportData) -> str:
    counts = data.bucket_counts
    shown = COMPILER_ORDER + ((EAGER_WORSE,) if counts.get(EAGER_WORSE) else ())
    chips = "".join(f'<span class="chip sev-{escaped(s)}">{counts.get(s, 0)} {escaped(s)}</span>' for s in shown)
    rc_counts = data.cause_counts
    rc_chips = "".join(f'<span class="chip sev-{escaped(s)}">{rc_counts.get(s, 0)} {escaped(s)}</span>' for s in shown)
    rows = []
    for run in data.runs:
        v = run["versions"] or {}
        secs = _run_seconds(run, data.stats)
        rate = f"{run['cases'] / secs:.2f}" if secs >= 1 else "-"  # under a second: no meaningful rate
        cpu = f"CPU capability {v['cpu_capability']}" if v.get("cpu_capability") else "CPU capability not recorded"
        hardware = cpu
        if v.get("gpu"):
            hardware = f"{v['gpu']}; {cpu}"
        elif str(run["device"]).startswith("cuda"):
            hardware = f"GPU (name not recorded); {cpu}"
        config = run["config"] or {}
        compile_desc = " ".join(
            [str(config.get("backend", "?"))]
            + (["dynamic"] if config.get("dynamic") else [])
            + ([f"mode={config['mode']}"] if config.get("mode") else [])
            + [f"{k}={val!r}" for k, val in sorted((config.get("inductor") or {}).items())]
        )
        options = ", ".join(f"{k}={val}" for k, val in sorted((run["options"] or {}).items()) if val not in (None, False))
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{escaped(x)}</td>"
                for x in (
                    run["id"], run["status"], _when(run["started_at"]), run["device"], hardware,
                    v.get("torch", "-"), v.get("triton") or "-", v.get("cuda") or "-", compile_desc,
                    f"seed={run['seed']}, {options}", run["cases"], f"{secs:.0f}", rate,
                )
            )
            + "</tr>"
        )
    runs_table = (
        '<table class="runs"><thead><tr>'
        + "".join(
            f"<th>{h}</th>"
            for h in ("run", "status", "started", "device", "GPU / CPU", "torch", "Triton", "CUDA", "compile config",
                      "options", "cases", "seconds", "cases/s")
        )
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    scope = f"run {data.run_id}" if data.run_id is not None else f"{len(data.runs)} run(s)"
    return (
        f"<header><h1>divfuzz report</h1>"
        f'<p class="store">store <code>{escaped(data.store_path)}</code>, {escaped(scope)}, '
        f"{data.stats.cases} cases, {data.bucket_total} buckets</p>"
        f'<p class="severities">root causes by severity: {rc_chips}</p>'
        f'<p class="severities">buckets by severity: {chips}'
        + (" (eager-worse: findings about eager, never counted with the compiler's)" if counts.get(EAGER_WORSE) else "")
        + f"</p>{runs_table}</header>"
    )


# ---- one bucket's card --------------------------------------------------------------------------


def _differing_outputs(verdict: dict) -> list[dict]:
    return [
        o for o in verdict.get("outputs") or ()
        if (o.get("float") and (o["float"]["n_diff"] or o["float"]["nan_inf_mismatch"])) or (o.get("int") and o["int"]["flips"])
    ]


def _verdict_table(verdict: dict) -> str:
    """The fp64 verdict of the bucket's first case, output by output."""
    if verdict.get("error_type") or verdict.get("error_message"):
        msg = (verdict.get("error_message") or "")[:1500]
        return (
            f'<p class="error">{escaped(verdict.get("status", "?"))}: <code>{escaped(verdict.get("error_type") or "-")}</code></p>'
            + (f'<p class="error-site">raised at <code>{escaped(str(verdict["error_site"]))}</code></p>' if verdict.get("error_site") else "")
            + f"<pre class=\"error-message\">{escaped(msg)}</pre>"
        )
    if verdict.get("perf"):
        return _perf_table(verdict["perf"])
    rows = []
    for o in verdict.get("outputs") or ():
        f, i = o.get("float"), o.get("int")
        if f and f["nan_inf_mismatch"]:
            # NaN/Inf placed otherwise: an RMSE over the finite elements and its triage say nothing of it
            n = f["nan_inf_mismatch"]
            rows.append((o["name"], f["dtype"], f"{f['n_diff']}/{f['numel']}", f["max_ulp"], "- (a NaN/Inf finding)", "-",
                         f"placed otherwise at {n:,} element{'s' if n != 1 else ''}", ""))
        elif f:
            rows.append(
                (o["name"], f["dtype"], f"{f['n_diff']}/{f['numel']}", f["max_ulp"], f["triage"],
                 f"{f['rmse_eager']:.3g} / {f['rmse_compiled']:.3g}", f["nan_inf_mismatch"], "")
            )
        elif i:
            rows.append(
                (o["name"], i["dtype"], f"{i['flips']}/{i['numel']}", f"step {i['max_step']}",
                 _int_fp64_triage(i), "", "", f"{i['boundary_flips']} boundary / {i['gross_flips']} gross / "
                 f"{i['unknown_flips']} unknown / {i.get('undefined_flips', 0)} undefined")
            )
    if not rows:
        return '<p class="verdict">no outputs stored</p>'
    head = ("output", "dtype", "differing", "max ULP / step", "fp64 triage", "RMSE vs fp64 eager / compiled", "NaN/Inf", "int flips")
    return (
        '<table class="verdict"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{escaped(x)}</td>" for x in r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )


def _perf_table(phases: list[dict]) -> str:
    """The perf oracle's phases: eager and compiled medians, the ratio and its interval."""
    head = ("phase", "eager ms", "compiled ms", "compiled / eager", "95% interval", "pairs", "margin", "timer", "clock")
    rows = []
    for p in phases:
        try:
            rows.append((p["phase"], f"{p['eager_median_s'] * 1e3:.3f}", f"{p['compiled_median_s'] * 1e3:.3f}", f"{p['ratio']:.3f}",
                         f"[{p['ratio_low']:.3f}, {p['ratio_high']:.3f}]", p["repeats"], f"{p['margin']:.0%}", p.get("timer", ""),
                         p.get("clock") or "-"))
        except (KeyError, TypeError, ValueError):
            rows.append((str(p)[:200], "", "", "", "", "", "", "", ""))
    return (
        '<table class="verdict perf"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{escaped(x)}</td>" for x in r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )


def _int_fp64_triage(i: dict) -> str:
    if not i.get("fp64_known"):
        return "unknown"
    named = [(n, label) for n, label in ((i.get("compiled_correct", 0), "compiled-correct"), (i.get("eager_correct", 0), "eager-correct"), (i.get("neither_correct", 0), "neither")) if n]
    return named[0][1] if len(named) == 1 else ("mixed" if named else "unknown")


def _ladder(culprit: dict | None) -> str:
    """Which rung first differs, and what each probe changed."""
    if not culprit:
        return '<p class="ladder">not attributed (minimization off or not reached)</p>'
    ladder = [tuple(r) for r in culprit.get("ladder") or () if len(r) == 2]
    first = next((rung for rung, outcome in ladder if outcome != "ok"), None)
    parts = [f'<p class="ladder">first rung that differs: <b>{escaped(first or "none")}</b>'
             f'{" — stage " + escaped(culprit.get("stage")) if culprit.get("stage") else ""}</p>']
    if ladder:
        parts.append(
            '<table class="ladder"><thead><tr><th>rung</th><th>outcome</th></tr></thead><tbody>'
            + "".join(f'<tr class="{"differs" if o != "ok" else "same"}"><td>{escaped(r)}</td><td>{escaped(o)}</td></tr>' for r, o in ladder)
            + "</tbody></table>"
        )
    probes = [tuple(p) for p in culprit.get("probes") or () if len(p) == 2]
    if probes:
        parts.append(
            '<table class="probes"><thead><tr><th>probe</th><th>what it changed</th></tr></thead><tbody>'
            + "".join(f"<tr><td>{escaped(p)}</td><td>{escaped(o)}</td></tr>" for p, o in probes)
            + "</tbody></table>"
        )
    if culprit.get("bisect"):
        parts.append(f'<p class="bisect">compiler_bisector: <code>{escaped(culprit["bisect"])}</code></p>')
    return "".join(parts)


def _code(bucket, first_case: dict | None, *, highlight: bool = True) -> str:
    """The minimized graph (else the first case's) as highlighted Python, printed from a spec that
    GraphSpec validated; a spec that does not load is named, not printed."""
    # lazy: torch-free module: it loads torch only when this runs
    from divfuzz.reports.repro import graph_code

    minimized = (bucket.minimized or {})
    spec_dict = minimized.get("spec")
    where = "minimized spec"
    try:
        if spec_dict is not None:
            spec = GraphSpec.from_dict(spec_dict, source=f"bucket {bucket.id} minimized spec")
        elif first_case is not None:
            where = "first case's spec (not minimized)"
            spec = GraphSpec.from_json(first_case["spec_json"], source=f"bucket {bucket.id} first case")
        else:
            return '<p class="code-missing">no spec stored</p>'
        code = graph_code(spec)
    except (DivfuzzError, ValueError, KeyError, TypeError) as e:
        return f'<p class="code-missing">the {where} does not load as code: {escaped(e)}</p>'
    shrink = ""
    if "ops_before" in minimized:
        shrink = f" ({escaped(minimized['ops_before'])} → {escaped(minimized['ops_after'])} ops)"
    shown = _highlight(code) if highlight else f'<div class="code"><pre>{escaped(code)}</pre></div>'
    return f'<p class="code-title">{escaped(where)}{shrink}</p>' + shown


@functools.lru_cache(maxsize=None)
def _pygments():
    """One lexer and one formatter for the page (a formatter builds its style sheet when made)."""
    return PythonLexer(), HtmlFormatter(cssclass="code")


@functools.lru_cache(maxsize=1024)
def _highlight(code: str) -> str:
    lexer, formatter = _pygments()
    return highlight(code, lexer, formatter)


def _bucket_plots(bucket, cases: list[dict]) -> list[str]:
    """Per float output dtype: the ULP histogram (summed over the bucket's cases) and eager vs
    compiled RMSE against fp64 (one point per case); per integer output: flips against the
    pre-image's distance from the rounding boundary (one point per case) and flips by class."""
    histograms: dict[str, Counter] = defaultdict(Counter)
    hist_order: dict[str, list[str]] = {}
    errors: dict[str, list[tuple[float, float]]] = defaultdict(list)
    error_labels: dict[str, list[str]] = defaultdict(list)
    elements: dict[str, list[tuple[float, float]]] = defaultdict(list)
    element_labels: dict[str, list[str]] = defaultdict(list)
    int_points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    int_classes: dict[str, Counter] = defaultdict(Counter)
    for c in cases:
        for o in _differing_outputs(c["verdict"]):
            f, i = o.get("float"), o.get("int")
            if f:
                for label, n in f.get("ulp_histogram") or ():
                    histograms[f["dtype"]][str(label)] += int(n)
                    hist_order.setdefault(f["dtype"], [])
                    if str(label) not in hist_order[f["dtype"]]:
                        hist_order[f["dtype"]].append(str(label))
                errors[f["dtype"]].append((float(f["rmse_eager"]), float(f["rmse_compiled"])))
                error_labels[f["dtype"]].append(f"case {c['id']} {o['name']}")
                for e, comp in (f.get("error_sample") or ())[: max(0, ELEMENT_POINTS_MAX - len(elements[f["dtype"]]))]:
                    elements[f["dtype"]].append((max(float(e), ELEMENT_ERROR_FLOOR), max(float(comp), ELEMENT_ERROR_FLOOR)))
                    element_labels[f["dtype"]].append(f"case {c['id']} {o['name']}")
            elif i:
                if i.get("min_boundary_ulps") is not None:
                    int_points[i["dtype"]].append((float(i["min_boundary_ulps"]), float(i["flips"])))
                for cls in ("boundary_flips", "gross_flips", "unknown_flips", "undefined_flips"):
                    int_classes[i["dtype"]][cls.removesuffix("_flips")] += int(i.get(cls, 0))
    out = []
    for dtype, hist in histograms.items():
        out.append(plots.bar_chart(
            f"ulp-histogram-{bucket.id}-{dtype}", f"{dtype}: compiled vs eager distance, ULP",
            [(label, hist[label]) for label in hist_order[dtype]], x_label="ULP distance", y_label="elements",
        ))
        out.append(plots.scatter(
            f"error-scatter-{bucket.id}-{dtype}", f"{dtype}: RMSE vs fp64, one point per case",
            errors[dtype], x_label="eager error (RMSE vs fp64)", y_label="compiled error", diagonal=True,
            point_labels=error_labels[dtype], sides=("compiled worse", "eager worse"),
        ))
        out.append(plots.scatter(
            f"element-errors-{bucket.id}-{dtype}",
            f"{dtype}: element errors vs fp64, ULP ({len(elements[dtype])} shown)",
            elements[dtype], x_label="eager error (ULP)", y_label="compiled error (ULP)", diagonal=True,
            point_labels=element_labels[dtype], sides=("compiled worse", "eager worse"),
            empty_message="no per-element errors stored (verdicts written before the error sample)",
        ))
    for dtype in int_classes:
        out.append(plots.scatter(
            f"int-flips-{bucket.id}-{dtype}", f"{dtype}: flips vs nearest pre-image's boundary distance",
            int_points.get(dtype, []), x_label="smallest pre-image distance to a boundary (ULP)", y_label="flips per case",
            log=False,
        ))
        out.append(plots.bar_chart(
            f"int-classes-{bucket.id}-{dtype}", f"{dtype}: flips by pre-image",
            list(int_classes[dtype].items()), x_label="pre-image", y_label="flips",
        ))
    return out


def _card(bucket, cases_of: dict[int, list[dict]], html_path: Path, scope_run: int | None, *, plots_of: list[dict] | None,
          store_dir: str) -> str:
    """One bucket's card. With `plots_of` (the cases to plot: a bug root cause's lead bucket, or
    every card of a `--bucket` page) it is whole: highlighted code, ladder, verdict and inline
    plots. Without, it is compact: the code, ladder and verdict fold into a `<details>` (plain
    code, no highlighting) and no plot is inlined: a command renders them."""
    k = bucket.key
    cases = cases_of.get(bucket.id, [])
    first = next((c for c in cases if c["id"] == bucket.first_case_id), cases[0] if cases else None)
    reason = (bucket.severity_reason or {}).get("detail", "not judged yet")
    new = scope_run is not None and bucket.first_run_id == scope_run
    links = "no bucket folder"
    if bucket.folder:
        folder = Path(bucket.folder)
        links = " · ".join(_link(folder / name, html_path, name) for name in (REPRO_FILE, REPORT_FILE))
    perf = bool(first and first["verdict"].get("perf"))
    details = (
        f"{_code(bucket, first, highlight=plots_of is not None)}"
        f'<h4>ladder</h4>{_ladder(bucket.culprit)}'
        f'<h4>{"timings" if perf else "fp64 verdict"} (first case)</h4>'
        f'{_verdict_table(first["verdict"]) if first else "<p>no case stored</p>"}'
    )
    if plots_of is not None:
        plot_html = "".join(f'<figure class="plot-box">{svg}</figure>' for svg in _bucket_plots(bucket, plots_of))
        note = "" if plot_html or not plots_of else (
            '<p class="no-plot">no plot: the verdicts of this bucket carry no compared outputs (an error finding)</p>'
        )
        body = f'{details}<div class="plots">{plot_html}</div>{note}'
    else:
        command = f"divfuzz report --out {store_dir} --bucket {bucket.id} --html bucket-{bucket.id}.html"
        body = (f'<details class="more"><summary>code, ladder, fp64 verdict</summary>{details}</details>'
                f'<p class="plots-hint">plots: <code>{escaped(command)}</code></p>')
    return (
        f'<article class="card sev-{escaped(bucket.severity)}{"" if plots_of is not None else " compact"}" id="bucket-{bucket.id}" '
        f'data-bucket="{bucket.id}">'
        f'<h3><span class="chip sev-{escaped(bucket.severity)}">{escaped(bucket.severity)}</span> #{bucket.id} '
        f"{escaped(k.kind)}{' ' + escaped(k.detail) if k.detail else ''} · {escaped(k.dtype)} · {escaped(k.device_type)}"
        f"{' <span class=new>new</span>' if new else ''}</h3>"
        f'<p class="key">key <code>{escaped(str(k))}</code></p>'
        f'<p class="culprit">culprit: <b>{escaped(culprit_of(bucket))}</b></p>'
        f'<p class="reason">why {escaped(bucket.severity)}: {escaped(reason)}</p>'
        f'<p class="counts">{bucket.count} cases, first seen {escaped(_when(bucket.first_seen))} (run {bucket.first_run_id}), '
        f"last seen {escaped(_when(bucket.last_seen))} · {links}</p>"
        f"{body}</article>"
    )


def _root_cause(rc: RootCause, cases_of: dict[int, list[dict]], html_path: Path, data: "ReportData", *, plots: bool) -> str:
    """A root cause: its title, its raw buckets counted (and tabled when several), the lead
    bucket's card (whole, its plots over every case of the root cause, when `plots`) and the
    others' compact cards, folded."""
    store_dir = str(Path(data.store_path).parent)
    lead = rc.lead
    plot_cases = [c for b in rc.buckets[: 1 + MAX_OTHER_CARDS] for c in cases_of.get(b.id, [])][:PLOT_CASES_PER_ROOT_CAUSE] if plots else None
    pattern = (f'minimized pattern <code>{escaped(rc.pattern)}</code>' if rc.pattern is not None
               else "not minimized yet: a raw bucket (<code>divfuzz minimize --pending</code> analyses it)")
    table = ""
    if rc.bucket_count > 1:
        table = (
            '<table class="rc-buckets"><thead><tr><th>bucket</th><th>severity</th><th>kind</th><th>dtype</th><th>device</th>'
            "<th>cases</th><th>first seen</th></tr></thead><tbody>"
            + "".join(
                f'<tr><td><a href="#bucket-{b.id}">#{b.id}</a></td><td>{escaped(b.severity)}</td>'
                f"<td>{escaped(b.key.kind)}{' ' + escaped(b.key.detail) if b.key.detail else ''}</td><td>{escaped(b.key.dtype)}</td>"
                f"<td>{escaped(b.key.device_type)}</td><td>{b.count}</td><td>{escaped(_when(b.first_seen))}</td></tr>"
                for b in rc.buckets[:MAX_TABLE_ROWS]
            )
            + "</tbody></table>"
            + (f'<p class="left-out">and {rc.bucket_count - MAX_TABLE_ROWS} more buckets: <code>divfuzz report --out '
               f'{escaped(store_dir)}</code> lists them</p>' if rc.bucket_count > MAX_TABLE_ROWS else "")
        )
    others = "".join(_card(b, cases_of, html_path, data.run_id, plots_of=None, store_dir=store_dir)
                     for b in rc.buckets[1: 1 + MAX_OTHER_CARDS])
    if others:
        shown = min(rc.bucket_count - 1, MAX_OTHER_CARDS)
        others = (f'<details class="rc-others"><summary>its {rc.bucket_count - 1} other buckets'
                  f'{"" if shown == rc.bucket_count - 1 else f" ({shown} shown)"}</summary>{others}</details>')
    return (
        f'<section class="root-cause sev-{escaped(rc.severity)}" id="rc-{lead.id}" data-root-cause="{lead.id}" '
        f'data-buckets="{rc.bucket_count}">'
        f'<h3><span class="chip sev-{escaped(rc.severity)}">{escaped(rc.severity)}</span> root cause <code>{escaped(rc.title)}</code>'
        f' <span class="known">{escaped(rc.known)}</span></h3>'
        f'<p class="rc-counts">{escaped(rc.counted())} · {pattern}</p>{table}'
        + _card(lead, cases_of, html_path, data.run_id, plots_of=plot_cases, store_dir=store_dir)
        + others
        + "</section>"
    )


# ---- campaign plots -----------------------------------------------------------------------------


def _count_ops_and_dtypes(c: dict, drawn: Counter, found: Counter, d_drawn: Counter, d_found: Counter) -> None:
    """Count one case's ops and dtypes, each once: drawn, and found when the case is in a bucket.
    Specs are read as JSON only (never built): a spec that does not parse counts as no ops."""
    try:
        spec = json.loads(c["spec_json"])
        ops = {str(n["op"]) for n in spec.get("nodes") or ()}
        dtypes = {str(t["dtype"]) for t in (*(spec.get("inputs") or ()), *(spec.get("nodes") or ()))}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return
    drawn.update(ops)
    d_drawn.update(dtypes)
    if c["bucket_id"] is not None:
        found.update(ops)
        d_found.update(dtypes)


def _campaign_plots(data: ReportData) -> list[str]:
    stats = data.stats
    out = []
    # Throughput and new buckets over time, per run, from the cases' store times.
    rate_series, bucket_series = [], []
    for run in data.runs:
        own = stats.timelines.get(run["id"])
        if own is None:
            continue
        rate_series.append((f"run {run['id']}", own.rate))
        bucket_series.append((f"run {run['id']}", own.found))
    out.append(plots.step_lines("throughput", "cases/s over time", rate_series, x_label="minutes since the run started", y_label="cases/s"))
    out.append(plots.step_lines("new-buckets", "new buckets over time", bucket_series, x_label="minutes since the run started", y_label="new buckets"))
    drawn, found, d_drawn, d_found = stats.drawn, stats.found, stats.d_drawn, stats.d_found
    top = [op for op, _ in drawn.most_common(30)]
    out.append(plots.hbar_chart(
        "op-coverage", f"op coverage ({len(drawn)} ops; top {len(top)} by draws)", [(op, (drawn[op], found[op])) for op in top],
        series=("cases drawing it", "cases in a bucket"), x_label="cases",
    ))
    out.append(plots.hbar_chart(
        "dtype-coverage", "dtype coverage", [(d, (d_drawn[d], d_found[d])) for d, _ in d_drawn.most_common()],
        series=("cases using it", "cases in a bucket"), x_label="cases",
    ))
    spans = stats.spans
    names = [n for n in TIMING_ORDER if n in spans] + sorted(n for n in spans if n not in TIMING_ORDER)
    out.append(plots.hbar_chart(
        "time-per-stage", f"where a case's time goes ({stats.cases} cases)", [(n, (spans[n],)) for n in names],
        series=("seconds, summed over cases",), x_label="seconds",
    ))
    return out


# ---- the page -----------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1280px;padding:0 16px;color:#222}
h1{margin:.6em 0 .2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0;font-size:13px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;word-break:break-all}
.chip{display:inline-block;border-radius:9px;padding:0 8px;margin-right:4px;color:#fff;font-size:12px;font-weight:600}
.chip.sev-bug{background:#c0392b}.chip.sev-suspect{background:#a85f00}.chip.sev-by-design{background:#2874a6}.chip.sev-noise{background:#6b7778}
section.root-cause.sev-bug{border-left:6px solid #c0392b;padding-left:10px}section.root-cause.sev-suspect{border-left:6px solid #a85f00;padding-left:10px}
article.card{border:1px solid #ccc;border-left:6px solid #999;border-radius:4px;padding:6px 12px;margin:12px 0;background:#fff}
article.card.sev-bug{border-left-color:#c0392b;background:#fff}article.card.sev-suspect{border-left-color:#d68910;background:#fff}
article.card.sev-by-design,article.card.sev-noise{background:#fff}
article.card h3{margin:.3em 0}.new{color:#c0392b;font-weight:700}.missing{color:#6e6e6e}
.plots{display:flex;flex-wrap:wrap;gap:8px}figure.plot-box{margin:0}
svg.plot{background:#fcfcfc;border:1px solid #eee}svg .plot-title{font-size:12px;font-weight:600}
svg .tick,svg .value,svg .legend{font-size:10px;fill:#333}svg .axis-label{font-size:11px;fill:#333}svg .no-data{font-size:12px;fill:#888}
pre.error-message{white-space:pre-wrap;background:#fbeeee;padding:6px;max-height:16em;overflow:auto}
tr.differs td{background:#fdf2e9}details{margin:1em 0}summary{cursor:pointer;font-weight:600;font-size:16px}
.code pre{background:#f8f8f8;padding:6px 8px;overflow:auto}
section.root-cause{border-top:1px solid #eee;margin:14px 0 22px}section.root-cause>h3{margin:.5em 0 .2em}
.plots-hint{color:#555;font-size:12.5px}details.more summary,details.rc-others summary{font-size:13px}
"""


def render_html(data: ReportData, html_path: Path, *, plots: str = "bug") -> str:
    """The whole page as text (see the module docstring for what it holds and guarantees).
    `plots`: "bug" inlines plots only in bug root causes' cards (the nightly page); "all" in
    every card (a page of one bucket, `divfuzz report --bucket N`)."""
    return "".join(iter_html(data, html_path, plots=plots))


def iter_html(data: ReportData, html_path: Path, *, plots: str = "bug"):
    """`render_html`'s page, piece by piece (a section, a root cause), for `write_html` to stream."""
    if plots not in ("bug", "all"):
        raise ValueError(f"plots must be 'bug' or 'all' but got plots={plots!r}")
    cases_of: dict[int, list[dict]] = defaultdict(list)
    for c in data.cases:
        if c["bucket_id"] is not None:
            cases_of[c["bucket_id"]].append(c)
    store_dir = str(Path(data.store_path).parent)

    def section(sev: str) -> Section:
        return data.sections.get(sev) or Section(sev, 0, 0, 0, shown=[], folds=[])

    def blocks(part: Section):
        shown = part.shown[:MAX_ROOT_CAUSES_PER_SECTION]
        for rc in shown:
            yield _root_cause(rc, cases_of, html_path, data, plots=plots == "all" or rc.severity == "bug")
        if part.root_causes > len(shown):
            yield (f'<p class="left-out">and {part.root_causes - len(shown):,} more {escaped(part.severity)} root causes '
                   f"({part.buckets - sum(rc.bucket_count for rc in shown):,} buckets) not shown on this page: "
                   f"<code>divfuzz report --out {escaped(store_dir)} --min-severity {escaped(part.severity)}</code> lists "
                   f"every one, <code>divfuzz report --out {escaped(store_dir)} --bucket N --html FILE</code> draws one</p>")

    def counted(part: Section) -> str:
        return (f"{part.root_causes} root cause{'s' if part.root_causes != 1 else ''}, {part.buckets} buckets, "
                f"{part.cases:,} cases")

    yield page_head(f"divfuzz report: {data.store_path}", style=_CSS + _pygments()[1].get_style_defs(".code"))
    yield _header(data)
    for sev in ("bug", "suspect"):
        part = section(sev)
        yield f'<section class="severity" id="sev-{sev}"><h2>{sev}: {counted(part)}</h2>'
        yield from blocks(part) if part.root_causes else (f"<p>no {sev} buckets</p>",)
        yield "</section>"
    eager = section(EAGER_WORSE)
    if eager.root_causes:
        yield (f'<section class="severity" id="sev-{EAGER_WORSE}"><h2>eager-worse: findings about eager, not the compiler: '
               f"{counted(eager)}</h2><p>eager is grossly further from fp64 than compiled here; never counted with the "
               "compiler's findings above.</p>")
        yield from blocks(eager)
        yield "</section>"
    for sev in ("by-design", "noise"):
        part = section(sev)
        folds = part.folds
        table = "" if not folds else (
            '<table class="fold"><thead><tr><th>culprit</th><th>root causes</th><th>buckets</th><th>cases</th><th>bucket ids</th>'
            "</tr></thead><tbody>"
            + "".join(
                f"<tr><td>{escaped(culprit)}</td><td>{n_rc}</td><td>{n}</td><td>{cases}</td><td>"
                + ", ".join(f'<a href="#bucket-{i}">{i}</a>' for i in ids[:MAX_FOLD_IDS])
                + (f" and {n - MAX_FOLD_IDS:,} more" if n > MAX_FOLD_IDS else "") + "</td></tr>"
                for _, culprit, n_rc, n, cases, ids in folds
            )
            + "</tbody></table>"
        )
        yield f'<details class="severity" id="sev-{sev}"><summary>{sev}: {counted(part)}, {len(folds)} culprits</summary>{table}'
        yield from blocks(part)
        yield "</details>"
    rest = [sev for sev in data.sections if sev not in ("bug", "suspect", "by-design", "noise", EAGER_WORSE)]
    if rest:  # a severity this divfuzz does not know (a newer store): shown, never dropped
        yield '<section class="severity" id="sev-other"><h2>other severities</h2>'
        for sev in sorted(rest, key=lambda s: (severity_rank(s), s)):
            yield from blocks(data.sections[sev])
        yield "</section>"
    campaign = "".join(f'<figure class="plot-box">{svg}</figure>' for svg in _campaign_plots(data))
    yield f'<section class="campaign" id="campaign"><h2>campaign</h2><div class="plots">{campaign}</div></section>'
    yield (f'<footer><p>written {escaped(_when(time.time()))} by divfuzz from the stored verdicts; '
           "buckets whose minimized pattern and culprit agree are one root cause; only bug root causes carry inline "
           "plots (each other card names the command that draws its own). "
           "Per-element error plots show each verdict's sample of differing elements (the largest excesses of compiled "
           f"over eager, then an even stride; at most {ELEMENT_POINTS_MAX} per bucket and dtype, errors under "
           f"{ELEMENT_ERROR_FLOOR:g} ULP drawn at it), over at most {PLOT_CASES_PER_ROOT_CAUSE} cases of a root cause. "
           f"A section shows at most {MAX_ROOT_CAUSES_PER_SECTION} root causes, each with at most {MAX_OTHER_CARDS} "
           "other cards: the rest are counted.</p></footer>")
    yield PAGE_FOOT


# No network: a page that tries to load anything (an injected tag included) is refused by the browser.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def page_head(title: str, *, style: str = _CSS) -> str:
    """A page's start, up to its body: no script, the CSP, inline style only. `title` is plain text (escaped here)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        f"<title>{escaped(title)}</title><style>{style}</style></head><body>"
    )


PAGE_FOOT = "</body></html>\n"


def page_shell(title: str, body: str, *, style: str = _CSS) -> str:
    """A whole page around `body` (already escaped HTML): no script, the CSP, inline style only.
    `title` is plain text (escaped here)."""
    return page_head(title, style=style) + body + PAGE_FOOT


def write_html(data: ReportData, html_path: Path, *, plots: str = "bug") -> Path:
    """Write the page whole, piece by piece (`iter_html`): to a temporary file beside it, renamed into place."""
    return write_page(iter_html(data, html_path, plots=plots), html_path)


def write_page(text, html_path: Path) -> Path:
    """Write a page (its text, or its pieces) whole: to a temporary file beside it, renamed into place."""
    html_path = Path(html_path)
    # a temporary file of its own (mkstemp: made new, never through a link planted under a guessable name)
    fd, name = tempfile.mkstemp(prefix=f".{html_path.name}.tmp-", dir=html_path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for piece in ([text] if isinstance(text, str) else text):
                f.write(piece)
        os.chmod(tmp, 0o644)
        os.replace(tmp, html_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return html_path
