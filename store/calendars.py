"""Queries on the tenants' calendars; every one is scoped by tenant."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime

from sqlalchemy import Engine, String, cast, delete, func, or_, tuple_
from sqlalchemy.orm import Session
from sqlmodel import col, select

from scheduling.calendars import (
    HOLIDAYS_RELEASE,
    CalendarChanges,
    CalendarDates,
    HolidaySource,
    holiday_dates,
)
from scheduling.status import FINAL_STATUSES
from store.cursors import decode_cursor, encode_cursor
from store.models import Calendar, Task


def add_calendar(engine: Engine, row: Calendar) -> Calendar:
    """Store a new calendar and return it as stored."""
    with Session(engine, expire_on_commit=False) as session:
        session.add(row)
        session.commit()
        return row


def read_calendar(engine: Engine, tenant_id: str, calendar_id: str, *,
                  deleted: bool = False) -> Calendar | None:
    """The tenant's calendar, or None (another tenant's calendar is none of its own; a
    deleted one is none, unless ``deleted``)."""
    with Session(engine, expire_on_commit=False) as session:
        row = session.get(Calendar, calendar_id)
    if row is None or row.tenant_id != tenant_id or (row.deleted_at is not None and not deleted):
        return None
    return row


def list_calendars(engine: Engine, tenant_id: str, *, limit: int,
                   cursor: str | None = None) -> tuple[list[Calendar], str | None]:
    """The tenant's calendars newest first, and the cursor of the next page (None at the end)."""
    query = select(Calendar).where(Calendar.tenant_id == tenant_id,
                                   col(Calendar.deleted_at).is_(None))
    if cursor is not None:
        query = query.where(tuple_(col(Calendar.created_at), col(Calendar.id)) < decode_cursor(cursor))
    query = query.order_by(col(Calendar.created_at).desc(), col(Calendar.id).desc()).limit(limit + 1)
    with Session(engine, expire_on_commit=False) as session:
        rows = list(session.scalars(query))
    more = len(rows) > limit and limit > 0
    last = rows[limit - 1] if more else None
    return rows[:limit], encode_cursor(last.created_at, last.id) if last else None


def replace_calendar(engine: Engine, tenant_id: str, calendar_id: str, *, name: str,
                     dates: list[str], holidays: dict[str, str | None] | None,
                     now: datetime) -> Calendar | None:
    """Give the tenant's calendar new contents; None when it has no such calendar."""
    with Session(engine, expire_on_commit=False) as session:
        row = session.get(Calendar, calendar_id)
        if row is None or row.tenant_id != tenant_id or row.deleted_at is not None:
            return None
        row.name, row.dates, row.holidays, row.updated_at = name, dates, holidays, now
        session.add(row)
        session.commit()
        return row


# Calendars one query looks for (SQLite nests each OR one level deeper, up to 1,000).
_NAMED_AT_ONCE = 100


def tasks_using(engine: Engine, tenant_id: str, calendar_id: str) -> list[str]:
    """The ids of the tenant's tasks not yet ended that exclude this calendar."""
    return _excluding(engine, tenant_id, [calendar_id]).get(calendar_id, [])


def _excluding(engine: Engine, tenant_id: str, calendar_ids: list[str]) -> dict[str, list[str]]:
    """Of these calendars, those the tenant's tasks not yet ended exclude, each with those
    tasks' ids. The database passes on only the specs whose text names one of them (a body may
    name one too: each is then read), not every spec of the tenant's tasks."""
    ended = [status.value for status in FINAL_STATUSES]
    text = cast(Task.spec, String)
    users: dict[str, list[str]] = {}
    for start in range(0, len(calendar_ids), _NAMED_AT_ONCE):
        some = calendar_ids[start:start + _NAMED_AT_ONCE]
        query = (select(Task.id, Task.spec)
                 .where(Task.tenant_id == tenant_id, col(Task.status).not_in(ended),
                        or_(*(text.contains(calendar_id, autoescape=True) for calendar_id in some)))
                 .order_by(col(Task.id)))
        with Session(engine) as session:
            rows = session.execute(query).all()
        for task_id, spec in rows:
            for ref in (spec or {}).get("exclude_calendars") or []:
                if (calendar_id := ref.get("calendar_id")) in some:
                    users.setdefault(calendar_id, []).append(task_id)
    return users


