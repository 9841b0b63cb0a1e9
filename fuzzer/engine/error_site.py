"""Where in the compiler a failure was raised: a short, stable text naming the crash site.

A campaign draws many graphs that trip the same assertion in the compiler; each graph's op set
differs, so keyed by ops they open one bucket and one analysis each (measured on the H100, a
420 s campaign: seven raw keys for one Inductor mix-order-reduction assertion, 40% of the run's
analysis time). Keyed by the site they open one. This is the crash deduplication fuzzers use
(the innermost frame of the failing code plus its message), applied to the compiler under test.

`error_site(e)` reads the exception a compiler raised, in the process that caught it:
- the innermost exception: `inner_exception` (Dynamo's and Inductor's wrappers) and `__cause__`
  (`raise ... from`) are followed; an implicit `__context__` is not (a handler that raised a new
  error is the failure, not what it handled);
- its deepest frame in code that is not the Python standard library and not generated code
  (`<...>` names, Inductor's and Triton's cache folders): the compiler's own code, or the backend's;
- the text is "<Type> in <path>:<function>: <the frame's source line> | <message>", the path
  relative to its `sys.path` entry; the message is the chain's first "error:" line (what a C++
  compiler, ptxas or MLIR prints: a code generator's crash site is in the generated code, not in
  the driver that ran the compiler), else the innermost message's first line, with paths,
  addresses and numbers replaced, so that shapes, buffer names, sizes and cache folders do not split one site;
- an error raised in another process whose traceback came back as text (Inductor's compile
  subprocesses) is sited by that traceback's deepest frame and last line, not by the wrapper;
- generated kernel names and hash-like module names in a message are replaced too;
- None when there is no such frame (and never an exception): the key then keeps the graph's ops.
Invariant: the result contains no " @ " (a bucket signature's culprit separator) and is at most
`MAX_ERROR_SITE_CHARS` (divfuzz.records.verdict) long.
"""

from __future__ import annotations

import linecache
import os
import re
import site
import sys
import sysconfig
import traceback

from divfuzz.records.verdict import MAX_ERROR_SITE_CHARS

_MESSAGE_CHARS = 100
_LINE_CHARS = 90
_CHAIN_LIMIT = 16


def exception_chain(e: BaseException) -> list[BaseException]:
    """`e` and what its wrappers carry (`inner_exception`, then `__cause__`), outermost first."""
    chain = [e]
    for _ in range(_CHAIN_LIMIT):
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if not isinstance(inner, BaseException) or any(inner is c for c in chain):
            break
        chain.append(inner)
        e = inner
    return chain


_ERROR_LINE = re.compile(r"\berror\b\s*:", re.IGNORECASE)


_KERNEL_NAME = re.compile(r"\b(?:triton|cpp)_(?:poi|red|per|tem|spl|fused)\w*|\bkernel_cpp_\w+")
_HASH_LIKE = re.compile(r"\b(?=\w*\d)(?=\w*[A-Za-z])\w{16,}\b")


def _normalized_line(line: str) -> str:
    line = re.sub(r"(?<![\w/])(?:/[^\s'\":,;()\[\]/]+){2,}/?", "<path>", line)  # an absolute path: two or more parts
    line = re.sub(r"\b0x[0-9a-fA-F]+", "<addr>", line)
    line = _KERNEL_NAME.sub("<kernel>", line)  # generated kernel names carry the fused ops' names
    line = _HASH_LIKE.sub("<hash>", line)  # generated module names (Inductor's cache keys)
    line = re.sub(r"\d+", "N", line)
    return " ".join(line.split())[:_MESSAGE_CHARS]


def _lines(e: BaseException) -> list[str]:
    try:
        return [line for line in str(e).splitlines() if line.strip()]
    except Exception:  # a broken __str__ in the compiler's exception: no message
        return []


def normalized_message(chain: list[BaseException]) -> str:
    """The first "error:" line of the chain's messages (innermost first), else the innermost
    message's first non-empty line; paths, addresses and numbers replaced, whitespace collapsed."""
    error_line = next((line for e in reversed(chain) for line in _lines(e) if _ERROR_LINE.search(line)), None)
    if error_line is not None:
        return _normalized_line(error_line)
    first = _lines(chain[-1])[:1]
    return _normalized_line(first[0]) if first else ""


def _folders(paths) -> tuple[str, ...]:
    return tuple(os.path.realpath(p) + os.sep for p in paths if p)


