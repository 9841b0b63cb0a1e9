"""Where a difference arises, at any severity: for a user module whose divergence reads below
suspect (noise, by-design), the first rung of the ladder whose outputs differ from the rung
before it, narrowed by torch's compiler bisector, and the upstream issue that matches.

A user asks why their model differs; `same()` may accept the difference (noise) and a precision
switch may excuse it (by-design), but the stage that makes it is one ladder away. Nothing is
reduced and no cause folder is written below suspect: one line per graph says where, and which
known issue it is. Invariants: the ladder compares bits (any difference names a rung: this is
"where", not "how bad"); the bisector's "bad" is "differs from the rung before", so it names the
subsystem that makes the difference; the deadline stops it between steps.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import torch

from divfuzz.fuzzer.engine.compile import compiled
from divfuzz.fuzzer.triage.attribute import bisect_result_of
from divfuzz.records.backends import INDUCTOR
from divfuzz.records.config import CompileConfig
from divfuzz.records.culprit import Culprit
from divfuzz.records.deadline import Deadline
from divfuzz.records.errors import TimeUp


@dataclass(frozen=True)
class Arises:
    """The first rung whose outputs differ from the rung before it, and the culprit the bisector
    names there (None when no rung differs, or the bisector named nothing in time)."""

    rung: str | None
    before: str | None
    culprit: Culprit | None

    def describe(self) -> str:
        if self.rung is None:
            return "no rung of the ladder differs from the one before it on this graph"
        where = self.culprit.describe() if self.culprit is not None else f"{self.rung} (no single subsystem named)"
        return f"{self.before} vs {self.rung}: {where}"


def _bitwise_equal(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            same = (x == y) | (x.isnan() & y.isnan())
            same &= torch.signbit(x) == torch.signbit(y)
        else:
            same = x == y
        if not bool(same.all()):
            return False
    return True


def where_it_arises(gm, inputs, *, rungs: tuple[str, ...], run, deadline: Deadline) -> Arises:
    """Walk `rungs` (eager first) on `gm`, `run(gm, inputs, rung)` giving each rung's flat outputs,
    up to the first rung whose outputs differ in any bit from the rung before; then bisect there,
    "good" meaning "equal to the rung before" (the bisector picks the backend and the subsystems
    it disables). Stops at `deadline` with what it has."""
    # lazy: heavy: Dynamo/Inductor cost ~0.8 s beyond torch; only processes that compile load them
    from torch._inductor.compiler_bisector import CompilerBisector

    previous = run(gm, inputs, rungs[0])
    for before, rung in zip(rungs, rungs[1:]):
        if deadline.expired():
            return Arises(None, None, None)
        now = run(gm, inputs, rung)
        if not _bitwise_equal(previous, now):
            break
        previous = now
    else:
        return Arises(None, None, None)
    reference = previous

    def good() -> bool:
        deadline.check("a compiler bisector step")
        backend = CompilerBisector.get_backend()
        if backend in rungs and rungs.index(backend) < rungs.index(rung):
            return True
        try:
            with torch.no_grad(), compiled(gm, CompileConfig(backend=INDUCTOR, dynamic=None)) as fn:
                out = [t for t in torch.utils._pytree.tree_leaves(fn(*inputs)) if isinstance(t, torch.Tensor)]
            return _bitwise_equal(reference, out)
        except Exception:  # this configuration does not compile: it must not take the blame
            return False

    culprit = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            res = CompilerBisector.do_bisect(good)
        if res is not None:
            culprit = Culprit(stage=rung, summary="").with_bisect(bisect_result_of(res))
    except TimeUp:
        pass
    return Arises(rung, before, culprit)
