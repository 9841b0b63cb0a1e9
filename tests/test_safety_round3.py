"""The attacks of issue 40 ("safe and loud, third round") that are cheap to hold in the default
tier; each names the rule it holds. The expensive ones (real campaigns killed at each phase, the
hostile compile cache) live in `test_kill_phases.py` and `test_compile_cache.py`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS_SPEC = sorted((ROOT / "corpus" / "specs").glob("*.json"))[0]


# ---- 3: two slots never abort a campaign -----------------------------------------------------

PARSES_WHILE_WRITING = """
import sys, threading
from pathlib import Path
import divfuzz.reports.files  # what a campaign imports before its first thread starts
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

