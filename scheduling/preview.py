"""A task's upcoming fires and its schedule in words, from the very functions the workflow uses
(``scheduling.fire`` for the times, ``policy.instant_of`` for the jitter, ``scheduling.cron`` for
daylight saving), so a preview shows what will run. Pure: times are arguments."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from cron_descriptor import ExpressionDescriptor, Options  # type: ignore[import-untyped]
from pydantic import BaseModel, Field, ValidationError

from scheduling.cron import dst_note, missing_walls
from scheduling.fire import first_fire, next_fire
from scheduling.policy import instant_of
from scheduling.spec import DstGap, IntervalMode, ScheduleType, TaskSpec

MAX_PREVIEW = 1000
DEFAULT_PREVIEW = 10
# Why a fire will not run although the schedule has it (a calendar's exclusion, ...): None runs.
SkipRule = Callable[[datetime], str | None]


class PreviewFire(BaseModel):
    """One fire of a schedule, as it will happen."""

    scheduled_at: datetime = Field(description="the fire time, UTC; the run's execution id names it")
    instant: datetime | None = Field(description="when it runs: the fire time plus the task's jitter, "
                                     "UTC; null when the jitter is only known once the task has an id")
    local: str = Field(description="the fire time in the task's time zone, ISO 8601 with its offset")
    note: str | None = Field(default=None, description="what daylight saving time, or a "
                             "calendar that moves it, did to it")
    skipped: str | None = Field(default=None, description="why it will not run, when it will not "
                                "(it is then recorded SKIPPED with this reason)")


def upcoming(
    spec: TaskSpec, *, task_id: str | None, first: datetime | None, anchor: datetime, limit: int,
    runs_left: int | None = None, skip: SkipRule | None = None,
) -> list[PreviewFire]:
    """The fires from ``first`` on, at most ``limit``, ending with the schedule or ``max_runs``.

    ``anchor`` counts a fixed-rate interval as the workflow does; a fixed-delay interval is shown
    as if each run took no time. A fire ``skip`` names a reason for is listed but not counted
    against ``runs_left`` (skipped fires are not runs)."""
    fires: list[PreviewFire] = []
    fire, left = first, runs_left
    while fire is not None and len(fires) < limit and (left is None or left > 0):
        entry = _entry(spec, task_id, fire)
        entry.skipped = skip(fire) if skip is not None else None
        if entry.skipped is None and left is not None:
            left -= 1
        fires.append(entry)
        fire = next_fire(spec, anchor=anchor, after=fire)
    return fires


def upcoming_of_new(spec: TaskSpec, now: datetime, limit: int, *, task_id: str | None = None,
                    skip: SkipRule | None = None) -> list[PreviewFire]:
    """The fires of ``spec`` if it were created at ``now`` (under ``task_id``, when known)."""
    return upcoming(spec, task_id=task_id, first=first_fire(spec, now), anchor=now, limit=limit,
                    runs_left=spec.max_runs, skip=skip)


def _dst_note(spec: TaskSpec, fire: datetime) -> str | None:
    """What daylight saving time does to a fire of a cron schedule."""
    if spec.schedule_type is ScheduleType.CRON and spec.cron is not None:
        return dst_note(spec.cron, spec.zone(), fire, spec.dst_policy)
    return None


def _entry(spec: TaskSpec, task_id: str | None, fire: datetime) -> PreviewFire:
    if task_id is not None:
        instant: datetime | None = instant_of(spec, task_id, fire, spec.jitter_seconds)
    else:
        instant = fire if spec.jitter_seconds <= 0 else None
    return PreviewFire(scheduled_at=fire, instant=instant,
                       local=fire.astimezone(spec.zone()).isoformat(), note=_dst_note(spec, fire))


def describe_stored(spec: dict[str, Any]) -> str | None:
    """The words of a stored spec's schedule; None if it no longer reads as a task."""
    try:
        return describe(TaskSpec.model_validate(spec))
    except ValidationError:
        return None


