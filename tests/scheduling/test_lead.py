"""How far ahead a run is dispatched: the base lead, grown by a late timer and by a herd, never
past the longest lead, and none at all when the lead is off; and how near its instant a run
sent ahead can still be withdrawn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scheduling.policy import herd_lead, lead, may_withdraw, retimed_crowd

seconds = st.floats(min_value=0, max_value=600, allow_nan=False)


def test_a_herd_adds_the_time_its_earlier_runs_take_to_dispatch() -> None:
    assert herd_lead(0, 50) == 0
    assert herd_lead(500, 50) == 10
    assert herd_lead(500, 0) == 0  # off
    assert lead(10, 0, 60, herd_lead(500, 50)) == timedelta(seconds=20)
    assert lead(10, 2, 60, herd_lead(500, 50)) == timedelta(seconds=24)
    assert lead(10, 0, 60, herd_lead(10_000, 50)) == timedelta(seconds=60)
    assert lead(0, 5, 60, herd_lead(500, 50)) == timedelta(0)


@given(base=seconds, lag=seconds, longest=seconds, herd=seconds, more=seconds)
def test_the_lead_grows_with_the_herd_up_to_the_longest(
    base: float, lag: float, longest: float, herd: float, more: float
) -> None:
    shorter, longer = lead(base, lag, longest, herd), lead(base, lag, longest, herd + more)
    assert shorter <= longer <= timedelta(seconds=max(base, longest))
    if base == 0:
        assert longer == timedelta(0)
    else:
        assert shorter >= timedelta(seconds=base)


def test_a_retimed_task_keeps_the_count_taken_for_the_second_of_its_next_run() -> None:
    counted = datetime(2026, 12, 6, 9, 0, 0, 400_000, tzinfo=UTC)
    assert retimed_crowd(7, counted, counted.replace(microsecond=999_999)) == 7
    assert retimed_crowd(7, counted, counted + timedelta(seconds=1)) == 0
    assert retimed_crowd(7, None, counted) == 0  # not counted: an older API, a plain update
    assert retimed_crowd(7, counted, None) == 0  # no next run (paused, bounds reached)


def test_a_run_is_withdrawn_only_further_ahead_than_its_beat_and_a_second() -> None:
    instant = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    usual, herd = timedelta(seconds=2), timedelta(seconds=20)
    assert may_withdraw(instant, instant - timedelta(seconds=3.01), usual)
    assert not may_withdraw(instant, instant - timedelta(seconds=3), usual)
    assert not may_withdraw(instant, instant - timedelta(seconds=21), herd)
    assert may_withdraw(instant, instant - timedelta(seconds=21.01), herd)
    held = timedelta(seconds=8)  # a slow write holds the workflow task's commands
    assert not may_withdraw(instant, instant - timedelta(seconds=11), usual, held)
    assert may_withdraw(instant, instant - timedelta(seconds=11.01), usual, held)
