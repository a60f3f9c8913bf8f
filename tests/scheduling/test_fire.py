"""Next fire times of once, interval and bounded schedules (pure math, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.fire import first_fire, next_fire
from scheduling.spec import TaskSpec

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
JOB = {"type": "handler", "name": "noop"}


def spec(**fields: object) -> TaskSpec:
    return TaskSpec.model_validate({"task_name": "t", "job_details": JOB, **fields})


def test_once_fires_at_run_at_and_never_again() -> None:
    task = spec(schedule_type="once", run_at=T0 + timedelta(hours=1))
    assert first_fire(task, T0) == T0 + timedelta(hours=1)
    assert next_fire(task, anchor=T0, after=T0 + timedelta(hours=1)) is None


def test_fixed_rate_counts_from_the_anchor_not_from_the_last_run() -> None:
    task = spec(schedule_type="interval", interval_seconds=600)
    assert first_fire(task, T0) == T0 + timedelta(minutes=10)
    # asked late (the run took 3 minutes): still on the anchored grid
    assert next_fire(task, anchor=T0, after=T0 + timedelta(minutes=13)) == T0 + timedelta(
        minutes=20
    )
    # asked exactly on a fire: the next one, strictly after
    assert next_fire(task, anchor=T0, after=T0 + timedelta(minutes=20)) == T0 + timedelta(
        minutes=30
    )


def test_fixed_rate_stays_exact_after_many_small_steps() -> None:
    task = spec(schedule_type="interval", interval_seconds=0.1)
    after = T0 + timedelta(seconds=0.1) * 987_654
    assert next_fire(task, anchor=T0, after=after) == T0 + timedelta(seconds=0.1) * 987_655
    task = spec(schedule_type="interval", interval_seconds=0.3)
    cursor = T0
    for _ in range(1000):
        cursor = next_fire(task, anchor=T0, after=cursor)  # type: ignore[assignment]
    assert cursor == T0 + timedelta(seconds=300)


def test_fixed_delay_counts_from_the_completion() -> None:
    task = spec(schedule_type="interval", interval_seconds=600, interval_mode="fixed_delay")
    finished = T0 + timedelta(minutes=13, seconds=7)
    assert next_fire(task, anchor=T0, after=finished) == finished + timedelta(minutes=10)


def test_interval_with_a_future_start_date_fires_first_at_the_start_date() -> None:
    start = T0 + timedelta(days=2, minutes=7)
    for mode in ("fixed_rate", "fixed_delay"):
        task = spec(
            schedule_type="interval", interval_seconds=3600, interval_mode=mode, start_date=start
        )
        assert first_fire(task, T0) == start
        assert next_fire(task, anchor=T0, after=T0) == start
    rate = spec(schedule_type="interval", interval_seconds=3600, start_date=start)
    assert next_fire(rate, anchor=T0, after=start) == start + timedelta(hours=1)


def test_interval_with_a_past_start_date_keeps_its_grid_and_has_no_backlog() -> None:
    start = T0 - timedelta(days=3, minutes=50)
    rate = spec(schedule_type="interval", interval_seconds=3600, start_date=start)
    # on the grid of start_date, the next one after now; not start_date three days ago
    assert first_fire(rate, T0) == T0 + timedelta(minutes=10)
    delay = spec(
        schedule_type="interval",
        interval_seconds=3600,
        interval_mode="fixed_delay",
        start_date=start,
    )
    assert first_fire(delay, T0) == T0 + timedelta(hours=1)


def test_cron_with_a_start_date_waits_for_it_and_fires_on_it_when_it_matches() -> None:
    start = T0 + timedelta(days=3)  # 10:00 UTC
    task = spec(schedule_type="cron", cron="0 * * * *", start_date=start)
    assert first_fire(task, T0) == start
    odd = spec(schedule_type="cron", cron="0 * * * *", start_date=start + timedelta(minutes=1))
    assert first_fire(odd, T0) == start + timedelta(hours=1)


def test_end_date_bounds_every_schedule() -> None:
    end = T0 + timedelta(hours=2, minutes=30)
    rate = spec(schedule_type="interval", interval_seconds=3600, end_date=end)
    assert next_fire(rate, anchor=T0, after=T0) == T0 + timedelta(hours=1)
    assert next_fire(rate, anchor=T0, after=T0 + timedelta(hours=1)) == T0 + timedelta(hours=2)
    assert next_fire(rate, anchor=T0, after=T0 + timedelta(hours=2)) is None
    cron = spec(schedule_type="cron", cron="0 * * * *", end_date=end)
    assert next_fire(cron, anchor=T0, after=T0 + timedelta(hours=2)) is None
    once = spec(schedule_type="once", run_at=end + timedelta(seconds=1), end_date=end)
    assert first_fire(once, T0) is None


def test_an_end_date_on_a_fire_time_includes_it() -> None:
    end = T0 + timedelta(hours=2)
    rate = spec(schedule_type="interval", interval_seconds=3600, end_date=end)
    assert next_fire(rate, anchor=T0, after=T0 + timedelta(hours=1)) == end

