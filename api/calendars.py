"""A tenant's calendars over the API: the bodies, and the service between routes and store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import Engine

from api.compute import FireMath
from api.cursors import NextCursor
from api.database import in_thread
from api.errors import ApiError, InvalidTask, NotFound, QuotaExceeded
from scheduling import policy
from scheduling.bounds import Text
from scheduling.calendars import (
    MAX_CALENDAR_DATES,
    MAX_TENANT_CALENDARS,
    CalendarPlan,
    HolidaySource,
    check_holidays,
)
from scheduling.preview import PreviewFire, SkipRule, upcoming, upcoming_of_new
from scheduling.spec import ScheduleType, TaskChanges, TaskSpec
from scheduling.status import SkipReason
from store.calendars import (
    add_calendar,
    calendar_dates,
    calendars_held,
    delete_calendar,
    list_calendars,
    read_calendar,
    replace_calendar,
    tasks_using,
)
from store.models import Calendar
from workflows.state import TaskState

CALENDAR_EXAMPLE: dict[str, Any] = {
    "name": "Bavarian business days", "dates": ["2026-12-24", "2026-12-31"],
    "holidays": {"country": "DE", "subdivision": "BY"},
}
CALENDAR_OUT_EXAMPLE: dict[str, Any] = {
    "calendar_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", **CALENDAR_EXAMPLE,
    "created_at": "2026-12-05T09:00:00Z", "updated_at": "2026-12-05T09:00:00Z",
}


# A schedule's fires from where it stands, under a skip rule or none.
FiresOf = Callable[[SkipRule | None], list[PreviewFire]]
# A task's fires checked against its calendars (a year of daily ones): a schedule with more
# is not judged.
CHECKED_FIRES = 366


# A deleted calendar stays (a task created as it was deleted still reads its dates) until this
# long after its delete, when no task not yet ended excludes it: then a create purges it.
PURGE_DELETED_AFTER = timedelta(hours=1)


class CalendarInUse(ApiError):
    status, slug, title = 409, "calendar-in-use", "Calendar is used by tasks"


async def calendar_plan(engine: Engine, tenant_id: str, spec: TaskSpec,
                        fires: Sequence[datetime]) -> CalendarPlan | None:
    """The task's calendars with their dates over the years of ``fires`` and the next (where
    a shifted fire may land), read now as the workflow reads them; None when it names none."""
    refs = spec.exclude_calendars
    if not refs or not fires:
        return None
    zone = spec.zone()
    years = sorted({y for fire in fires
                    for y in (fire.astimezone(zone).year, fire.astimezone(zone).year + 1)})
    dates = await in_thread(calendar_dates, engine, tenant_id, [ref.calendar_id for ref in refs],
                            years)
    return CalendarPlan.of(refs, dates, zone)


def judged(spec: TaskSpec) -> bool:
    """Whether the calendars of a task are checked for leaving it a fire: it names some, and
    its schedule has a last fire (one time, dates, an end_date or max_runs)."""
    return bool(spec.exclude_calendars) and (
        spec.schedule_type in (ScheduleType.ONCE, ScheduleType.DATES)
        or spec.end_date is not None or spec.max_runs is not None)


def judged_again(old: TaskSpec, new: TaskSpec) -> bool:
    """Whether a change from ``old`` to ``new`` has its calendars checked (check_change): it
    changes them or the schedule, and ``new`` is judged."""
    return judged(new) and (new.exclude_calendars != old.exclude_calendars
                            or bool(policy.schedule_changes(old, new)))


def by_calendar(position: policy.Position) -> SkipRule:
    """A preview's skip rule of a task's calendars: the workflow's own verdict."""
    def rule(fire: datetime) -> str | None:
        return SkipReason.CALENDAR.value if position.verdict(fire).excluded else None
    return rule


def _iso_date(value: Any) -> Any:
    # A number or an instant is no calendar date: say what is expected.
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if not isinstance(value, str) or len(value) != 10:
        raise ValueError("must be a date, YYYY-MM-DD, e.g. 2026-12-25")
    return value


Day = Annotated[date, BeforeValidator(_iso_date)]


