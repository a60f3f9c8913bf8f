"""Calendars of excluded dates, and the rule that says what becomes of a fire on one.

A calendar is a list of dates and, optionally, a country's public holidays (the ``holidays``
package). A task names calendars in ``exclude_calendars``; a fire whose date in the task's
zone is in one is skipped, or shifted to the next day none of them excludes, at the same
wall time (``shift``). Pure: the dates are arguments, nothing here reads a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import metadata
from zoneinfo import ZoneInfo

import holidays
from pydantic import BaseModel, ConfigDict, Field

from scheduling.bounds import Text

# How far a shifted fire may move: a calendar that excludes a whole year shifts nothing.
MAX_SHIFT_DAYS = 366
MAX_CALENDAR_DATES = 2000
MAX_TASK_CALENDARS = 10
# Calendars one tenant holds, deleted ones not yet purged included (store/calendars.py).
MAX_TENANT_CALENDARS = 1000


class CalendarRef(BaseModel):
    """One calendar a task excludes, and what a fire on one of its dates does."""

    model_config = ConfigDict(extra="forbid")

    calendar_id: Text = Field(min_length=1, max_length=64, examples=["5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4"])
    shift: bool = Field(default=False, description="run on the next day no excluded calendar "
                        "names, at the same wall time, instead of skipping (payroll)")


class HolidaySource(BaseModel):
    """Public holidays of a country (ISO 3166-1 alpha-2) and optionally one subdivision."""

    model_config = ConfigDict(extra="forbid")

    country: Text = Field(min_length=2, max_length=3, examples=["DE"])
    subdivision: Text | None = Field(default=None, min_length=1, max_length=10, examples=["BY"])


class CalendarDates(BaseModel):
    """A calendar's excluded dates over some years, as the workflow receives them."""

    calendar_id: str
    dates: list[date] = Field(default_factory=list)
    version: str | None = Field(default=None, description="the calendar's version and the years "
                                "its dates cover (None: read before versions were kept)")


class CalendarChanges(BaseModel):
    """A read of a task's calendars that sends only what changed since the versions its
    workflow holds: a workflow asks before every fire, and calendars change seldom."""

    changed: list[CalendarDates] = Field(default_factory=list,
                                         description="the calendars whose version differs")
    kept: list[str] = Field(default_factory=list,
                            description="the ids of the calendars held at their current version")

    def applied_to(self, held: Sequence[CalendarDates]) -> list[CalendarDates]:
        """The dates of every calendar there now: a kept one's as held, a changed one's as
        read (a calendar in neither list is not there and excludes nothing)."""
        kept = set(self.kept)
        return [c for c in held if c.calendar_id in kept] + self.changed


def check_holidays(source: HolidaySource) -> None:
    """Pass if the holidays package knows the country and subdivision; else ValueError."""
    holiday_dates(source, [2000])


# The holiday data holiday_dates answers from: a calendar's dates change with it.
HOLIDAYS_RELEASE = metadata.version("holidays")


def holiday_dates(source: HolidaySource, years: Iterable[int]) -> set[date]:
    """The public holidays of ``source`` in ``years`` (ValueError for an unknown place)."""
    try:
        found = holidays.country_holidays(source.country.upper(), subdiv=source.subdivision,
                                          years=list(years))
    except (NotImplementedError, LookupError, TypeError) as exc:
        raise ValueError(f"no public holidays known for {source.country!r}"
                         f"{f' subdivision {source.subdivision!r}' if source.subdivision else ''}: "
                         f"{exc}") from exc
    return set(found.keys())


@dataclass(frozen=True)
class Verdict:
    """What the calendars make of one fire: it runs as planned (``calendar_id`` None), is
    skipped, or runs at ``shifted_to`` instead."""

    calendar_id: str | None = None
    shifted_to: datetime | None = None

    @property
    def excluded(self) -> bool:
        return self.calendar_id is not None and self.shifted_to is None

    @property
    def shifted(self) -> bool:
        return self.shifted_to is not None


RUNS = Verdict()


@dataclass(frozen=True)
class CalendarPlan:
    """A task's calendars (in the order it names them) and their excluded dates."""

    refs: tuple[CalendarRef, ...]
    dates: Mapping[str, frozenset[date]]
    zone: ZoneInfo

    @classmethod
    def of(cls, refs: Sequence[CalendarRef], known: Sequence[CalendarDates],
           zone: ZoneInfo) -> CalendarPlan:
        """The plan from a task's references and the dates last read for them."""
        return cls(refs=tuple(refs), zone=zone,
                   dates={c.calendar_id: frozenset(c.dates) for c in known})

    def verdict(self, fire: datetime, following: datetime | None) -> Verdict:
        """What becomes of ``fire``: ``following`` is the schedule's next fire after it.

        The first calendar (in the task's order) whose dates hold the fire's date decides. A
        shifted fire moves to the next day none of the task's calendars excludes, at the same
        wall time; when the schedule fires again by then (a daily schedule), or no such day
        comes within MAX_SHIFT_DAYS, it is skipped: the schedule runs that day anyway."""
        local = fire.astimezone(self.zone)
        day = local.date()
        ref = next((r for r in self.refs if day in self.dates.get(r.calendar_id, ())), None)
        if ref is None:
            return RUNS
        if not ref.shift:
            return Verdict(calendar_id=ref.calendar_id)
        excluded = frozenset().union(*(self.dates.get(r.calendar_id, frozenset()) for r in self.refs))
        for step in range(1, MAX_SHIFT_DAYS + 1):
            later = day + timedelta(days=step)
            if later in excluded:
                continue
            wall = datetime.combine(later, local.timetz().replace(tzinfo=None), tzinfo=self.zone)
            # Through UTC and back: a wall time that does not exist that day moves forward.
            moved = wall.astimezone(UTC).astimezone(self.zone).astimezone(UTC)
            if following is not None and moved >= following:
                break
            return Verdict(calendar_id=ref.calendar_id, shifted_to=moved)
        return Verdict(calendar_id=ref.calendar_id)
