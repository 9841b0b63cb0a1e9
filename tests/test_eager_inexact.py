"""Integers that rounding decides on both sides are no compiler bug (`EAGER_MISS_SHARE`).

Where eager, in its own precision, misses the integer computed in fp64 about as often as compiled
does, the integers hang on roundings (a floor of a long cancelling sum, an argmax over sums equal
in exact arithmetic) and compiled's misses are those roundings taken in another order. Each case
here is computed for real: "compiled" is the same sum in another order, as a compiler may take it,
and a planted off-by-one stands for a compiler that gets the integer wrong.
"""

from __future__ import annotations

import torch

from divfuzz.oracles.boundary import distance_to_grid_ulps, selection_distance_ulps
from divfuzz.oracles.judge import judge_outputs, verdict_of
from divfuzz.oracles.severity_policy import severity_of
from divfuzz.records.severity import Severity


def _cancelling_rows(rows: int = 256, terms: int = 1000) -> torch.Tensor:
    """float32 rows of values near 100 whose exact sums sit 3e-4 above an integer: a margin far
    below the sum's rounding error in float32 (about n * eps * sum|x|)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn((rows, terms), generator=g, dtype=torch.float64) * 100
    k = torch.randint(-5, 6, (rows,), generator=g).to(torch.float64)
    x[:, -1] += (k + 3e-4) - x.sum(-1)
    return x.float()


def _judge(eager, compiled, reference, bound):
    return severity_of(verdict_of(judge_outputs([("v", eager)], [("v", compiled)], [("v", reference)], {"v": bound})))


def test_a_floor_of_a_sum_that_eager_misses_as_often_is_a_boundary_and_a_planted_off_by_one_stays_a_bug():
    x = _cancelling_rows()
    eager_sum = x.sum(-1)
    other_order = x.flip(-1).sum(-1)  # the same terms summed from the other end
    reference = torch.floor(x.double().sum(-1))
    bound = distance_to_grid_ulps(eager_sum, offset=0.0)
    eager, compiled = torch.floor(eager_sum), torch.floor(other_order)
    assert (eager != compiled).any() and (eager != reference.float()).any()  # both orders miss fp64 somewhere
    reason = _judge(eager, compiled, reference, bound)
    assert reason is not None and reason.severity is Severity.SUSPECT and reason.rule == "int-valued-boundary", reason
    assert "of the differing elements, eager misses the fp64 integer on" in reason.detail
    # A compiler that is off by one on a fifth of the rows misses far more often than eager: a bug.
    wrong = eager.clone()
    wrong[::5] += 1
    reason = _judge(eager, wrong, reference, bound)
    assert reason is not None and reason.severity is Severity.BUG and reason.rule == "int-valued-wrong", reason


def test_an_argmax_over_sums_equal_in_exact_arithmetic_is_rounding_on_both_sides_and_a_planted_argmin_is_a_bug():
    g = torch.Generator().manual_seed(0)
    rows, candidates, terms = 64, 16, 257
    base = torch.randn((rows, 1, terms), generator=g) * 100
    perm = torch.stack([torch.randperm(terms, generator=g) for _ in range(candidates)])
    x = torch.gather(base.expand(rows, candidates, terms), 2, perm.unsqueeze(0).expand(rows, candidates, terms)).contiguous()
    sums = x.sum(-1)
    eager, compiled = sums.argmax(-1), x.flip(-1).sum(-1).argmax(-1)
    reference = x.double().sum(-1).argmax(-1)
    bound = selection_distance_ulps(sums, -1, largest=True)
    assert (eager != compiled).sum() > rows // 2
    reason = _judge(eager, compiled, reference, bound)
    assert reason is not None and reason.severity is Severity.SUSPECT and reason.rule == "int-eager-inexact", reason
    # On rows with one clear winner eager is exact, and a compiler that picks the smallest is a bug.
    clear = torch.randn((rows, candidates), generator=g)
    reason = _judge(clear.argmax(-1), clear.argmin(-1), clear.double().argmax(-1), selection_distance_ulps(clear, -1, largest=True))
    assert reason is not None and reason.severity is Severity.BUG and reason.rule == "int-gross", reason
