"""`divfuzz report --html`: one self-contained page, `bug` first, a card per bucket, plots from the
stored verdicts, every stored text escaped; and (marked `browser`) the page of a real campaign
opened in headless Chromium: no console error, no network request, every card and plot drawn.

The fast tests build real stores through the `Store` API (no compile); the browser test runs a
real 6-case CPU campaign with a planted backend, so that buckets exist.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from divfuzz.fuzzer.store import STORE_NAME, Store
from divfuzz.fuzzer.cli.main import main
from divfuzz.oracles.severity_policy import bucket_severity, key_severity
from divfuzz.records.buckets import BucketKey, CulpritKey
from divfuzz.records.errors import OutputError
from divfuzz.records.outcomes import Status
from divfuzz.records.verdict import FloatComparison, IntComparison, OutputVerdict, Verdict
from divfuzz.reports.html import collect, render_html
from tests.seed_specs import layer_norm_linear

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = '<script>alert("x")</script>'
HOSTILE_IMG = "<img src=x onerror=alert(1)>"


def _float_verdict(*, max_ulp=3, rmse=(1e-3, 4e-3)) -> dict:
    f = FloatComparison(
        dtype="bfloat16", numel=4096, n_diff=9, max_ulp=max_ulp,
        ulp_histogram=(("1", 5), ("2", 3), ("3-4", 1), ("5-16", 0)), nan_inf_mismatch=0, triage="compiled-worse",
        n_worse=9, n_closer=0, rmse_eager=rmse[0], rmse_compiled=rmse[1], max_abs_diff=0.02,
        error_sample=((0.25, 3.0), (0.5, 1.5), (0.125, 0.5), (0.375, 0.25)),
    )
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v2", float_cmp=f),), timings=(("compile", 0.8), ("eager", 0.1))).to_dict()


def _int_verdict() -> dict:
    i = IntComparison(dtype="uint8", numel=512, flips=4, max_step=1, boundary_flips=3, gross_flips=1, unknown_flips=0,
                      min_boundary_ulps=0.5, fp64_known=True, compiled_correct=3, eager_correct=1)
    return Verdict(Status.DIVERGED, outputs=(OutputVerdict("v4", int_cmp=i),)).to_dict()


def _error_verdict() -> dict:
    return Verdict(Status.COMPILE_ERROR, error_type="BackendCompilerFailed(RuntimeError)",
                   error_message=f"lowering failed: </pre>{HOSTILE}").to_dict()


def _reason(key: BucketKey, detail: str = "") -> dict:
    sev = key_severity(key).value
    return {"severity": sev, "rule": key.rule, "output": "v2", "detail": detail or f"planted {sev} reason"}


def build_store(out_dir: Path) -> dict[str, int]:
    """A store with one bucket per severity (float bug, integer suspect, by-design, float noise),
    a compiler error (a bug) and one bucket whose every stored text is hostile; returns bucket ids by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    store = Store(out_dir / STORE_NAME)
    run, _ = store.start_run(seed=7, device="cpu", config={"backend": "inductor", "inductor": {}}, options={"max_cases": 6},
                             versions={"torch": "2.13.0+cpu", "triton": None, "cuda": None, "cpu_capability": "AVX512"})
    spec = layer_norm_linear(rows=4, dim=8)
    layer_norm = BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("layer_norm", "linear"), rule="float-gross-worse",
                           culprit=CulpritKey("aot_eager_decomp_partition", "decomposition", "aten.native_layer_norm"))
    plan = [
        ("bug", layer_norm, _float_verdict(), "bug"),
        ("bug2", layer_norm, _float_verdict(max_ulp=7, rmse=(2e-3, 9e-3)), "bug"),
        ("suspect", BucketKey("int-boundary", "uint8", "cpu", ops=("log2", "ceil", "clamp", "cast"), rule="int-boundary",
                              culprit=CulpritKey("inductor")), _int_verdict(), "suspect"),
        ("by-design", BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("linear", "sigmoid"), rule="many-ulps",
                                culprit=CulpritKey("inductor", switch="emulate_precision_casts")), _float_verdict(), "by-design"),
        ("noise", BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("gelu",), rule="few-ulps", culprit=CulpritKey("inductor")),
         _float_verdict(max_ulp=1), "noise"),
        ("error", BucketKey("compile-error", "-", "cpu", detail="BackendCompilerFailed(RuntimeError)",
                            site=f"torch/_inductor/lowering.py:N in {HOSTILE}", rule="compile-error"), _error_verdict(), "bug"),
        ("hostile", BucketKey("bf16-ulp", "bfloat16", "cpu", ops=("relu",), rule="many-ulps", culprit=CulpritKey("inductor", HOSTILE)),
         _float_verdict(), "suspect"),
    ]
    ids: dict[str, int] = {}
    for idx, (name, key, verdict, sev) in enumerate(plan):
        assert key_severity(key).value == sev, name
        spec_json = spec.to_json(indent=None) if name != "hostile" else json.dumps(
            {"schema_version": 1, "inputs": [{"name": HOSTILE, "dtype": "bfloat16"}], "nodes": [{"op": HOSTILE, "dtype": HOSTILE}]})
        _, bucket_id, _ = store.add_case(
            run_id=run, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json=spec_json, device="cpu", config={"backend": "inductor"},
            verdict=verdict, score=1.0, wall_s=1.2, finding_kind=key.kind, key=key, triage="compiled-worse",
            judged=bucket_severity(key, _reason(key, f"why: {HOSTILE_IMG}" if name == "hostile" else "")),
        )
        ids[name] = bucket_id
    for idx in range(len(plan), len(plan) + 3):  # cases that matched: coverage counts them, no bucket
        store.add_case(run_id=run, slot=0, idx=idx, spec_digest=f"d{idx}", spec_json=spec.to_json(indent=None), device="cpu",
                       config={}, verdict=Verdict(Status.OK, timings=(("compile", 0.5),)).to_dict(), score=0.0, wall_s=0.7,
                       finding_kind=None, key=None)
    folder = out_dir / "buckets" / f"{ids['bug']:04d}-bf16-ulp-layer-norm"
    folder.mkdir(parents=True)
    (folder / "repro.py").write_text("print('repro')\n")
    (folder / "report.md").write_text("# report\n")
    store.set_bucket_folder(ids["bug"], str(folder))
    store.set_bucket_analysis(ids["bug"], minimized={"spec": spec.to_dict(), "ops_before": 6, "ops_after": 2}, culprit={
        "stage": "aot_eager_decomp_partition", "summary": "decomposition of aten.native_layer_norm",
        "ladder": [["aot_eager", "ok"], ["aot_eager_decomp_partition", "bf16-ulp"], ["inductor", "bf16-ulp"]],
        "probes": [["emulate_precision_casts=True", "still differs"]], "bisect": None,
    })
    hostile_folder = out_dir / "javascript:alert(1)"
    hostile_folder.mkdir()
    (hostile_folder / "repro.py").write_text("print('x')\n")
    store.set_bucket_folder(ids["hostile"], str(hostile_folder))
    store.set_bucket_analysis(ids["hostile"], minimized=None, culprit={"stage": "inductor", "summary": HOSTILE_IMG,
                                                                      "ladder": [[HOSTILE, "bf16-ulp"]]})
    store.finish_run(run)
    store.close()
    return ids


