"""The one deadline (`divfuzz.records.deadline`): monotonic, never negative, a share never ends
after the deadline it was taken from, and "time's up" is one exception, `TimeUp`."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, strategies as st

from divfuzz.records.deadline import Deadline, StopReason, wall_clock_of
from divfuzz.records.errors import DivfuzzError, TimeUp


def test_a_deadline_without_an_end_never_expires_and_cuts_nothing():
    never = Deadline.never()
    assert not never.bounded and never.left() == math.inf and not never.expired()
    assert never.fits(1e12) and never.wall_clock() is None
    never.check("anything")  # no TimeUp
    assert not Deadline.after(None).bounded


def test_a_passed_deadline_has_nothing_left_and_raises_time_up_naming_the_step():
    passed = Deadline.after(-5.0)
    assert passed.bounded and passed.expired() and passed.left() == 0.0 and not passed.fits(0.001)
    with pytest.raises(TimeUp, match="before the ladder's next rung"):
        passed.check("the ladder's next rung")
    assert not issubclass(TimeUp, DivfuzzError)  # control flow, never an exit-2 error


def test_left_counts_down_and_spent_counts_up_on_the_monotonic_clock():
    d = Deadline.after(3600.0)
    first_left, first_spent = d.left(), d.spent()
    time.sleep(0.02)
    assert d.left() < first_left and d.spent() > first_spent >= 0.0
    assert 3599.0 < first_left <= 3600.0


@given(parent_s=st.one_of(st.none(), st.floats(-10, 1e6)), share_s=st.one_of(st.none(), st.floats(-10, 1e6)))
def test_a_share_never_ends_after_its_parent(parent_s, share_s):
    parent = Deadline.after(parent_s)
    share = parent.share(share_s)
    if parent.bounded:
        assert share.bounded and share.at <= parent.at
    if share_s is not None:
        assert share.bounded and share.at <= share.start + share_s
    if parent_s is None and share_s is None:
        assert not share.bounded


def test_earlier_by_keeps_the_clock_and_moves_the_end():
    d = Deadline.after(100.0)
    reserve = d.earlier_by(5.0)
    assert reserve.start == d.start and reserve.at == pytest.approx(d.at - 5.0)
    assert not Deadline.never().earlier_by(5.0).bounded


def test_the_end_as_a_timestamp_is_on_the_wall_clock():
    d = Deadline.after(60.0)
    assert d.wall_clock() == pytest.approx(time.time() + 60.0, abs=1.0)
    assert wall_clock_of(time.monotonic()) == pytest.approx(time.time(), abs=1.0)


def test_every_stop_reason_has_a_distinct_readable_value():
    values = [r.value for r in StopReason]
    assert len(set(values)) == len(values) and StopReason.TIME_UP.value == "time's up"


def test_the_minimizer_records_why_it_stopped_in_the_one_vocabulary():
    """A minimization that runs out of passes is `finished`; one whose budget ends first is `time's
    up` (and its stored record keeps the `budget_exhausted` field the store's rows read)."""
    import time as _time

    from divfuzz.fuzzer.triage.shrink import minimize_spec
    from tests.seed_specs import sigmoid_gate

    spec = sigmoid_gate(8, 4)
    done = minimize_spec(spec, lambda s: True, budget_s=60.0)
    assert done.stopped is StopReason.FINISHED and not done.budget_exhausted
    assert done.to_dict()["stopped"] == "finished"

    def slow(s):
        _time.sleep(0.2)
        return True

    cut = minimize_spec(spec, slow, budget_s=0.3)
    assert cut.stopped is StopReason.TIME_UP and cut.to_dict()["budget_exhausted"] is True
