"""Backfill: the past instants of a task's schedule in a range, and which of them to run again.

Pure: the fire math is the workflow's own (``scheduling.fire``), and the rows' statuses and
the clock are arguments.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from enum import StrEnum

from scheduling.calendars import Verdict
from scheduling.fire import next_fire
from scheduling.policy import is_fixed_delay
from scheduling.spec import ScheduleType, TaskSpec
from scheduling.status import DeadLetter, ExecutionStatus, SkipReason

# Instants in one backfill request's range, at most.
MAX_BACKFILL_INSTANTS = 1000


class BackfillMode(StrEnum):
    """Which instants of the range run again."""

    MISSING = "missing"  # never executed: no row, or a SKIPPED one
    FAILED = "failed"  # FAILED, or dead-lettered
    ALL = "all"  # every instant (but one running now)


class BackfillAction(StrEnum):
    """What a backfill does with one instant."""

    RUN = "run"
    KEEP = "keep"  # the row stays as it is


class BadRange(ValueError):
    """A range that cannot be backfilled; the message says why."""


class NoPastInstants(BadRange):
    """The task's schedule has no instants to backfill, whatever the range."""


def instants_between(spec: TaskSpec, anchor: datetime, start: datetime, end: datetime,
                     now: datetime) -> list[datetime]:
    """The fires of the task's schedule in [start, end), oldest first, computed as the
    workflow computes them; refuses a range that is empty, reaches the future, or holds more
    than MAX_BACKFILL_INSTANTS."""
    if start >= end:
        raise BadRange("start must be before end")
    if end > now:
        raise BadRange("end must not be in the future: a backfill runs past instants only")
    if is_fixed_delay(spec):
        raise NoPastInstants("a fixed_delay schedule plans each fire after the run before it: "
                       "it has no past instants to backfill")
    if spec.schedule_type is ScheduleType.ONCE:
        return [spec.run_at] if spec.run_at is not None and start <= spec.run_at < end else []
    after = start - timedelta(microseconds=1)
    if spec.schedule_type is ScheduleType.INTERVAL and spec.start_date is None:
        after = max(after, anchor)  # counted from the anchor: its first fire is one step after
    fires: list[datetime] = []
    fire = next_fire(spec, anchor=anchor, after=after)
    while fire is not None and fire < end:
        if len(fires) == MAX_BACKFILL_INSTANTS:
            raise BadRange(f"the range holds more than {MAX_BACKFILL_INSTANTS} instants of the "
                           "schedule: backfill a shorter range at a time")
        fires.append(fire)
        fire = next_fire(spec, anchor=anchor, after=fire)
    return fires


def action(mode: BackfillMode, status: str | None, dead_letter: str | None) -> BackfillAction:
    """Run an instant again or keep its row, by mode and by the row it has (None: no row).
    An instant running now is always kept."""
    if status == ExecutionStatus.RUNNING:
        return BackfillAction.KEEP
    wanted = {
        BackfillMode.MISSING: status is None or status == ExecutionStatus.SKIPPED,
        BackfillMode.FAILED: status == ExecutionStatus.FAILED or dead_letter == DeadLetter.OPEN,
        BackfillMode.ALL: True,
    }[mode]
    return BackfillAction.RUN if wanted else BackfillAction.KEEP


def earlier_result(status: str | None, reason: str | None, error: str | None) -> str | None:
    """What a re-run instant's row said before, kept in its ``reason`` once the backfill ran."""
    if status is None:
        return None
    why = reason or error
    return (f"backfilled; before: {status}" + (f" ({why})" if why else ""))[:480]


# Why a backfill keeps an instant it would otherwise run (the answer's ``reason``).
UNDECIDED = ("the workflow has not decided this instant yet (due, queued or in flight): "
             "the schedule and its missed-run policy run it, not the backfill")


def undecided(fire: datetime, run_id: str, next_fire_at: datetime | None,
              held: Collection[datetime | str]) -> bool:
    """The workflow has still to decide ``fire`` itself: it is at or after the next fire, or
    queued, waiting or in flight (``held``: their fires and execution ids)."""
    return (next_fire_at is not None and fire >= next_fire_at) or fire in held or run_id in held


def calendar_keeps(verdict: Verdict, status: str | None, reason: str | None) -> str | None:
    """Why a ``missing`` backfill keeps an instant of an excluded date, or None: its row says
    SKIPPED ``calendar``, or the task's calendars exclude its date now (``calendar_verdict``)."""
    if status == ExecutionStatus.SKIPPED and reason == SkipReason.CALENDAR:
        return "skipped by the task's calendars: an excluded date is not missing"
    if verdict.excluded:
        return f"on a date calendar {verdict.calendar_id} excludes: not missing"
    return None
