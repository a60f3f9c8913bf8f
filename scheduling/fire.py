"""Next fire times for once, cron and interval schedules.

Always computed from the previous *scheduled* time (or, for fixed_delay, the completion
time), never from the clock, so a recurring task does not drift.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from scheduling.cron import next_cron_fire
from scheduling.spec import IntervalMode, ScheduleFields, ScheduleType, TaskSpec


def first_fire(spec: TaskSpec, created_at: datetime) -> datetime | None:
    """The first fire time of a task created at ``created_at``."""
    if spec.schedule_type is ScheduleType.ONCE:
        return _bounded(spec, spec.run_at)
    if spec.schedule_type is ScheduleType.INTERVAL and spec.start_date is not None:
        return _bounded(spec, spec.start_date)
    return next_fire(spec, anchor=created_at, after=created_at)


def next_fire(spec: ScheduleFields, *, anchor: datetime, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after``, within start_date and end_date.

    ``anchor`` is where a fixed-rate interval counts from (the start date or the creation
    time); for fixed_delay, ``after`` is the completion time of the previous run.
    """
    if spec.schedule_type is ScheduleType.ONCE:
        return None
    if spec.start_date is not None and after < spec.start_date:
        # Fire at start_date itself when it is on the schedule.
        after = spec.start_date - timedelta(microseconds=1)
    if spec.schedule_type is ScheduleType.CRON:
        assert spec.cron is not None
        candidate = next_cron_fire(spec.cron, ZoneInfo(spec.timezone), after)
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
                count = math.floor((after - origin) / step) + 1
                candidate = origin + step * count
    return _bounded(spec, candidate)


def fires_between(
    spec: ScheduleFields, *, anchor: datetime, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Up to ``limit`` fire times in (after, until], oldest first."""
    found: list[datetime] = []
    cursor = after
    while len(found) < limit:
        candidate = next_fire(spec, anchor=anchor, after=cursor)
        if candidate is None or candidate > until:
            break
        found.append(candidate)
        cursor = candidate
    return found


def _bounded(spec: ScheduleFields, candidate: datetime | None) -> datetime | None:
    if candidate is None:
        return None
    if spec.end_date is not None and candidate > spec.end_date:
        return None
    return candidate
