"""How close together a schedule's runs come (for the minimum-interval quota)."""

from __future__ import annotations

from datetime import datetime

from scheduling.fire import next_fire
from scheduling.spec import ScheduleType, TaskSpec

SAMPLE_FIRES = 50


def shortest_gap(spec: TaskSpec, now: datetime) -> float | None:
    """The shortest time in seconds between two consecutive runs, None for a one-time task.

    Intervals are exact; cron gaps are sampled over the next fires from ``now``."""
    if spec.schedule_type is ScheduleType.ONCE:
        return None
    if spec.schedule_type is ScheduleType.INTERVAL:
        return spec.interval_seconds
    fires: list[datetime] = []
    cursor = now
    for _ in range(SAMPLE_FIRES):
        upcoming = next_fire(spec, anchor=now, after=cursor)
        if upcoming is None:
            break
        fires.append(upcoming)
        cursor = upcoming
    gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
    return min(gaps) if gaps else None
