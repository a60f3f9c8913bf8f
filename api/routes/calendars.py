"""The calendar endpoints: a tenant's calendars of excluded dates, which tasks name in
``exclude_calendars``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response, status

from api.calendars import CALENDAR_EXAMPLE, CalendarBody, CalendarOut, CalendarPage, CalendarService
from api.cursors import CursorQuery
from api.ratelimit import ReaderDep, WriterDep
from api.routes.common import ERRORS
from api.schemas import problem_responses
from scheduling.bounds import Text

router = APIRouter(tags=["calendars"])

CalendarIdPath = Annotated[Text, Path(min_length=1, max_length=64, description="the calendar id")]
CalendarBodyDep = Annotated[CalendarBody, Body(openapi_examples={
    "holidays and dates": {"summary": "Bavarian public holidays and two days off",
                           "value": CALENDAR_EXAMPLE},
    "dates only": {"summary": "company shutdown days",
                   "value": {"name": "shutdown", "dates": ["2026-12-28", "2026-12-29"]}},
})]
DELETE_RESPONSES = {**ERRORS, **problem_responses({409: "tasks not yet ended exclude the calendar"})}
CREATE_RESPONSES = {**ERRORS, **problem_responses({
    403: "the tenant holds as many calendars as it may (deleted ones count until purged)"})}


async def _service(request: Request) -> CalendarService:
    service: CalendarService = request.app.state.calendars
    return service


CalendarsDep = Annotated[CalendarService, Depends(_service)]


@router.post("/calendars", status_code=status.HTTP_201_CREATED, responses=CREATE_RESPONSES)
async def create_calendar(body: CalendarBodyDep, who: WriterDep, calendars: CalendarsDep) -> CalendarOut:
    """Create a calendar of excluded dates (its own, and a country's public holidays)."""
    return await calendars.create(who.tenant_id, body)


@router.get("/calendars", responses=ERRORS)
async def list_calendars(
    who: ReaderDep, calendars: CalendarsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50, cursor: CursorQuery = None,
) -> CalendarPage:
    """The tenant's calendars newest first, with a cursor for the next page."""
    return await calendars.list(who.tenant_id, limit=limit, cursor=cursor)


@router.get("/calendars/{calendar_id}", responses=ERRORS)
async def get_calendar(calendar_id: CalendarIdPath, who: ReaderDep, calendars: CalendarsDep) -> CalendarOut:
    """One calendar of the tenant (404 for another tenant's)."""
    return await calendars.get(who.tenant_id, calendar_id)


@router.put("/calendars/{calendar_id}", responses=ERRORS)
async def replace_calendar(calendar_id: CalendarIdPath, body: CalendarBodyDep, who: WriterDep,
                           calendars: CalendarsDep) -> CalendarOut:
    """Replace a calendar's name, dates and holidays; its tasks use them from their next fire."""
    return await calendars.replace(who.tenant_id, calendar_id, body)


@router.delete("/calendars/{calendar_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses=DELETE_RESPONSES)
async def delete_calendar(calendar_id: CalendarIdPath, who: WriterDep,
                          calendars: CalendarsDep) -> Response:
    """Delete a calendar; refused (409, naming them) while tasks not yet ended exclude it."""
    await calendars.delete(who.tenant_id, calendar_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
