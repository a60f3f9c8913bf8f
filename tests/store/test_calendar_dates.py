"""The dates a task's workflow reads of its calendars before each fire, on SQLite and
PostgreSQL: those of the years asked, worked out once per calendar version and read from
memory after, and what a replaced or deleted calendar holds as soon as it changes."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Engine

from store.calendars import add_calendar, calendar_dates, delete_calendar, replace_calendar
from store.models import Calendar

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _dates(engine: Engine, tenant: str, ids: list[str], years: list[int]) -> dict[str, list[date]]:
    return {found.calendar_id: found.dates for found in calendar_dates(engine, tenant, ids, years)}


def test_a_calendar_gives_the_dates_of_the_years_asked_and_each_change_at_once(
    any_engine: Engine
) -> None:
    cid, other = f"cal-{uuid.uuid4().hex[:8]}", f"cal-{uuid.uuid4().hex[:8]}"
    days = ["2025-06-01", "2026-06-01", "2027-06-01", "2031-06-01"]
    add_calendar(any_engine, Calendar(id=cid, tenant_id="t1", name="c", dates=days,
                                      holidays={"country": "DE", "subdivision": None},
                                      created_at=T0, updated_at=T0))
    add_calendar(any_engine, Calendar(id=other, tenant_id="t2", name="theirs", dates=days,
                                      created_at=T0, updated_at=T0))
    first = _dates(any_engine, "t1", [cid, other], [2026, 2027])
    assert set(first) == {cid}  # another tenant's calendar excludes nothing
    assert {d.year for d in first[cid]} == {2026, 2027}
    assert date(2026, 6, 1) in first[cid] and date(2027, 6, 1) in first[cid]
    assert date(2026, 12, 25) in first[cid]  # a public holiday of the year
    assert _dates(any_engine, "t1", [cid], [2026, 2027]) == first  # read again: the same

    # A change counts at the next read, holidays and all.
    replace_calendar(any_engine, "t1", cid, name="c", dates=["2026-07-01"], holidays=None,
                     now=T0 + timedelta(minutes=1))
    assert _dates(any_engine, "t1", [cid], [2026, 2027]) == {cid: [date(2026, 7, 1)]}
    assert _dates(any_engine, "t1", [cid], [2031]) == {cid: []}
    # A deleted calendar still excludes its dates (a task that took it just before its delete).
    assert delete_calendar(any_engine, "t1", cid, now=T0 + timedelta(minutes=2))
    assert _dates(any_engine, "t1", [cid], [2026]) == {cid: [date(2026, 7, 1)]}