def _page(out_dir: Path, html_path: Path) -> str:
    store = Store(out_dir / STORE_NAME, create=False)
    try:
        return render_html(collect(store), html_path)
    finally:
        store.close()


def _card_of(page: str, bucket_id: int) -> str:
    start = page.index(f'data-bucket="{bucket_id}"')
    return page[start:page.index("</article>", start)]


def test_sections_lead_with_bug_and_every_bucket_has_a_card_only_bug_cards_with_plots(tmp_path):
    ids = build_store(tmp_path)
    page = _page(tmp_path, tmp_path / "report.html")
    order = [page.index(f'id="{s}"') for s in ("sev-bug", "sev-suspect", "sev-by-design", "sev-noise", "campaign")]
    assert order == sorted(order)
    assert len(re.findall(r'<article class="card', page)) == len(set(ids.values())) == 6  # bug and bug2 share a key
    assert re.search(r'<details class="severity" id="sev-by-design">.*?data-bucket="%d"' % ids["by-design"], page, re.S)
    assert re.search(r'<details class="severity" id="sev-noise">.*?data-bucket="%d"' % ids["noise"], page, re.S)
    # the float bug's plots: its ULP histogram is the stored bins summed over its two cases
    assert f'data-plot="ulp-histogram-{ids["bug"]}-bfloat16"' in page
    assert f'data-plot="error-scatter-{ids["bug"]}-bfloat16"' in page
    assert "<title>1: 10</title>" in page and "<title>2: 6</title>" in page
    # every other card is compact: no inline plot, and the command that draws its plots
    for name in ("suspect", "by-design", "noise", "hostile"):
        card = _card_of(page, ids[name])
        assert "<svg" not in card and "data-plot" not in card, name
        assert f"--bucket {ids[name]} --html bucket-{ids[name]}.html" in card, name
    assert f'data-plot="int-flips-{ids["suspect"]}-uint8"' not in page
    for name in ("throughput", "new-buckets", "op-coverage", "dtype-coverage", "time-per-stage"):
        assert f'data-plot="{name}"' in page
    assert "<title>layer_norm, cases drawing it: 9</title>" in page  # 7 findings' specs but the hostile one, + 3 ok
    # header: versions, capability, cases, severities; the card: culprit, ladder, minimized code
    assert "2.13.0+cpu" in page and "AVX512" in page and "10 cases" in page
    assert '<span class="chip sev-bug">2 bug</span>' in page  # bug and bug2 share a key: one bucket, 2 cases; and the error
    assert "first rung that differs: <b>aot_eager_decomp_partition</b>" in page
    assert "minimized spec (6 → 2 ops)" in page and 'class="code"' in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing to fetch: no external URL at all


