"""The perf oracle's statistics: paired eager/compiled timings into a `PerfComparison`, and the
rule that calls compiled slower. Torch-free: the timing itself is `divfuzz.oracles.timing`'s job.

The rule (what `finding_of` applies): compiled is slower when the median of the paired
compiled/eager ratios exceeds 1 + margin AND its confidence interval excludes 1 ("not slower").
The margin is the run-to-run noise measured on the machine class (`DEFAULT_MARGIN`, from the
eager-vs-eager ratios of `scripts/perf_noise.py`); `--perf-margin` overrides it.

The interval is distribution-free: order statistics of the paired ratios around their median
(the sign-test interval), so no normality is assumed of timings that are skewed by nature.
Invariant: pure functions of the samples; the same samples give the same comparison.
"""

from __future__ import annotations

import math
from typing import Sequence

from divfuzz.records.verdict import PerfComparison

CONFIDENCE = 0.95

# The slowdown that run-to-run noise allows, per device type, as a fraction (0.05 = 5 %), set
# from eager-vs-eager (A/A) medians on the same worker (`scripts/perf_noise.py`):
# - cuda: H100, torch 2.11, 40 perf-generator graphs, device time: A/A median ratios p99 1.013,
#   max 1.013 (80 phases), none called slower at any margin >= 0.02; 0.05 is about 4x that;
# - cpu: wall time on a shared 2-core host swings by 2x and more under load; 0.25 keeps the
#   A/A control clean on an idle machine and the planted slow kernels (3x) far above it.
DEFAULT_MARGIN = {"cuda": 0.05, "cpu": 0.25}

# Repeats: at least this many pairs before any decision, at most this many per phase.
MIN_PAIRS = 10
MAX_PAIRS = 60


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def median_interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free interval for the median: (x_(k), x_(n+1-k)) with the largest k for which
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. Too few samples for that confidence give the
    whole range (min, max), which never excludes anything it should not."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("interval of no samples")
    alpha = (1.0 - confidence) / 2.0
    k, below = 0, 0.0  # below = P(B < k+1) as k grows
    for j in range(n // 2 + 1):
        below += math.comb(n, j) / 2.0**n  # P(B <= j) = P(B < j + 1)
        if below > alpha:
            break
        k = j + 1
    if k == 0:
        return s[0], s[-1]
    return s[k - 1], s[n - k]


def compare_timings(
    phase: str,
    eager_s: Sequence[float],
    compiled_s: Sequence[float],
    *,
    margin: float,
    dtype: str = "-",
    overhead_s: float = 0.0,
    timer: str = "",
    clock: str = "",
    confidence: float = CONFIDENCE,
) -> PerfComparison:
    """The comparison of paired samples (eager_s[i] and compiled_s[i] ran back to back)."""
    if len(eager_s) != len(compiled_s) or not eager_s:
        raise ValueError(f"Expected paired, non-empty samples but got {len(eager_s)} eager and {len(compiled_s)} compiled")
    ratios = [c / e if e > 0 else math.inf for e, c in zip(eager_s, compiled_s)]
    low, high = median_interval(ratios, confidence)
    return PerfComparison(
        phase=phase,
        repeats=len(ratios),
        eager_median_s=median(eager_s),
        compiled_median_s=median(compiled_s),
        ratio=median(ratios),
        ratio_low=low,
        ratio_high=high,
        confidence=confidence,
        margin=margin,
        overhead_s=overhead_s,
        timer=timer,
        clock=clock,
        dtype=dtype,
    )


def is_slower(cmp: PerfComparison) -> bool:
    """Compiled slower than eager: median ratio beyond 1 + margin, the interval excluding 1."""
    return cmp.ratio > 1.0 + cmp.margin and cmp.ratio_low > 1.0


def settled(cmp: PerfComparison) -> bool:
    """More pairs cannot change the decision much: the interval lies wholly on one side of the
    1 + margin line (or, for a finding, already excludes 1 with the median past the line).
    The timer stops adding pairs once this holds (or at MAX_PAIRS)."""
    line = 1.0 + cmp.margin
    return cmp.ratio_high < line or cmp.ratio_low > line or is_slower(cmp)
