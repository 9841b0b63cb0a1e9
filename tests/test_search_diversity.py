"""The campaign's Hypothesis engines keep generating new graphs while `target` is fed a score that
keeps finding small improvements (the fp32-noise failure seen on CUDA: one engine of 10**9
examples spent 2/3 of a 15-minute campaign hill-climbing a single graph). No compiles here: the
engines are the real ones (`slot_engines`), the score is a deterministic stand-in."""

from __future__ import annotations

import hashlib
import math
import random

import pytest
from hypothesis import target

from divfuzz.fuzzer.campaign.loop import slot_engines
from divfuzz.generators.strategies import graph_specs


class _Enough(BaseException):
    pass


def _structures_seen(n_cases: int) -> list[str]:
    seen: list[str] = []

    def body(spec) -> None:
        if len(seen) >= n_cases:
            raise _Enough
        seen.append("+".join(n.op for n in spec.nodes) + f"|{spec.autocast}|{spec.backward}")
        rng = random.Random(int(hashlib.sha256(spec.digest().encode()).hexdigest()[:8], 16))
        target(math.exp(rng.gauss(1.5, 1.5)) ** 0.5)  # heavy-tailed: a better case is always near

    try:
        for engine in slot_engines(graph_specs(), 1, 0, body):
            engine()
    except _Enough:
        pass
    return seen


@pytest.mark.slow
def test_target_passes_are_bounded_and_generation_takes_over_again():
    seen = _structures_seen(1500)
    windows = [len(set(seen[i : i + 300])) for i in range(0, len(seen), 300)]
    # With a single unbounded engine the windows after the first fall to 1 distinct graph.
    assert min(windows) >= 30, windows