def _generated(real: str) -> bool:
    """Whether a file is code a compiler generated: under Inductor's or Triton's cache folder (the
    ones set in the environment, `~/.triton`, or any `torchinductor_<user>` folder)."""
    caches = [os.environ.get(n, "") for n in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")] + [os.path.expanduser("~/.triton")]
    return real.startswith(_folders(caches)) or any(part.startswith("torchinductor_") for part in real.split(os.sep))


def _is_site_code(filename: str) -> bool:
    """Whether a frame's file may be a crash site: an installed package's (a virtualenv's
    site-packages sits inside its stdlib folder, and may sit in a temporary folder), else
    neither generated code nor the standard library. A checkout in a temporary folder counts."""
    if filename.startswith("<") or not os.path.isabs(filename):
        return False
    real = os.path.realpath(filename)
    paths = sysconfig.get_paths()
    packages = [paths.get("purelib", ""), paths.get("platlib", ""), *site.getsitepackages(), site.getusersitepackages()]
    if real.startswith(_folders(packages)):
        return True
    if _generated(real):
        return False
    return not real.startswith(_folders([paths.get("stdlib", ""), paths.get("platstdlib", "")]))


def _shown_path(filename: str) -> str:
    """The file relative to the longest `sys.path` entry holding it (`torch/_inductor/scheduler.py`), else its name."""
    real = os.path.realpath(filename)
    best = ""
    for entry in sys.path:
        root = os.path.realpath(entry or os.getcwd()) + os.sep
        if real.startswith(root) and len(root) > len(best):
            best = root
    return real[len(best):] if best else os.path.basename(real)


def site_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of `e`'s traceback in neither the standard library nor generated code,
    with its function's qualified name where Python has it (3.11+)."""
    found = None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        filename = frame.f_code.co_filename
        if not _is_site_code(filename):
            continue
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        found = traceback.FrameSummary(filename, lineno, name, lookup_line=False)
    return found


_REMOTE_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n(?:[ \t]+([^\n]*)\n)?')
_TRACEBACK_HEAD = "Traceback (most recent call last):"


def _remote_site(chain: list[BaseException]) -> str | None:
    """The site of an error raised in another process whose traceback came back as text (Inductor's
    compile subprocesses: `SubprocException`; anything that embeds a traceback): its deepest site
    frame and its last line ("Type: message"). None where no message holds one."""
    for e in reversed(chain):
        text = "\n".join(_lines(e))
        if _TRACEBACK_HEAD not in text:
            continue
        tail = text[text.rindex(_TRACEBACK_HEAD):]
        frames = [m for m in _REMOTE_FRAME.finditer(tail + "\n") if _is_site_code(m.group(1))]
        last = [line for line in tail.splitlines() if line.strip() and not line.startswith((" ", "\t"))][-1:]
        if not frames or not last or last[0].startswith(_TRACEBACK_HEAD):
            continue
        path, _, function, code = frames[-1].groups()
        kind, _, message = last[0].partition(": ")
        text = f"{kind.strip()[:80]} in {_shown_path(path)}:{function.strip()}"
        if code and code.strip():
            text += f": {' '.join(code.split())[:_LINE_CHARS]}"
        return text + (f" | {_normalized_line(message)}" if message.strip() else "")
    return None


def error_site(e: BaseException) -> str | None:
    """The crash site of a compiler failure (see the module docstring), or None. Never raises: it
    runs in the worker's handler of the compiler's error, where an exception would be divfuzz's."""
    try:
        return _site_text(e)
    except Exception:  # a site is a grouping aid: without one the key keeps the graph's ops
        return None


def _site_text(e: BaseException) -> str | None:
    chain = exception_chain(e)
    text = _remote_site(chain)
    if text is None:
        # The innermost exception with a site frame (one re-raised from text has none of its own).
        inner, frame = next(((x, f) for x in reversed(chain) if (f := site_frame(x)) is not None), (chain[-1], None))
        if frame is None:
            return None
        line = " ".join(linecache.getline(frame.filename, frame.lineno).split())[:_LINE_CHARS]
        text = f"{type(inner).__name__} in {_shown_path(frame.filename)}:{frame.name}"
        if line:
            text += f": {line}"
        message = normalized_message(chain)
        if message:
            text += f" | {message}"
    return text.replace(" @ ", " at ")[:MAX_ERROR_SITE_CHARS]