class CalendarBody(BaseModel):
    """A calendar: its own excluded dates and, optionally, a country's public holidays."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [CALENDAR_EXAMPLE]})

    name: Text = Field(min_length=1, max_length=200)
    dates: list[Day] = Field(default_factory=list, max_length=MAX_CALENDAR_DATES,
                             description="excluded dates, YYYY-MM-DD")
    holidays: HolidaySource | None = Field(
        default=None, description="public holidays of a country (ISO 3166-1 alpha-2) and "
        "optionally a subdivision, from the holidays package")

    @field_validator("holidays")
    @classmethod
    def _known_place(cls, value: HolidaySource | None) -> HolidaySource | None:
        if value is not None:
            check_holidays(value)
        return value


class CalendarOut(CalendarBody):
    """A calendar as the API shows it."""

    model_config = ConfigDict(json_schema_extra={"examples": [CALENDAR_OUT_EXAMPLE]})

    calendar_id: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Calendar) -> CalendarOut:
        return cls(calendar_id=row.id, name=row.name, dates=row.dates,
                   holidays=HolidaySource.model_validate(row.holidays) if row.holidays else None,
                   created_at=row.created_at, updated_at=row.updated_at)


class CalendarPage(BaseModel):
    """One page of calendars, newest first."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"items": [CALENDAR_OUT_EXAMPLE], "next_cursor": None}]})

    items: list[CalendarOut]
    next_cursor: NextCursor


def _stored(body: CalendarBody) -> dict[str, Any]:
    return {"name": body.name, "dates": sorted({d.isoformat() for d in body.dates}),
            "holidays": body.holidays.model_dump() if body.holidays else None}


Named = list[tuple[str, str, bool]]


