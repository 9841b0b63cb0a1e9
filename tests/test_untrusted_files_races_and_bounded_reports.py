"""The attacks of issue 40 ("safe and loud, third round") that are cheap to hold in the default
tier; each names the rule it holds. The expensive ones (real campaigns killed at each phase, the
hostile compile cache) live in `test_kill_phases.py` and `test_compile_cache.py`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS_SPEC = sorted((ROOT / "corpus" / "specs").glob("*.json"))[0]


# ---- 3: two slots never abort a campaign -----------------------------------------------------

PARSES_WHILE_WRITING = """
import sys, threading
from pathlib import Path
import divfuzz.reports.bucket_folder  # what a campaign imports before its first thread starts
from divfuzz.generators.spec import GraphSpec
from divfuzz.records.config import CompileConfig
from divfuzz.reports.repro import render_repro
from divfuzz.reports.perf_repro import render_perf_repro

spec = GraphSpec.from_json(Path(sys.argv[1]).read_text())
parses = []
sys.addaudithook(lambda event, args: parses.append(args[1]) if event == "compile" else None)
def write():
    for _ in range(3):
        render_repro(spec, device="cpu", config=CompileConfig(), title="t")
        render_perf_repro(spec, device="cpu", config=CompileConfig(), title="t", margin=0.1)
threads = [threading.Thread(target=write) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print("parses:", parses)
"""


def test_writing_repros_from_threads_parses_no_python():
    """CPython 3.11's AST constructor is not thread-safe ("SystemError: AST constructor recursion
    depth mismatch" aborted 2 of 3 two-slot campaigns): the texts a script carries are parsed once,
    at import, and writing a repro or a perf repro from two threads parses nothing (audited:
    `ast.parse` and `compile` raise the "compile" audit event)."""
    out = subprocess.run([sys.executable, "-c", PARSES_WHILE_WRITING, str(CORPUS_SPEC)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "parses: []", out.stdout


def _slot_draws(opts, slot: int, n: int) -> list[str]:
    from divfuzz.fuzzer.campaign.loop import slot_engines

    got: list[str] = []

    class Enough(Exception):
        pass

    def body(spec):
        got.append(spec.digest())
        if len(got) >= n:
            raise Enough

    for engine in slot_engines(opts.strategy(slot), opts.seed, slot, body):
        try:
            engine()
        except Enough:
            return got
    return got


def test_each_slot_draws_its_own_specs_as_a_pure_function_of_seed_and_slot():
    """Hypothesis starts every engine at its simplest example and then zero-extends short random
    prefixes, so two slots drew the same first 4-8 specs (duplicated work on every multi-slot
    campaign). Each slot starts its ops at its own place: no spec is shared by two slots' first
    draws, a slot's draws are the same every time, and slot 0 of seed 0 draws what it always drew
    (another seed's first draws are its own since issue 56: `test_seed_enters_every_slots_first_draws`)."""
    from divfuzz.fuzzer.campaign.loop import CampaignOptions

    opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=30, seed=5, max_ops=4)
    draws = {slot: _slot_draws(opts, slot, 12) for slot in range(3)}
    for a in range(3):
        for b in range(a + 1, 3):
            assert not set(draws[a]) & set(draws[b]), (a, b)
    assert _slot_draws(opts, 1, 12) == draws[1]
    from divfuzz.generators.strategies import graph_specs

    class Unrotated(CampaignOptions):
        def strategy(self, slot: int = 0):
            return graph_specs(max_ops=self.max_ops, ops=self.ops, guard_casts=True)

    seed_0 = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=30, seed=0, max_ops=4)
    assert _slot_draws(Unrotated(**seed_0.__dict__), 0, 12) == _slot_draws(seed_0, 0, 12)


def test_seed_enters_every_slots_first_draws():
    """Issue 56: the first 2 specs per slot were the same for seeds 1, 2, 7, 11 and 12345 (Hypothesis
    starts at its simplest example whatever its seed), so shards run with different --seed values
    repeated cases. 20 two-slot campaigns, each its own seed: no first spec is shared."""
    from divfuzz.fuzzer.campaign.loop import CampaignOptions, slots_first_specs

    firsts = {}
    for seed in (1, 2, 7, 11, 12345, *range(20, 35)):
        opts = CampaignOptions(device="cpu", out_dir=Path("unused"), max_cases=10, seed=seed, workers=2)
        firsts[seed] = [s.digest() for row in slots_first_specs(opts.strategy, seed, 2, 2) for s in row]
    every = [d for digests in firsts.values() for d in digests]
    assert len(firsts) == 20 and len(every) == 80 and len(set(every)) == 80


