"""How a campaign spends `--budget`: when drawing stops, how long an analysis may run, which
analysis runs next. Pure functions of the clock and of what the run measured, so the rules are
tested without workers.

The budget counts from the command's start (`CampaignOptions.budget_from`) and covers everything
to its exit: sizing, worker start-up, drawing, the analyses, stopping the workers, the summary
and `report.html`. Invariants:
- all work ends at `work_end = end - FINISH_RESERVE_S`: a case or an analysis still in flight then
  is dropped (not stored; the case is redone on resume, the analysis stays pending);
- drawing stops `drawing_reserve` seconds before `work_end`: time for the slots' cases in flight,
  and for the open bug analyses at their measured rate, shared by every worker once drawing stops
  (the slots' workers join the analysis pool), each round at least the window in which
  `analysis_budget` still starts one (`analysis_start_window`); at most `MAX_RESERVE_SHARE` of
  the budget;
- analyses run in severity order: bug, then suspect by case count, then oldest first; noise,
  by-design and eager-worse buckets are never minimized in a campaign (`minimize --pending` may,
  when asked);
- an analysis starts only with time for its attribution plus `MIN_ANALYSIS_S` of minimization.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterable

from divfuzz.records.deadline import Deadline
from divfuzz.records.severity import Severity

# After the last case and analysis: stopping the workers, closing the store, the summary and
# report.html. Measured on this project's 2-core CPU: stopping 3 workers about 1 s, the summary
# and a report of a few dozen buckets about 1 s.
FINISH_RESERVE_S = 5.0
# A minimization given fewer seconds than this would file a barely-shrunk root cause: the
# analysis is not started (it stays pending).
MIN_ANALYSIS_S = 5.0
# Drawing gets at least half of any budget, however many bug analyses are open.
MAX_RESERVE_SHARE = 0.5
# Before this run has measured any: a case's wall (a cold compile on a GPU host is 1-2 s, on the
# CPU up to 10 s) and an analysis's attribution (stage ladder, probes and bisector of the minimal spec).
DEFAULT_CASE_S = 10.0
DEFAULT_ATTRIBUTION_S = 20.0
# An analysis in a campaign ends within this many times its minimization budget: the culprit's
# passes and the bisector get at most as long as the minimizer (`BucketAnalyzer.span_factor`).
# Measured on the H100 (a 420 s campaign, torch 2.11): four compile-error analyses whose every
# compile took 27-37 s (an assertion in Inductor's mix-order reduction) ran 139-265 s each, the
# bisector unbounded, and were cut unfiled at the budget's end: 821 worker-seconds for nothing.
ANALYSIS_SPAN_FACTOR = 2.0
# An analysis's span ends this long before `work_end`: the step in flight at its deadline (a
# compile, 1-3 s on the H100 host) and the filing must fit before the budget's cut. Measured on
# the H200 host (420 s, seed 11, 4 inputs per compile): 3 bug analyses whose spans ended within
# 0.5 s of work_end ran into it and were cut unfiled, one after 104 s of work.
ANALYSIS_FILING_S = 4.0
# Severities whose buckets a campaign never minimizes: those that are no finding against the
# compiler (eager-worse is one about eager, reported apart). Measured on the H100 (420 s, seed 11):
# 16 of 52 analyses, 442 of 2,609 analysis seconds, went to buckets that ended eager-worse, while
# the slots drew beside them.
NOT_MINIMIZED = (Severity.NOISE, Severity.BY_DESIGN, Severity.EAGER_WORSE)


@dataclass(frozen=True)
class Measured:
    """What this run measured so far (None: nothing yet)."""

    case_s: float | None = None  # a slow case: the 90th percentile of the cases' walls
    analysis_s: float | None = None  # mean wall of the analyses finished in this run
    attribution_s: float | None = None  # mean of each finished analysis's wall minus its minimization's


def percentile(values: Iterable[float], q: float) -> float | None:
    """The `q` quantile (0..1) by nearest rank, None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def analysis_start_window(measured: Measured) -> float:
    """The fewest seconds before `work_end` at which `analysis_budget` still starts an analysis:
    ANALYSIS_FILING_S, then the larger of its attribution (measured, else DEFAULT_ATTRIBUTION_S)
    plus MIN_ANALYSIS_S and ANALYSIS_SPAN_FACTOR times MIN_ANALYSIS_S."""
    attribution = measured.attribution_s if measured.attribution_s is not None else DEFAULT_ATTRIBUTION_S
    return ANALYSIS_FILING_S + max(attribution + MIN_ANALYSIS_S, ANALYSIS_SPAN_FACTOR * MIN_ANALYSIS_S)