class CalendarService:
    """What the calendar endpoints do; every call is scoped by the caller's tenant."""

    def __init__(self, engine: Engine, fire_math: FireMath) -> None:
        self._engine = engine
        # A check lists up to CHECKED_FIRES fires, which a sparse cron makes costly: the
        # tenant's CPU budget pays for them, as for a preview (api/compute.py).
        self._fire_math = fire_math

    async def create(self, tenant_id: str, body: CalendarBody) -> CalendarOut:
        """Store a new calendar, within the tenant's MAX_TENANT_CALENDARS (403 past it)."""
        now = datetime.now(UTC)
        held = await in_thread(calendars_held, self._engine, tenant_id,
                               purge_deleted_before=now - PURGE_DELETED_AFTER)
        if held >= MAX_TENANT_CALENDARS:
            raise QuotaExceeded(
                f"tenant {tenant_id} holds {held} calendars, the most a tenant may: delete some "
                f"first (a deleted one counts until it is purged, "
                f"{PURGE_DELETED_AFTER.total_seconds() / 3600:g} h after its delete)")
        row = Calendar(id=uuid.uuid4().hex, tenant_id=tenant_id, created_at=now, updated_at=now,
                       **_stored(body))
        return CalendarOut.of(await in_thread(add_calendar, self._engine, row))

    async def get(self, tenant_id: str, calendar_id: str) -> CalendarOut:
        """The tenant's calendar (404 for anyone else's)."""
        row = await in_thread(read_calendar, self._engine, tenant_id, calendar_id)
        if row is None:
            raise NotFound(f"no calendar {calendar_id}")
        return CalendarOut.of(row)

    async def list(self, tenant_id: str, *, limit: int, cursor: str | None) -> CalendarPage:
        """The tenant's calendars newest first, with a cursor for the next page."""
        try:
            rows, next_cursor = await in_thread(list_calendars, self._engine, tenant_id,
                                                limit=limit, cursor=cursor)
        except ValueError as exc:
            raise InvalidTask(f"cursor: {exc}", field="cursor") from exc
        return CalendarPage(items=[CalendarOut.of(r) for r in rows], next_cursor=next_cursor)

    async def replace(self, tenant_id: str, calendar_id: str, body: CalendarBody) -> CalendarOut:
        """New contents for the tenant's calendar; its tasks use them from their next fire on."""
        row = await in_thread(replace_calendar, self._engine, tenant_id, calendar_id,
                              now=datetime.now(UTC), **_stored(body))
        if row is None:
            raise NotFound(f"no calendar {calendar_id}")
        return CalendarOut.of(row)

    async def delete(self, tenant_id: str, calendar_id: str) -> None:
        """Delete the tenant's calendar, unless a task not yet ended excludes it (409)."""
        await self.get(tenant_id, calendar_id)
        users = await in_thread(tasks_using, self._engine, tenant_id, calendar_id)
        if users:
            shown = ", ".join(users[:20]) + (" ..." if len(users) > 20 else "")
            raise CalendarInUse(f"calendar {calendar_id} is excluded by {len(users)} tasks not yet "
                                f"ended ({shown}); remove it from them first")
        if not await in_thread(delete_calendar, self._engine, tenant_id, calendar_id,
                               now=datetime.now(UTC)):
            raise NotFound(f"no calendar {calendar_id}")

    async def named(self, tenant_id: str, schedule: dict[str, Any]) -> Named:
        """A task's calendars as (id, name, shift) for its page, a deleted one named so; one not
        there at all (deleted before deleted calendars were kept) is named "?"."""
        named: Named = []
        for ref in schedule.get("exclude_calendars") or []:
            row = await in_thread(read_calendar, self._engine, tenant_id, ref["calendar_id"],
                                  deleted=True)
            name = "?" if row is None else row.name + (" (deleted)" if row.deleted_at else "")
            named.append((ref["calendar_id"], name, bool(ref.get("shift"))))
        return named

    async def check_runs(self, tenant_id: str, spec: TaskSpec, now: datetime) -> None:
        """422 when the calendars exclude every fire of a new task's schedule: it would run
        nothing."""
        await self._check(tenant_id, spec, now,
                          lambda skip: upcoming_of_new(spec, now, CHECKED_FIRES, skip=skip))

    async def check_change(self, tenant_id: str, changes: TaskChanges, state: TaskState,
                           now: datetime, *, payer: str | None = None) -> None:
        """422 when the calendars exclude every fire ``changes`` leave the task, as the
        workflow applies them to its spec and re-plans it, and nothing of it is in flight or
        queued. ``payer``: whose CPU budget lists the fires (the task's tenant by default)."""
        if state.running or state.queue:
            return
        try:
            spec = changes.apply_to(state.spec)  # the row may lag the workflow
        except ValidationError:
            return  # the workflow's own validator answers it
        change = policy.change_schedule(state.position(), policy.Flight(), spec, now)
        await self._check(tenant_id, spec, change.anchor, lambda skip: upcoming(
            spec, task_id=state.task_id, first=change.next_fire_at, anchor=change.anchor,
            limit=CHECKED_FIRES, runs_left=state.runs_left(spec), skip=skip), payer=payer)

    async def _check(self, tenant_id: str, spec: TaskSpec, anchor: datetime,
                     fires_of: FiresOf, *, payer: str | None = None) -> None:
        """A schedule without a last fire, or with more than CHECKED_FIRES, is not judged. The
        fires are worked out off the event loop, on the tenant's CPU budget (429 once spent)."""
        if not judged(spec):
            return
        payer = payer or tenant_id
        fires = await self._fire_math.charged(payer, fires_of, None)
        if not fires or len(fires) >= CHECKED_FIRES:
            return
        plan = await calendar_plan(self._engine, tenant_id, spec, [f.scheduled_at for f in fires])
        if plan is None:
            return
        position = policy.Position(spec=spec, task_id="", anchor=anchor, next_fire_at=None,
                                   calendar=plan)
        fires = await self._fire_math.charged(payer, fires_of, by_calendar(position))
        if len(fires) >= CHECKED_FIRES or any(f.skipped is None for f in fires):
            return
        first = fires[0].scheduled_at.astimezone(spec.zone()).date()
        which = position.verdict(fires[0].scheduled_at).calendar_id
        many = f"all {len(fires)} fires of the schedule fall" if len(fires) > 1 else "its fire falls"
        raise InvalidTask(f"exclude_calendars: {many} on excluded dates (the first, {first}, "
                          f"in calendar {which}); nothing to run", field="exclude_calendars")

    async def check_refs(self, tenant_id: str, spec: TaskSpec, *, before: TaskSpec | None = None) -> None:
        """404 naming the first calendar of ``exclude_calendars`` the tenant does not have (of
        those ``before``, the task's spec, does not name: one deleted since stays)."""
        kept = {ref.calendar_id for ref in before.exclude_calendars} if before is not None else set()
        for i, ref in enumerate(spec.exclude_calendars):
            if ref.calendar_id not in kept and await in_thread(read_calendar, self._engine, tenant_id, ref.calendar_id) is None:
                raise NotFound(f"exclude_calendars[{i}].calendar_id: no calendar {ref.calendar_id}",
                               field=f"exclude_calendars.{i}.calendar_id")