# ---- 5: a cap on a spec's size in ops --------------------------------------------------------

def _chained_tanh(n: int) -> dict:
    return {"schema_version": 1,
            "inputs": [{"name": "x", "shape": [4, 4], "dtype": "float32", "requires_grad": False, "init": "data"}],
            "nodes": [{"name": f"v{i}", "op": "tanh", "inputs": [f"v{i - 1}" if i > 1 else "x"], "params": {},
                       "dtype": "float32", "shape": [4, 4]} for i in range(1, n + 1)],
            "outputs": [f"v{n}"], "recipe": {"kind": "normal", "seed": 0}, "autocast": None, "backward": False}


def _invoke(*args):
    from click.testing import CliRunner

    from divfuzz.fuzzer.cli.main import main

    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def test_an_oversized_spec_is_refused_by_replay_corpus_add_and_minimize_pending_never_filed_as_a_hang(tmp_path):
    """3,000 chained tanh on a 4x4 input: `replay` filed it as "finding: hang, severity: bug",
    `corpus add` took it (every later gate spent its timeout on it), `minimize --pending` ran it."""
    import json

    from divfuzz.fuzzer.campaign.bucket_folders import Filing
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.generators.validate import MAX_DEPTH, MAX_NODES
    from divfuzz.records.buckets import BucketKey

    spec = tmp_path / "tanh3000.json"
    spec.write_text(json.dumps(_chained_tanh(3000)))
    code, text = _invoke("replay", spec, "--device", "cpu")
    assert code == 2 and f"{spec}: field 'nodes' holds 3000 nodes, over the cap of {MAX_NODES}" in text, text
    assert "hang" not in text
    corpus = tmp_path / "corpus"
    code, text = _invoke("corpus", "add", spec, "--corpus", corpus)
    assert code == 2 and str(spec) in text and "field 'nodes'" in text, text
    assert not corpus.exists() or not any(corpus.rglob("*.json"))
    deep = tmp_path / "deep.json"  # under the node cap, over the depth cap
    deep.write_text(json.dumps(_chained_tanh(MAX_DEPTH + 1)))
    code, text = _invoke("replay", deep, "--device", "cpu")
    assert code == 2 and f"chain of {MAX_DEPTH + 1} nodes, deeper than the cap of {MAX_DEPTH}" in text, text

    campaign = tmp_path / "campaign"
    campaign.mkdir()
    store = Store(campaign / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={}, versions={})
        row = dict(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json=spec.read_text(), device="cpu",
                   config={"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}},
                   verdict={"status": "hang"}, score=1.0, wall_s=300.0, finding_kind="hang")
        Filing(store, campaign, timeout_s=None).store_case(
            row, key=None, raw_key=BucketKey("hang", "-", "cpu", ("tanh",), detail="Timeout", rule="hang"), triage="",
            severity=None, for_analysis=True)
        store.finish_run(run_id)
    finally:
        store.close()
    before = (campaign / STORE_NAME).read_bytes()
    code, text = _invoke("minimize", "--pending", "--out", campaign, "--device", "cpu")
    assert code == 2 and "case 1" in text and str(campaign) in text and "field 'nodes'" in text, text
    assert (campaign / STORE_NAME).read_bytes() == before


# ---- 6: messages name the file, the case and the field ---------------------------------------

def _store_with_pending(folder: Path, config: dict) -> None:
    import json

    from divfuzz.fuzzer.campaign.bucket_folders import Filing
    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.records.buckets import BucketKey
    from test_spec_safety import base

    folder.mkdir()
    store = Store(folder / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config=config, options={}, versions={})
        row = dict(run_id=run_id, slot=0, idx=0, spec_digest="d", spec_json=json.dumps(base()), device="cpu",
                   config=config, verdict={"status": "diverged"}, score=1.0, wall_s=0.1, finding_kind="fp32-ulp")
        Filing(store, folder, timeout_s=None).store_case(
            row, key=None, raw_key=BucketKey("fp32-ulp", "float32", "cpu", ("gelu",), rule="many-ulps"), triage="",
            severity=None, for_analysis=True)
        store.finish_run(run_id)
    finally:
        store.close()


def test_a_stored_mode_with_injected_text_is_refused_naming_the_store_and_the_case(tmp_path):
    from divfuzz.fuzzer.store import STORE_NAME

    _store_with_pending(tmp_path / "c", {"backend": "inductor", "dynamic": False, "mode": "x'; import os", "inductor": {}})
    before = (tmp_path / "c" / STORE_NAME).read_bytes()
    code, text = _invoke("minimize", "--pending", "--out", tmp_path / "c", "--device", "cpu")
    assert code == 2, text
    assert f"the stored config of case 1 in {tmp_path / 'c' / STORE_NAME}: mode:" in text, text
    assert (tmp_path / "c" / STORE_NAME).read_bytes() == before


def test_a_timings_file_nested_200000_deep_is_refused_by_name_not_an_internal_error(tmp_path):
    _store_with_pending(tmp_path / "c", {"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}})
    timings = tmp_path / "c" / "divfuzz-run1-timings.json"
    timings.write_text('{"a":' * 200_000 + "1" + "}" * 200_000)
    code, text = _invoke("bench", "--breakdown", tmp_path / "c")
    assert code == 2 and "internal error" not in text and "RecursionError" not in text, text
    assert f"{timings}: not a divfuzz timings file (its JSON is nested deeper than Python reads)" in text, text


# ---- 7: nothing from a file drives the terminal ----------------------------------------------

HOSTILE_TEXT = "bug\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1m\u202egnp.exe"


def test_keys_of_a_timings_file_reach_the_terminal_escaped(tmp_path):
    """`bench --breakdown` printed a timings file's keys raw: they set the window title, cleared
    the screen and recoloured. Every string the CLI's consoles print is terminal-safe."""
    import json

    _store_with_pending(tmp_path / "c", {"backend": "inductor", "dynamic": False, "mode": None, "inductor": {}})
    (tmp_path / "c" / "divfuzz-run1-timings.json").write_text(json.dumps({"pending_by_severity": {HOSTILE_TEXT: 1}}))
    ran = subprocess.run([sys.executable, "-m", "divfuzz.fuzzer", "bench", "--breakdown", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=300)
    shown = ran.stdout + ran.stderr
    assert ran.returncode == 0, shown
    assert "bug\\x1b]0;pwned" in shown and "\\x9b1m" in shown and "\\u202egnp" in shown, shown
    assert not any(c in shown for c in "\x1b\x07\x9b\u202e"), repr(shown)


def test_terminal_safe_escapes_every_control_and_bidi_character_and_keeps_the_rest():
    from divfuzz.reports.terminal import terminal_safe

    assert terminal_safe("plain text, tabs\tand\nnewlines; é, ü, 漢字, ✓") == "plain text, tabs\tand\nnewlines; é, ü, 漢字, ✓"
    unsafe = [chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]] + ["\u202e", "\u2066", "\u200f", "\ufeff"]
    for c in unsafe:
        shown = terminal_safe(f"a{c}b")
        assert c not in shown and shown.startswith("a\\") and shown.endswith("b"), repr(shown)


# ---- 8: a large store's report is bounded ------------------------------------------------------

def _big_verdict() -> dict:
    from divfuzz.records.outcomes import Status
    from divfuzz.records.verdict import FloatComparison, OutputVerdict, Verdict

    f = FloatComparison(dtype="bfloat16", numel=4096, n_diff=9, max_ulp=3, ulp_histogram=(("1", 5), ("2", 4)),
                        nan_inf_mismatch=0, triage="compiled-worse", n_worse=9, n_closer=0, rmse_eager=1e-3,
                        rmse_compiled=4e-3, max_abs_diff=0.02, error_sample=tuple((0.25 + i, 3.0 + i) for i in range(64)))
    outputs = tuple(OutputVerdict(f"v{i}", float_cmp=f) for i in range(8))
    return Verdict(Status.DIVERGED, outputs=outputs, timings=(("compile", 0.8), ("eager", 0.1))).to_dict()


def _report_store(folder: Path, *, buckets: int, cases: int) -> None:
    import json

    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.oracles.severity_policy import bucket_severity
    from divfuzz.records.buckets import BucketKey
    from test_spec_safety import base

    folder.mkdir()
    verdict, spec = _big_verdict(), json.dumps(base())
    store = Store(folder / STORE_NAME)
    try:
        run_id, _ = store.start_run(seed=0, device="cpu", config={}, options={"workers": 1}, versions={"torch": "x"})
        with store.transaction():
            for i in range(cases):
                b = i % buckets
                store.add_case(run_id=run_id, slot=0, idx=i, spec_digest=f"d{i}", spec_json=spec, device="cpu", config={},
                               verdict=verdict, score=1.0, wall_s=1.0, finding_kind="fp32-ulp",
                               key=BucketKey("fp32-ulp", "bfloat16", "cpu", (f"op{b}\x00\x1b]0;t\x07",),
                                             rule=("float-gross-worse", "few-ulps")[b % 2]),
                               triage="compiled-worse", judged=bucket_severity(BucketKey("fp32-ulp", "bfloat16", "cpu", (f"op{b}\x00\x1b]0;t\x07",),
                                             rule=("float-gross-worse", "few-ulps")[b % 2]), {"severity": ("bug", "noise")[b % 2],
                                                                  "rule": ("float-gross-worse", "few-ulps")[b % 2],
                                                                  "output": "v0", "detail": "d"}))
        store.finish_run(run_id)
    finally:
        store.close()


def _report_peak(folder: Path, page: Path) -> int:
    """Peak Python memory (tracemalloc) of reading the store and writing its page."""
    import tracemalloc

    from divfuzz.fuzzer.store import STORE_NAME, Store
    from divfuzz.reports.html import collect, write_html

    store = Store(folder / STORE_NAME, create=False)
    try:
        tracemalloc.start()
        write_html(collect(store), page)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        store.close()
    return peak


@pytest.mark.slow
def test_a_reports_memory_grows_with_what_it_shows_not_with_the_cases(tmp_path):
    """`report --html` on a store of 100,001 buckets and 100,012 cases took 7.2 GB: every case's
    verdict was held. The cases stream by, a page of them in memory at a time."""
    # Past what a page shows (64 cases plotted per root cause) and past one page of the store's
    # reads (`_CASE_PAGE` cases), three times the cases, each verdict ~25 KB of JSON: the same
    # peak. Before, every case's verdict was held: about 60 MB more here. (With fewer cases than a
    # read page, the smaller store's page is smaller, and the peaks differ by that alone.) The
    # first report in a process also pays one-time allocations (imports, caches): it is not measured.
    from divfuzz.fuzzer.store.store import _CASE_PAGE

    _report_store(tmp_path / "few", buckets=4, cases=_CASE_PAGE + 100)
    _report_store(tmp_path / "many", buckets=4, cases=3 * (_CASE_PAGE + 100))
    _report_peak(tmp_path / "few", tmp_path / "warm.html")
    few, many = _report_peak(tmp_path / "few", tmp_path / "few.html"), _report_peak(tmp_path / "many", tmp_path / "many.html")
    assert many < few + 2 * 2**20, (few, many)


def test_a_reports_page_is_bounded_counts_what_it_leaves_out_and_has_no_raw_control_bytes(tmp_path):
    """The 100,001-bucket page was 394 MB with raw NUL bytes: a section shows a bounded number of
    root causes and counts the rest with the command that lists them; stored text is escaped."""
    from divfuzz.reports.html import MAX_ROOT_CAUSES_PER_SECTION

    wide = tmp_path / "wide"
    _report_store(wide, buckets=2 * MAX_ROOT_CAUSES_PER_SECTION + 20, cases=2 * MAX_ROOT_CAUSES_PER_SECTION + 20)
    _report_peak(wide, tmp_path / "wide.html")
    page = (tmp_path / "wide.html").read_bytes()
    assert not any(b in page for b in (b"\x00", b"\x1b", b"\x07")), "raw control bytes in the page"
    assert b"op0\\x00\\x1b]0;t\\x07" in page
    text = page.decode()
    assert text.count('<section class="root-cause sev-bug"') == MAX_ROOT_CAUSES_PER_SECTION
    assert "and 10 more bug root causes (10 buckets) not shown on this page" in text
    assert "--min-severity bug</code> lists every one" in text