def test_every_stored_text_is_escaped(tmp_path):
    build_store(tmp_path)
    page = _page(tmp_path, tmp_path / "report.html")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the key, the op name, the message
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # the culprit and the severity reason
    assert 'href="javascript:' not in page and 'href="javascript%3Aalert%281%29/repro.py"' in page  # a path, not a URL scheme


def test_links_are_relative_to_the_html_file(tmp_path):
    ids = build_store(tmp_path / "out")
    html_path = tmp_path / "site" / "nightly" / "report.html"
    html_path.parent.mkdir(parents=True)
    page = _page(tmp_path / "out", html_path)
    card = page[page.index(f'data-bucket="{ids["bug"]}"'):]
    hrefs = re.findall(r'href="([^"#]+)"', card)[:2]
    assert [Path(h).name for h in hrefs] == ["repro.py", "report.md"]
    for h in hrefs:
        assert not h.startswith("/")
        assert (html_path.parent / unquote(h)).resolve().is_file()


def test_cli_writes_the_page_and_a_bad_html_path_exits_2(tmp_path):
    ids = build_store(tmp_path)
    before = hashlib.sha256((tmp_path / STORE_NAME).read_bytes()).hexdigest()
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--html", str(tmp_path / "r.html")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert len(re.findall(r'<article class="card', (tmp_path / "r.html").read_text())) == len(set(ids.values()))
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--html", str(tmp_path / "afile" / "r.html")], catch_exceptions=False)
    assert r.exit_code == 2 and "--html" in r.stderr and "afile" in r.stderr
    r = CliRunner().invoke(main, ["report", "--out", str(tmp_path), "--run", "42", "--html", str(tmp_path / "x.html")], catch_exceptions=False)
    assert r.exit_code == 2 and "no run 42" in r.stderr and not (tmp_path / "x.html").exists()
    # judging and writing the page leave the store as it was (this store's buckets are all judged)
    assert hashlib.sha256((tmp_path / STORE_NAME).read_bytes()).hexdigest() == before