def calendars_held(engine: Engine, tenant_id: str, *, purge_deleted_before: datetime) -> int:
    """How many calendars the tenant holds, once those deleted before ``purge_deleted_before``
    that no task not yet ended excludes are removed (a task created as its calendar was deleted
    still reads the dates: see delete_calendar)."""
    with Session(engine) as session:
        deleted = list(session.scalars(select(Calendar.id).where(
            Calendar.tenant_id == tenant_id, col(Calendar.deleted_at) < purge_deleted_before)))
        gone = set(deleted) - set(_excluding(engine, tenant_id, deleted))
        if gone:
            session.execute(delete(Calendar).where(col(Calendar.tenant_id) == tenant_id,
                                                   col(Calendar.id).in_(gone)))
            session.commit()
        return session.scalar(select(func.count()).select_from(Calendar).where(
            Calendar.tenant_id == tenant_id)) or 0


def delete_calendar(engine: Engine, tenant_id: str, calendar_id: str, *, now: datetime) -> bool:
    """Delete the tenant's calendar; False when it has no such calendar. The row stays, marked:
    a task whose create or update checked the calendar just before still skips its dates."""
    with Session(engine) as session:
        row = session.get(Calendar, calendar_id)
        if row is None or row.tenant_id != tenant_id or row.deleted_at is not None:
            return False
        row.deleted_at = now
        session.add(row)
        session.commit()
        return True


def calendar_dates(engine: Engine, tenant_id: str, calendar_ids: Sequence[str],
                   years: Iterable[int]) -> list[CalendarDates]:
    """The excluded dates of the tenant's calendars: their own, and their public holidays in
    ``years``, deleted ones' too (delete_calendar). A calendar that is not there (or is
    another tenant's) excludes nothing."""
    return calendar_changes(engine, tenant_id, calendar_ids, years, {}).changed


def calendar_changes(engine: Engine, tenant_id: str, calendar_ids: Sequence[str],
                     years: Iterable[int], have: Mapping[str, str]) -> CalendarChanges:
    """As calendar_dates, but a calendar whose version is the one in ``have`` comes back as
    kept, without its dates.

    A task's workflow asks before every fire, and calendars change seldom: each calendar's
    dates are worked out once per version, then read from memory."""
    wanted = tuple(sorted(set(years)))
    with Session(engine) as session:
        heads = session.execute(select(Calendar.id, Calendar.updated_at).where(
            Calendar.tenant_id == tenant_id, col(Calendar.id).in_(list(calendar_ids)))).all()
        versions = {calendar_id: _version(updated_at, wanted) for calendar_id, updated_at in heads}
        kept = [calendar_id for calendar_id, version in versions.items()
                if have.get(calendar_id) == version]
        # This read's answer, whatever the shared memory drops meanwhile.
        known = {calendar_id: _DATES.get((calendar_id, version))
                 for calendar_id, version in versions.items() if calendar_id not in kept}
        missing = [calendar_id for calendar_id, dates in known.items() if dates is None]
        rows = list(session.scalars(select(Calendar).where(
            Calendar.tenant_id == tenant_id, col(Calendar.id).in_(missing)))) if missing else []
    for row in rows:
        days = {date.fromisoformat(text) for text in row.dates}
        if row.holidays:
            days |= holiday_dates(HolidaySource.model_validate(row.holidays), wanted)
        known[row.id] = worked_out = sorted(days)
        _DATES.put((row.id, versions[row.id]), worked_out)
    changed = [CalendarDates(calendar_id=calendar_id, dates=dates, version=versions[calendar_id])
               for calendar_id, dates in known.items() if dates is not None]
    return CalendarChanges(changed=changed, kept=kept)


def _version(updated_at: datetime, years: tuple[int, ...]) -> str:
    """A calendar's version with what its holidays come from: the years its dates cover and
    the holiday data (a worker with newer data sends the dates again)."""
    return f"{updated_at.isoformat()} {','.join(map(str, years))} {HOLIDAYS_RELEASE}"


class _Kept:
    """The dates of the calendars read last, by calendar and version (LRU, threadsafe:
    the reads run on threads)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[str, str], list[date]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> list[date] | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], dates: list[date]) -> None:
        with self._lock:
            self._kept[key] = dates
            self._kept.move_to_end(key)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


# A few hundred calendars' dates: at most 2,000 own dates and the holidays of the years each.
_DATES = _Kept(512)
