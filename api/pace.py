"""How close together a schedule's runs come (for the minimum-interval quota)."""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduling.fire import next_fire
from scheduling.spec import ScheduleType, TaskSpec

SAMPLE_FIRES = 50
# Concurrent creates reach the check a little out of the order they took their `now` in: a walk
# keeps the fires of this long before the latest `now`, so the next create need not start over.
_KEEP_BEHIND = timedelta(seconds=60)


def pace(spec: TaskSpec) -> tuple[object, ...]:
    """Everything but the start and end dates that sets when a schedule's runs come, so the
    gaps between them: an update that keeps it need not be checked again, and two schedules
    with the same pace and dates have the same fires."""
    return (spec.schedule_type, spec.cron, spec.timezone, spec.dst_policy.gap,
            spec.dst_policy.repeated, spec.interval_seconds, tuple(spec.dates or ()))


def may_come_closer(before: TaskSpec, spec: TaskSpec) -> bool:
    """Whether ``spec``, a change of ``before``, may have runs closer together than it: its
    pace changed, or its window (start_date, end_date) takes in more time, where runs the
    old window left out may lie (a window with one run has no gap to judge at all)."""
    if pace(spec) != pace(before):
        return True
    starts_earlier = before.start_date is not None and (
        spec.start_date is None or spec.start_date < before.start_date)
    ends_later = before.end_date is not None and (
        spec.end_date is None or spec.end_date > before.end_date)
    return starts_earlier or ends_later


@dataclass(frozen=True)
class _Walk:
    """Every fire of one cron schedule after ``origin``, in order, as far as walked."""

    origin: datetime
    fires: tuple[datetime, ...]
    ended: bool  # the schedule has no fire after the last one listed


class ShortestGaps:
    """Shortest gaps between runs, with the fires of recent cron schedules remembered.

    A cron gap is sampled over the next 50 fires, croniter work at every create of a cron
    task. Tasks mostly share a few schedules, and the fires after any instant are the same
    whichever create walked them, so a later create of the same schedule walks only what time
    has added. One instance per API process, used from its event loop."""

    def __init__(self, schedules_kept: int = 512) -> None:
        self._kept = schedules_kept
        self._walks: OrderedDict[tuple[object, ...], _Walk] = OrderedDict()

    def shortest_gap(self, spec: TaskSpec, now: datetime) -> float | None:
        """The shortest time in seconds between two consecutive runs, None for a one-time task
        (or a schedule with fewer than two runs left).

        Intervals are exact; cron gaps are sampled over the next fires from ``now``."""
        if spec.schedule_type is ScheduleType.ONCE:
            return None
        if spec.schedule_type is ScheduleType.INTERVAL:
            return spec.interval_seconds
        if spec.schedule_type is ScheduleType.DATES:
            dates = spec.dates or []
            gaps = [(b - a).total_seconds() for a, b in zip(dates, dates[1:], strict=False)]
            return min(gaps, default=None)
        fires = self._cron_fires(spec, now)
        gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
        return min(gaps) if gaps else None

    def _cron_fires(self, spec: TaskSpec, now: datetime) -> list[datetime]:
        """The next SAMPLE_FIRES fires after ``now`` (fewer if the schedule ends)."""
        key = (pace(spec), spec.start_date, spec.end_date)
        walk = self._walks.pop(key, None)
        if walk is None or walk.origin > now or (not walk.ended and walk.fires[-1] <= now):
            # Nothing walked yet, or only before `now`: walk from `now`, not up to it.
            walk = _Walk(origin=now, fires=(), ended=False)
        first = bisect_right(walk.fires, now)
        known, ended = list(walk.fires), walk.ended
        cursor = known[-1] if known else walk.origin
        while len(known) - first < SAMPLE_FIRES and not ended:
            upcoming = next_fire(spec, anchor=now, after=cursor)
            if upcoming is None:
                ended = True
            else:
                known.append(upcoming)
                cursor = upcoming
        origin = max(walk.origin, now - _KEEP_BEHIND)
        kept = tuple(known[bisect_right(known, origin):])
        self._walks[key] = _Walk(origin=origin, fires=kept, ended=ended)
        while len(self._walks) > self._kept:
            self._walks.popitem(last=False)  # the schedule used longest ago
        return known[first:first + SAMPLE_FIRES]
