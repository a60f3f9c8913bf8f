"""How long the server may hold a new task's workflow before its first workflow task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.jitter import jitter_offset
from scheduling.wake import WakePacer, first_wake_delay

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def delay(first: datetime | None, *, lead: float = 10.0, minimum: float = 300.0,
          maximum: float = 0.0, jitter: float = 0.0, task_id: str = "t") -> timedelta | None:
    return first_wake_delay(task_id=task_id, first_fire=first, jitter_seconds=jitter,
                            lead_seconds=lead, now=NOW, minimum_seconds=minimum,
                            maximum_seconds=maximum)


def test_held_until_the_run_is_dispatched() -> None:
    assert delay(NOW + timedelta(days=1)) == timedelta(days=1, seconds=-10)
    assert delay(NOW + timedelta(hours=1), lead=600) == timedelta(minutes=50)


def test_not_held_when_the_dispatch_is_closer_than_the_minimum() -> None:
    assert delay(NOW + timedelta(seconds=309)) is None
    assert delay(NOW + timedelta(seconds=310)) == timedelta(seconds=300)
    # A herd's long lead puts the dispatch close even for a run an hour away.
    assert delay(NOW + timedelta(hours=1), lead=3500) is None


def test_never_held_when_turned_off_or_without_a_first_run() -> None:
    assert delay(NOW + timedelta(days=1), minimum=0) is None
    assert delay(None) is None


def test_the_wake_includes_the_runs_jitter() -> None:
    first = NOW + timedelta(days=1)
    offset = jitter_offset("task-7", first, 120.0)
    assert offset > timedelta(0)
    assert delay(first, jitter=120.0, task_id="task-7") == first + offset - timedelta(seconds=10) - NOW


def test_a_limited_hold_ends_after_the_limit_or_at_the_dispatch_if_sooner() -> None:
    assert delay(NOW + timedelta(days=1), minimum=60, maximum=30) == timedelta(seconds=30)
    assert delay(NOW + timedelta(seconds=100), minimum=60, maximum=30) == timedelta(seconds=30)
    assert delay(NOW + timedelta(seconds=100), minimum=60, maximum=200) == timedelta(seconds=90)
    # The minimum still decides whether a task is held at all.
    assert delay(NOW + timedelta(seconds=69), minimum=60, maximum=30) is None
    assert delay(NOW + timedelta(days=1), minimum=0, maximum=30) is None


def test_the_shipped_hold_ends_well_before_the_first_dispatch() -> None:
    """With the shipped settings a held task always wakes at least half a minute before its
    run is dispatched, so the lead the workflow computes at its first workflow task applies."""
    from worker.settings import Settings

    shipped = Settings(env="test")
    assert 0 < shipped.hold_at_most_seconds <= shipped.hold_after_seconds - 30
    for ahead in (shipped.hold_after_seconds, 3600.0, 86400.0 * 30):
        held = first_wake_delay(
            task_id="t", first_fire=NOW + timedelta(seconds=ahead), jitter_seconds=0.0,
            lead_seconds=0.0, now=NOW, minimum_seconds=shipped.hold_after_seconds,
            maximum_seconds=shipped.hold_at_most_seconds)
        assert held == timedelta(seconds=shipped.hold_at_most_seconds)
        assert ahead - held.total_seconds() >= 30


def test_paced_wakes_are_spread_at_the_rate_from_the_end_of_the_hold() -> None:
    pacer = WakePacer(rate=4.0)
    first = NOW + timedelta(days=1)
    # Ten tasks created in the same instant: the first wakes when its hold ends, the others
    # a quarter of a second apart after it.
    delays = [first_wake_delay(task_id=f"t{i}", first_fire=first, jitter_seconds=0.0,
                               lead_seconds=10.0, now=NOW, minimum_seconds=60.0,
                               maximum_seconds=30.0, pacer=pacer) for i in range(10)]
    assert delays == [timedelta(seconds=30 + i / 4) for i in range(10)]
    assert pacer.booked_until(NOW) == 30 + 10 / 4


def test_a_wake_after_a_quiet_spell_is_not_delayed() -> None:
    pacer = WakePacer(rate=1.0)
    assert pacer.book(NOW, NOW + timedelta(hours=1)) == NOW
    assert pacer.book(NOW, NOW + timedelta(hours=1)) == NOW + timedelta(seconds=1)
    later = NOW + timedelta(minutes=5)
    assert pacer.book(later, later + timedelta(hours=1)) == later
    assert pacer.booked_until(later) == 1.0
    assert pacer.booked_until(later + timedelta(seconds=2)) == 0.0


def test_a_wake_the_pace_cannot_fit_is_held_until_the_dispatch() -> None:
    pacer = WakePacer(rate=1.0)
    dispatch = NOW + timedelta(seconds=2)
    assert pacer.book(NOW, dispatch) == NOW
    assert pacer.book(NOW, dispatch) == NOW + timedelta(seconds=1)
    # The next free wake is the dispatch itself: held until then, and no wake is booked.
    assert pacer.book(NOW, dispatch) == dispatch
    assert pacer.booked_until(NOW) == 2.0
    # A task dispatched later still gets the next free wake.
    assert pacer.book(NOW, NOW + timedelta(minutes=1)) == NOW + timedelta(seconds=2)


def test_a_task_due_within_the_hold_is_held_to_its_dispatch_without_a_booking() -> None:
    pacer = WakePacer(rate=1.0)
    held = first_wake_delay(task_id="t", first_fire=NOW + timedelta(seconds=100),
                            jitter_seconds=0.0, lead_seconds=10.0, now=NOW,
                            minimum_seconds=60.0, maximum_seconds=200.0, pacer=pacer)
    assert held == timedelta(seconds=90)
    assert pacer.booked_until(NOW) == 0.0


def test_no_pace_wakes_each_task_when_its_hold_ends() -> None:
    pacer = WakePacer(rate=0.0)
    for _ in range(3):
        assert pacer.book(NOW, NOW + timedelta(hours=1)) == NOW
    assert pacer.booked_until(NOW) == 0.0