def test_fuzz_not_writing_report_html_is_divfuzz_s_own_error(tmp_path):
    from divfuzz.fuzzer.cli.fuzz_command import _write_report_html

    build_store(tmp_path)
    (tmp_path / "report.html").mkdir()  # a folder in the way: the rename fails
    with pytest.raises(OutputError, match="report.html: could not write the HTML report"):
        _write_report_html(tmp_path / STORE_NAME, tmp_path / "report.html")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.html.tmp")]  # no debris


# ---- the browser test ---------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
    NUL-separated JSON on fds 3 and 4), so the test needs no Python package beyond the stdlib."""

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--hide-scrollbars",
                "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", f"--user-data-dir={profile}", "about:blank"]

        def fds():  # in the child: the pipe ends onto fds 3 and 4 (via fds >= 10, so neither clobbers the other)
            import fcntl

            high_r, high_w = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(args, preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf, self._id, self.events = b"", 0, []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 120) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self._next(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)
        raise TimeoutError(method)

    def wait_event(self, name: str, timeout: float = 120, *, where=lambda m: True) -> dict:
        """The first event `name` (already received or still to come) for which `where` holds."""
        deadline = time.time() + timeout
        for m in self.events:
            if m.get("method") == name and where(m):
                return m
        while time.time() < deadline:
            m = self._next(deadline)
            self.events.append(m)
            if m.get("method") == name and where(m):
                return m
        raise TimeoutError(name)

    def _next(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.1, deadline - time.time()))
            if not ready:
                raise TimeoutError("no message from chromium")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def close(self) -> None:
        try:
            os.write(self._to_browser, json.dumps({"id": 0, "method": "Browser.close", "params": {}}).encode() + b"\0")
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)


def _png_ink(png: bytes) -> float:
    """The fraction of pixels in a PNG (8-bit RGB/RGBA, as Chromium writes) that are not near white."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    prev, ink, rows = bytearray(stride), 0, 0
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):  # undo the PNG filter of this row
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every fourth row is enough to tell a blank page
            rows += 1
            ink += sum(1 for x in range(0, stride, bpp) if min(line[x:x + 3]) < 200)
        prev = line
    return ink / (rows * width)


LOW_CONTRAST_JS = """
(() => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                                     .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const behind = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
                           if (c.length === 3 || c[3] > 0.5) return c.slice(0, 3); } return [255, 255, 255]; };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || !getComputedStyle(el).visibility.startsWith('visible')) continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const [a, b] = [lum(rgb(getComputedStyle(el).color).slice(0, 3)), lum(behind(el))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) bad.push(`${el.tagName.toLowerCase()}.${el.className}: ${el.textContent.trim().slice(0, 40)} (${ratio.toFixed(2)})`);
  }
  return bad;
})()
"""


