"""The dates a task's workflow reads of its calendars before each fire, on SQLite and
PostgreSQL: worked out once per calendar version and read from memory after, never one
calendar fewer however full that memory is, and what a replaced or deleted calendar holds as
soon as it changes."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import Engine

from scheduling.calendars import holiday_dates
from store import calendars
from store.calendars import (
    add_calendar,
    calendar_changes,
    calendar_dates,
    delete_calendar,
    replace_calendar,
)
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
    # Its own dates of every year (a check that skips fires may walk past the years asked),
    # the public holidays of the years asked.
    assert {d for d in first[cid] if d.month == 6} == {date.fromisoformat(d) for d in days}
    assert date(2026, 12, 25) in first[cid] and date(2025, 12, 25) not in first[cid]
    assert _dates(any_engine, "t1", [cid], [2026, 2027]) == first  # read again: the same

    # A change counts at the next read, holidays and all.
    replace_calendar(any_engine, "t1", cid, name="c", dates=["2026-07-01"], holidays=None,
                     now=T0 + timedelta(minutes=1))
    assert _dates(any_engine, "t1", [cid], [2026, 2027]) == {cid: [date(2026, 7, 1)]}
    # A deleted calendar still excludes its dates (a task that took it just before its delete).
    assert delete_calendar(any_engine, "t1", cid, now=T0 + timedelta(minutes=2))
    assert _dates(any_engine, "t1", [cid], [2026]) == {cid: [date(2026, 7, 1)]}


def test_no_calendar_is_left_out_however_full_the_memory_of_dates_is(
    any_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A calendar whose dates the shared memory dropped between the two passes of a read was
    # left out of its answer: its excluded dates would run.
    monkeypatch.setattr(calendars, "_DATES", calendars._Kept(1))
    ids = [f"cal-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for n, cid in enumerate(ids):
        add_calendar(any_engine, Calendar(id=cid, tenant_id="t1", name=cid,
                                          dates=[f"2026-0{n + 1}-01"], created_at=T0, updated_at=T0))
    for _ in range(2):  # the second read finds one of the three in memory
        assert _dates(any_engine, "t1", ids, [2026]) == {
            cid: [date(2026, n + 1, 1)] for n, cid in enumerate(ids)}


def test_a_read_sends_the_dates_only_of_calendars_changed_since_the_versions_held(
    any_engine: Engine
) -> None:
    ids = [f"cal-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for n, cid in enumerate(ids):
        add_calendar(any_engine, Calendar(id=cid, tenant_id="t1", name=cid,
                                          dates=[f"2026-0{n + 1}-01"], created_at=T0, updated_at=T0))
    first = calendar_changes(any_engine, "t1", ids, [2026], {})
    assert first.kept == [] and {c.calendar_id for c in first.changed} == set(ids)
    held = first.applied_to([])
    have = {c.calendar_id: c.version or "" for c in held}

    again = calendar_changes(any_engine, "t1", ids, [2026], have)
    assert again.changed == [] and sorted(again.kept) == sorted(ids)
    assert again.applied_to(held) == held

    # An edit, other years, a calendar gone: each comes back as it is now.
    replace_calendar(any_engine, "t1", ids[0], name="c", dates=["2026-07-01"], holidays=None,
                     now=T0 + timedelta(minutes=1))
    edited = calendar_changes(any_engine, "t1", ids, [2026], have)
    assert [(c.calendar_id, c.dates) for c in edited.changed] == [(ids[0], [date(2026, 7, 1)])]
    assert sorted(edited.kept) == sorted(ids[1:])
    assert {c.calendar_id: c.dates for c in edited.applied_to(held)} == {
        ids[0]: [date(2026, 7, 1)], ids[1]: [date(2026, 2, 1)], ids[2]: [date(2026, 3, 1)]}
    assert {c.calendar_id for c in calendar_changes(any_engine, "t1", ids, [2026, 2027],
                                                    have).changed} == set(ids)
    # Another tenant holding the versions learns nothing of the calendars, and a calendar
    # no longer there excludes nothing, whatever version the workflow held.
    theirs = calendar_changes(any_engine, "t2", ids, [2026], have)
    assert theirs.changed == [] and theirs.kept == [] and theirs.applied_to(held) == []


def test_a_worker_with_other_holiday_data_sends_the_dates_again(
    any_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The versions a workflow held named only the calendar's edit and the years: a worker
    # upgraded to newer holiday data kept the old holidays in every running task, while the
    # preview, reading in full, showed the new ones.
    cid = f"cal-{uuid.uuid4().hex[:8]}"
    add_calendar(any_engine, Calendar(id=cid, tenant_id="t1", name="de", dates=[],
                                      holidays={"country": "DE"}, created_at=T0, updated_at=T0))
    held = calendar_changes(any_engine, "t1", [cid], [2026], {}).applied_to([])
    have = {c.calendar_id: c.version or "" for c in held}
    real = holiday_dates
    monkeypatch.setattr(calendars, "HOLIDAYS_RELEASE", "newer")
    monkeypatch.setattr(calendars, "holiday_dates", lambda source, years: real(source, years) | {date(2026, 12, 28)})
    full = calendar_dates(any_engine, "t1", [cid], [2026])
    merged = calendar_changes(any_engine, "t1", [cid], [2026], have).applied_to(held)
    assert [c.dates for c in merged] == [c.dates for c in full]
    assert date(2026, 12, 28) in full[0].dates
