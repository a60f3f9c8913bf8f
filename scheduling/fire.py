"""Next fire times for once, cron and interval schedules.

Always computed from the previous *scheduled* time (or, for fixed_delay, the completion
time), never from the clock, so a recurring task does not drift.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from scheduling.cron import next_cron_fire
from scheduling.spec import IntervalMode, ScheduleFields, ScheduleType, TaskSpec


def first_fire(spec: TaskSpec, created_at: datetime) -> datetime | None:
    """The first fire time of a task created at ``created_at``."""
    if spec.schedule_type is ScheduleType.ONCE:
        return _bounded(spec, spec.run_at)
    if spec.schedule_type is ScheduleType.DATES:
        assert spec.dates is not None
        return _bounded(spec, spec.dates[0])
    if (
        spec.schedule_type is ScheduleType.INTERVAL
        and spec.start_date is not None
        and spec.start_date >= created_at
    ):
        return _bounded(spec, spec.start_date)
    # A start_date already past counts like the anchor of a fixed-rate interval: the first fire
    # is the next one after now, never a backlog of fires from before the task existed.
    return next_fire(spec, anchor=created_at, after=created_at)


def next_fire(spec: ScheduleFields, *, anchor: datetime, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after``, within start_date and end_date.

    ``anchor`` is where a fixed-rate interval counts from (the start date or the creation
    time); for fixed_delay, ``after`` is the completion time of the previous run.
    """
    if spec.schedule_type is ScheduleType.ONCE:
        return None
    if spec.schedule_type is ScheduleType.DATES:
        # The dates are sorted (ScheduleFields); the first after ``after``, within the bounds.
        later = (d for d in spec.dates or [] if d > after
                 and (spec.start_date is None or d >= spec.start_date))
        return _bounded(spec, next(later, None))
    before_start = spec.start_date is not None and after < spec.start_date
    candidate: datetime | None
    if spec.schedule_type is ScheduleType.CRON:
        assert spec.cron is not None
        if before_start:
            assert spec.start_date is not None
            # Fire at start_date itself when it is on the schedule.
            after = spec.start_date - timedelta(microseconds=1)
        candidate = next_cron_fire(spec.cron, ZoneInfo(spec.timezone), after, spec.dst_policy)
    elif before_start:
        candidate = spec.start_date
    else:
        assert spec.interval_seconds is not None
        step = timedelta(seconds=spec.interval_seconds)
        if spec.interval_mode is IntervalMode.FIXED_DELAY:
            candidate = after + step
        else:
            origin = spec.start_date or anchor
            if after < origin:
                candidate = origin
            else:
                # Integer microseconds: a float quotient can land one step short.
                candidate = origin + step * ((after - origin) // step + 1)
    return _bounded(spec, candidate)


def _bounded(spec: ScheduleFields, candidate: datetime | None) -> datetime | None:
    if candidate is None:
        return None
    if spec.end_date is not None and candidate > spec.end_date:
        return None
    return candidate
