"""The local activity that reads a task's calendars for its workflow: their excluded dates,
as the database holds them when the workflow plans a fire (the history records the answer)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel, Field
from sqlalchemy import Engine
from temporalio import activity

from scheduling.calendars import CalendarChanges, CalendarDates
from store.calendars import calendar_changes, calendar_dates

CALENDAR_DATES = "calendar_dates"  # workflow runs of releases before CALENDARS_CHANGED
CALENDAR_CHANGES = "calendar_changes"
# A pass waits for the answer; past this it goes on with the dates it read last.
CALENDAR_DATES_TIMEOUT = timedelta(seconds=5)


class CalendarDatesRequest(BaseModel):
    """Which of a tenant's calendars, over which years."""

    tenant_id: str
    calendar_ids: list[str]
    years: list[int] = Field(default_factory=list)


class CalendarChangesRequest(CalendarDatesRequest):
    """The same, with the version of each calendar whose dates the workflow holds."""

    have: dict[str, str] = Field(default_factory=dict)


class CalendarActivities:
    """Reads calendars for the task workflows (a local activity of the workflows worker)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @activity.defn(name=CALENDAR_DATES)
    async def calendar_dates(self, request: CalendarDatesRequest) -> list[CalendarDates]:
        """The excluded dates of the tenant's calendars in the years asked; a calendar gone or
        of another tenant excludes nothing."""
        return await asyncio.to_thread(calendar_dates, self._engine, request.tenant_id,
                                       request.calendar_ids, request.years)

    @activity.defn(name=CALENDAR_CHANGES)
    async def calendar_changes(self, request: CalendarChangesRequest) -> CalendarChanges:
        """The dates of the calendars changed since the versions the workflow holds, and the
        ids of those unchanged: a history records the dates of a version once."""
        return await asyncio.to_thread(calendar_changes, self._engine, request.tenant_id,
                                       request.calendar_ids, request.years, request.have)
