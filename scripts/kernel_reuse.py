"""How often a campaign's Triton kernels repeat, read from an Inductor cache folder.

    python scripts/kernel_reuse.py CACHE_DIR [CACHE_DIR ...]

Inductor writes each generated Triton kernel's source to `CACHE_DIR/<2 chars>/<hash>.py`, named
by the hash of its text, and Triton keeps one compiled entry per (kernel source, launch config)
under `CACHE_DIR/triton/`. With descriptive kernel names (Inductor's default,
`triton.unique_kernel_names`), the same computation in two graphs gets two names
(`triton_poi_fused_add_0`, `triton_poi_fused_add_mul_3`, ...) and so two files and two compiles.
This counts the kernel files, the distinct sources once each file's own kernel name is replaced
by one placeholder, and Triton's compiled entries: the second count is what the same kernels would
compile to under one name.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

KERNEL_DEF = re.compile(r"^def (\w+)\(", re.MULTILINE)


def kernel_sources(cache: Path) -> list[str]:
    """The Triton kernel sources Inductor wrote under `cache` (its output-code files excluded)."""
    out = []
    for path in cache.glob("*/*.py"):
        text = path.read_text(errors="replace")
        if "@triton.jit" not in text:
            continue
        out.append(text)
    return out


def normalized(text: str) -> str:
    """`text` with its kernel's own name replaced by one placeholder (the `def` and every mention)."""
    match = KERNEL_DEF.search(text)
    if match is None:
        return text
    return re.sub(rf"\b{re.escape(match.group(1))}\b", "KERNEL", text)


def main(argv: list[str]) -> None:
    for arg in argv:
        cache = Path(arg)
        sources = kernel_sources(cache)
        kinds = Counter(m.group(1).split("_")[1] if (m := KERNEL_DEF.search(t)) else "?" for t in sources)
        distinct = len({normalized(t) for t in sources})
        compiled = sum(1 for p in (cache / "triton").glob("*/*") if p.is_dir()) if (cache / "triton").is_dir() else 0
        print(f"{cache}: {len(sources)} kernel files ({', '.join(f'{k} {n}' for k, n in kinds.most_common())}); "
              f"{distinct} distinct once named alike ({len(sources) - distinct} repeats, "
              f"{(len(sources) - distinct) / max(1, len(sources)):.0%}); {compiled} Triton cache entries")


if __name__ == "__main__":
    main(sys.argv[1:])