def _open_and_check(browser: Chromium, html_path: Path, shot: Path) -> dict:
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        browser.send(f"{domain}.enable", session=session)
    browser.send("Emulation.setDeviceMetricsOverride", {"width": 1300, "height": 1800, "deviceScaleFactor": 1, "mobile": False}, session=session)
    browser.events.clear()
    url = html_path.resolve().as_uri()
    browser.send("Page.navigate", {"url": url}, session=session)
    browser.wait_event("Page.loadEventFired")

    def js(expr: str):
        return browser.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)["result"].get("value")

    js("document.querySelectorAll('details').forEach(d => d.open = true)")
    facts = {
        "cards": js("document.querySelectorAll('article.card').length"),
        "plots": js("document.querySelectorAll('svg.plot').length"),
        "drawn_plots": js("[...document.querySelectorAll('svg.plot')].filter(s => s.getBoundingClientRect().width > 100 && s.getBoundingClientRect().height > 50 && s.querySelectorAll('rect,circle,path,text').length > 2).length"),
        "scripts": js("document.scripts.length"),
    }
    # Text a reader cannot read (issue 35: the bug card was dark text on red): every element with
    # its own text, its colour against the first opaque background behind it (WCAG's contrast
    # ratio; 4.5 for body text). And every plot title inside its plot (an SVG text does not wrap).
    facts["low_contrast"] = js(LOW_CONTRAST_JS)
    facts["clipped_titles"] = js(
        "[...document.querySelectorAll('svg.plot')].flatMap(svg => [...svg.querySelectorAll('text.plot-title')]"
        ".filter(t => { const b = t.getBBox(); return b.x < 0 || b.x + b.width > svg.viewBox.baseVal.width; })"
        ".map(t => t.textContent))")
    png = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
    shot.write_bytes(png)
    facts["ink"] = _png_ink(png)
    # Late console messages: the page logs a marker last, and DevTools delivers a session's events
    # in order, so once the marker is in, every message logged before it is too.
    marker = f"divfuzz-flush-{time.monotonic_ns()}"
    js(f"console.debug({json.dumps(marker)})")
    browser.wait_event("Runtime.consoleAPICalled", 30,
                       where=lambda m: any(a.get("value") == marker for a in m["params"].get("args", [])))
    facts["requests"] = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    facts["errors"] = [
        e for e in browser.events
        if e.get("method") in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")
        or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    facts["url"] = url
    return facts


@pytest.mark.browser
def test_a_real_campaign_s_page_in_headless_chromium(tmp_path):
    binary = _chromium()
    if binary is None:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium)")
    out = tmp_path / "campaign"
    # `--ops linear`: every drawn graph has a bfloat16 output for ulp_bump to bump, with or without
    # autocast. Without it, a slot's first draw is Hypothesis's simplest graph (batch_norm_eval
    # under bf16 autocast, whose output stays float32), and with 4 inputs per compile a 2-slot run of
    # 6 cases compiles nothing else: 0 buckets. `--workers 2`: the same slots on any host.
    r = subprocess.run(
        [sys.executable, "-m", "divfuzz.fuzzer", "fuzz", "--device", "cpu", "--max-cases", "6", "--seed", "2", "--dtypes", "bfloat16",
         "--ops", "linear", "--workers", "2",
         "--backend", "divfuzz.fuzzer.engine.planted:ulp_bump", "--no-minimize", "--no-live", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    html_path = out / "report.html"  # written by `divfuzz fuzz` itself
    assert html_path.is_file(), r.stderr
    store = Store(out / STORE_NAME, create=False)
    n_buckets = len(store.buckets())
    store.close()
    assert n_buckets >= 1  # ulp_bump plants one bf16 ULP in every bf16 output
    hostile = tmp_path / "hostile"
    ids = build_store(hostile)
    hostile_html = hostile / "report.html"
    hostile_html.write_text(_page(hostile, hostile_html))
    browser = Chromium(binary, tmp_path / "profile")
    try:
        for page, expected_cards in ((html_path, n_buckets), (hostile_html, len(set(ids.values())))):
            source = page.read_text()
            facts = _open_and_check(browser, page, page.with_suffix(".png"))
            assert facts["errors"] == [], facts["errors"]
            assert facts["requests"] == [facts["url"]], facts["requests"]  # the page itself, nothing else
            assert facts["scripts"] == 0
            assert facts["cards"] == expected_cards
            assert facts["plots"] == source.count('<svg class="plot"') >= 5
            assert facts["drawn_plots"] == facts["plots"]
            assert facts["low_contrast"] == [], facts["low_contrast"]
            assert facts["clipped_titles"] == [], facts["clipped_titles"]
            assert facts["ink"] > 0.01, f"screenshot {page.with_suffix('.png')} looks blank ({facts['ink']:.4f} ink)"
        # `divfuzz diff --html` of the hostile store against the campaign's: the same shell, checked the same way
        from divfuzz.reports.diff import diff_html, diff_sides, side_from_store

        sides = []
        for folder in (hostile, out):
            s = Store(folder / STORE_NAME, create=False)
            sides.append(side_from_store(s, label=str(folder)))
            s.close()
        diffed = diff_sides(*sides)
        diff_page = tmp_path / "diff.html"
        diff_page.write_text(diff_html(diffed))
        facts = _open_and_check(browser, diff_page, diff_page.with_suffix(".png"))
        assert facts["errors"] == [] and facts["requests"] == [facts["url"]] and facts["scripts"] == 0, facts
        assert facts["ink"] > 0.01
        assert diff_page.read_text().count("<tr data-key=") == len(diffed.new_buckets) + len(diffed.gone) + len(diffed.changed) > 0
        # Long plot titles (the scatter's note on points it cannot draw, a long output name) stay
        # inside their plots: wrapped onto a second line, then cut, the whole title on hover.
        from divfuzz.reports import plots
        from divfuzz.reports.html import page_shell

        long_titles = page_shell("plots", "".join([
            plots.scatter("s1", "float16: element errors vs fp64, ULP (1024 shown)", [(0.0, 1.0), (2.0, 3.0), (float("nan"), 1.0)] * 9,
                          x_label="eager error (ULP)", y_label="compiled error (ULP)", diagonal=True),
            plots.bar_chart("b1", "grad:x0_with_a_long_input_name WWWWWWWWWWWWWWWWWWWWWWWWWWWW: compiled vs eager distance, ULP "
                            + "and more words " * 12, [("1", 3.0), ("2", 1.0)], x_label="ULP distance", y_label="elements"),
            plots.hbar_chart("h1", "where a case's time goes (12345 cases), over every stage of every worker of the campaign",
                             [("compile", (3.0,)), ("eager", (1.0,))], series=("seconds",), x_label="seconds"),
        ]))
        titles_page = tmp_path / "titles.html"
        titles_page.write_text(long_titles)
        facts = _open_and_check(browser, titles_page, titles_page.with_suffix(".png"))
        assert facts["errors"] == [] and facts["drawn_plots"] == facts["plots"] == 3, facts
        assert facts["clipped_titles"] == [], facts["clipped_titles"]
        # The checks can fail: a page with a script and a remote image is caught (the page's own
        # Content-Security-Policy refuses both, and says so on the console).
        planted = hostile.parent / "planted.html"
        planted.write_text(hostile_html.read_text().replace(
            "<body>", '<body><script>console.error("planted")</script><img src="http://127.0.0.1:9/x.png">', 1))
        facts = _open_and_check(browser, planted, planted.with_suffix(".png"))
        assert facts["errors"] and facts["scripts"] == 1 and "http://127.0.0.1:9/x.png" in facts["requests"]
    finally:
        browser.close()


def test_header_names_the_cpu_capability_and_the_gpu(tmp_path):
    """A campaign records `torch.backends.cpu.get_cpu_capability()`; the header shows it, and the
    GPU's name beside it when the run had one."""
    import torch

    from divfuzz.fuzzer.engine.environment import environment_versions

    assert environment_versions("cpu")["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    store = Store(tmp_path / STORE_NAME)
    store.start_run(seed=1, device="cuda", config={"backend": "inductor"}, options={},
                    versions={"torch": "2.13", "gpu": "NVIDIA H100 80GB HBM3", "cpu_capability": "AVX512"})
    store.start_run(seed=2, device="cpu", config={"backend": "inductor"}, options={}, versions={"torch": "2.13"})
    page = render_html(collect(store), tmp_path / "report.html")
    store.close()
    header = page[page.index("<header>"):page.index("</header>")]
    assert "NVIDIA H100 80GB HBM3; CPU capability AVX512" in header
    assert "CPU capability not recorded" in header  # the older run, without the field