def drawing_reserve(measured: Measured, *, open_bug_analyses: int, places: int, minimize_budget_s: float,
                    budget_s: float, minimize: bool, start_floor: bool = True) -> float:
    """Seconds before `work_end` at which drawing stops: one slow case (the slots' cases in flight
    finish), plus, with minimization, the open bug analyses in rounds of `places` workers at the
    measured mean wall (before any is measured: the minimization budget plus DEFAULT_ATTRIBUTION_S),
    each round at least `analysis_start_window` with `start_floor` (else a round of quick
    analyses left the last bugs too little time to start: they ended pending). At most
    MAX_RESERVE_SHARE of the budget."""
    drain = measured.case_s if measured.case_s is not None else DEFAULT_CASE_S
    analyses = 0.0
    if minimize and open_bug_analyses:
        each = measured.analysis_s if measured.analysis_s is not None else minimize_budget_s + DEFAULT_ATTRIBUTION_S
        if start_floor:
            each = max(each, analysis_start_window(measured))
        analyses = math.ceil(open_bug_analyses / max(1, places)) * each
    return min(drain + analyses, MAX_RESERVE_SHARE * budget_s)


def analysis_budget(now: float, work_end: float | None, measured: Measured, minimize_budget_s: float) -> float | None:
    """Minimization seconds for an analysis starting `now`: the per-root-cause budget, capped so that
    its attribution (measured, else DEFAULT_ATTRIBUTION_S) still ends by `work_end` less
    ANALYSIS_FILING_S, and so that the whole analysis (at most ANALYSIS_SPAN_FACTOR times this
    budget) does; None when fewer than MIN_ANALYSIS_S would be left (it stays pending)."""
    if work_end is None:
        return minimize_budget_s
    attribution = measured.attribution_s if measured.attribution_s is not None else DEFAULT_ATTRIBUTION_S
    end = work_end - ANALYSIS_FILING_S
    left = min(end - now - attribution, (end - now) / ANALYSIS_SPAN_FACTOR)
    if left < MIN_ANALYSIS_S:
        return None
    return min(minimize_budget_s, left)


def analysis_rank(severity: str, count: int, case_id: int, *, campaign: bool = True) -> tuple[int, int, int] | None:
    """Sort key of an open analysis (smallest first): bug, then suspect, by case count, then the
    oldest case; in a campaign, None for a severity it never minimizes (`NOT_MINIMIZED`)."""
    sev = Severity(severity)
    if campaign and sev in NOT_MINIMIZED:
        return None
    return sev.rank, -count, case_id


def most_severe_first(store, queued: list, *, campaign: bool):
    """The queued analysis to run next: bug, then suspect, by case count, then the oldest
    (`analysis_rank` over the raw buckets' severities in `store`, a `Store`, read now: a raw
    bucket's severity and count grow while it waits). In a campaign, never a noise, by-design or
    eager-worse bucket (None when only those are queued); `minimize --pending` takes every severity.
    `queued` holds `divfuzz.fuzzer.campaign.analysis_pool.AnalysisJob`s; the one returned is one of them."""
    priorities = store.pending_priorities()
    ranked = []
    for job in queued:
        severity, count = priorities.get(job.raw_key.identity(), ("suspect", 0))
        rank = analysis_rank(severity, count, job.case_id, campaign=campaign)
        if rank is not None:
            ranked.append((rank, job))
    return min(ranked, key=lambda r: r[0])[1] if ranked else None


def pending_analysis_budget(left_s: float, minimize_budget_s: float) -> float | None:
    """`minimize --pending`'s minimization seconds for an analysis starting with `left_s` of its
    budget left: the whole analysis (at most ANALYSIS_SPAN_FACTOR times this) ends by the
    deadline; None when fewer than MIN_ANALYSIS_S would be left (it stays pending)."""
    left = left_s / ANALYSIS_SPAN_FACTOR
    return min(minimize_budget_s, left) if left >= MIN_ANALYSIS_S else None


@dataclass(frozen=True)
class AnalysisBudget:
    """How long the next analysis may minimize, for the analysis pool: in a campaign
    (`campaign=True`) `analysis_budget` before `end`, its `work_end`; for `minimize --pending`
    `pending_analysis_budget` of what is left of `end`, its `--budget`. None: it stays pending."""

    end: Deadline
    minimize_budget_s: float
    campaign: bool = True

    def for_next(self, attribution_s: float | None) -> float | None:
        """Seconds for an analysis starting now; `attribution_s`: the mean attribution measured so far."""
        if self.campaign:
            return analysis_budget(time.monotonic(), self.end.at, Measured(attribution_s=attribution_s), self.minimize_budget_s)
        return pending_analysis_budget(self.end.left(), self.minimize_budget_s)