def describe(spec: TaskSpec) -> str:
    """The schedule in words: "At 10:00, every day, in Europe/Berlin"."""
    zone = spec.timezone
    if spec.schedule_type is ScheduleType.ONCE:
        assert spec.run_at is not None
        text = f"Once, at {spec.run_at.astimezone(spec.zone()).isoformat()} ({zone})"
    elif spec.schedule_type is ScheduleType.CRON:
        assert spec.cron is not None
        text = f"{describe_cron(spec.cron)}, in {zone}"
        if spec.dst_policy.gap is DstGap.SKIP:
            text += "; a time a daylight saving change skips does not run"
    elif spec.schedule_type is ScheduleType.INTERVAL and spec.interval_seconds is not None:
        every = _span(spec.interval_seconds)
        if spec.interval_mode is IntervalMode.FIXED_DELAY:
            text = f"{every} after the previous run finished"
        else:
            text = every
    else:
        text = f"A {spec.schedule_type.value} schedule"
    if spec.start_date is not None and spec.schedule_type is not ScheduleType.ONCE:
        text += f", from {spec.start_date.astimezone(spec.zone()).isoformat()}"
    if spec.end_date is not None:
        text += f", until {spec.end_date.astimezone(spec.zone()).isoformat()}"
    if spec.max_runs is not None:
        text += f", at most {spec.max_runs} run{'s' if spec.max_runs != 1 else ''}"
    return text


def describe_cron(expression: str) -> str:
    """A cron expression in words (24-hour clock), by cron-descriptor."""
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = True
    try:
        return str(ExpressionDescriptor(expression, options).get_description())
    except Exception:  # noqa: BLE001 - a form croniter takes and the describer does not: never fail a read
        return f"cron {expression}"


def _span(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"Every {unit}" if count == 1 else f"Every {count} {unit}s"
    return "Every second" if seconds == 1 else f"Every {seconds:g} seconds"


def schedule_warnings(spec: TaskSpec, fires: list[PreviewFire]) -> list[str]:
    """What a user should know before saving ``spec``, from the schedule alone."""
    warnings: list[str] = []
    if not fires:
        bound = (f"before end_date {spec.end_date.isoformat()}" if spec.end_date is not None
                 else "at all")
        warnings.append(f"the schedule never fires {bound}")
    # A note may also say that a calendar moves the fire (api/preview.py): only DST's count.
    noted = [fire for fire in fires if fire.note is not None and _dst_note(spec, fire.scheduled_at)]
    if noted:
        warnings.append(f"{len(noted)} of these fires fall in a daylight saving change "
                        f"(see their note; dst_policy decides what runs)")
    skipped = _skipped_by_gap(spec, fires)
    if skipped:
        walls = ", ".join(f"{wall:%Y-%m-%d %H:%M}" for wall in skipped[:3])
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        warnings.append(f"{walls}{more} do not exist in {spec.timezone}: no run then "
                        "(dst_policy.gap is skip)")
    if spec.jitter_seconds > 0 and any(fire.instant is None for fire in fires):
        warnings.append(f"jitter_seconds: each run starts up to {spec.jitter_seconds:g}s after its fire time; the "
                        "exact offset is fixed by the task id, known once the task is created")
    if spec.interval_mode is IntervalMode.FIXED_DELAY and spec.schedule_type is ScheduleType.INTERVAL:
        warnings.append("fixed_delay: each fire counts from when the run before it finished; "
                        "shown as if runs took no time")
    return warnings


def _skipped_by_gap(spec: TaskSpec, fires: list[PreviewFire]) -> list[datetime]:
    """The wall times a DST gap skips between the first and the last of ``fires``."""
    if spec.cron is None or spec.dst_policy.gap is not DstGap.SKIP or len(fires) < 2:
        return []
    return missing_walls(spec.cron, spec.zone(), fires[0].scheduled_at, fires[-1].scheduled_at)


def herd_warning(others: int, spec: TaskSpec) -> str | None:
    """A warning when other tasks of the tenant run at the same instants (None: no others)."""
    if others <= 0:
        return None
    advice = "" if spec.jitter_seconds > 0 else " (set jitter_seconds to spread them)"
    noun = "task" if others == 1 else "tasks"
    return f"{others} other {noun} of this tenant run next at one of these instants{advice}"


