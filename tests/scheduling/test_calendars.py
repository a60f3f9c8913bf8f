"""Calendars of excluded dates (scheduling/calendars.py) and how the policy engine applies
them: a fire on an excluded date is SKIPPED calendar, or shifted to the next business day."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduling.calendars import (
    CalendarDates,
    CalendarPlan,
    CalendarRef,
    HolidaySource,
    check_holidays,
    holiday_dates,
)
from scheduling.policy import Flight, Position, decide_due
from scheduling.spec import TaskSpec
from scheduling.status import SkipReason

BERLIN = ZoneInfo("Europe/Berlin")
SAT, SUN, MON = date(2026, 12, 5), date(2026, 12, 6), date(2026, 12, 7)


def plan(*refs: CalendarRef, dates: dict[str, list[date]]) -> CalendarPlan:
    known = [CalendarDates(calendar_id=k, dates=v) for k, v in dates.items()]
    return CalendarPlan.of(refs, known, BERLIN)


def at(day: date, hour: int = 10) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=BERLIN).astimezone(UTC)


def test_a_fire_on_an_excluded_date_in_the_tasks_zone_is_excluded() -> None:
    rule = plan(CalendarRef(calendar_id="c"), dates={"c": [SAT]})
    verdict = rule.verdict(at(SAT), at(SUN))
    assert verdict.excluded and verdict.calendar_id == "c"
    # 00:30 in Berlin on Sunday is still Saturday in UTC: the task's zone decides.
    assert not rule.verdict(at(SUN, 0) + timedelta(minutes=30), at(MON)).excluded
    assert not rule.verdict(at(SUN), at(MON)).excluded


def test_a_shifted_fire_runs_on_the_next_day_no_calendar_excludes_at_the_same_wall_time() -> None:
    rule = plan(CalendarRef(calendar_id="weekend", shift=True), CalendarRef(calendar_id="hols"),
                dates={"weekend": [SAT, SUN], "hols": [MON]})
    verdict = rule.verdict(at(SAT), at(date(2027, 1, 5)))
    assert verdict.shifted and verdict.shifted_to == at(date(2026, 12, 8))
    # When the schedule fires again by then, the shifted fire is skipped instead.
    assert rule.verdict(at(SAT), at(SUN)).excluded


def test_holidays_come_from_the_holidays_package_and_unknown_places_are_refused() -> None:
    assert date(2026, 12, 25) in holiday_dates(HolidaySource(country="DE", subdivision="BY"), [2026])
    assert date(2026, 1, 6) in holiday_dates(HolidaySource(country="DE", subdivision="BY"), [2026])
    assert date(2026, 1, 6) not in holiday_dates(HolidaySource(country="DE", subdivision="BE"), [2026])
    for bad in (HolidaySource(country="XX"), HolidaySource(country="DE", subdivision="ZZ")):
        with pytest.raises(ValueError):
            check_holidays(bad)


def daily(**extra: object) -> TaskSpec:
    return TaskSpec.model_validate({
        "task_name": "c", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "cron", "cron": "0 10 1 * *", "timezone": "Europe/Berlin", **extra})


def test_the_policy_engine_skips_an_excluded_fire_with_reason_calendar() -> None:
    spec = daily(exclude_calendars=[{"calendar_id": "c"}])
    fire = at(date(2026, 8, 1))
    pos = Position(spec=spec, task_id="t", anchor=fire - timedelta(days=1), next_fire_at=fire,
                   calendar=plan(*spec.exclude_calendars, dates={"c": [fire.date()]}))
    due = decide_due(pos, Flight(), fire)
    assert due.skipped == [(fire, SkipReason.CALENDAR)] and not due.start
    assert due.next_fire_at == at(date(2026, 9, 1))


def test_the_policy_engine_runs_a_shifted_fire_at_its_new_instant_only() -> None:
    spec = daily(exclude_calendars=[{"calendar_id": "c", "shift": True}])
    fire = at(date(2026, 8, 1))  # a Saturday
    pos = Position(spec=spec, task_id="t", anchor=fire - timedelta(days=1), next_fire_at=fire,
                   calendar=plan(*spec.exclude_calendars, dates={"c": [date(2026, 8, 1), date(2026, 8, 2)]}))
    assert pos.instant(fire) == at(date(2026, 8, 3))
    assert decide_due(pos, Flight(), fire + timedelta(seconds=1)).start == []
    due = decide_due(pos, Flight(), at(date(2026, 8, 3)))
    assert [run.scheduled_at for run in due.start] == [fire] and not due.skipped


@pytest.mark.parametrize("missed", ["skip", "catchup"])
def test_more_fires_due_than_a_pass_takes_are_skipped_calendar_on_an_excluded_date(missed: str) -> None:
    # Every minute for six hours (more than a pass), across midnight into an excluded day.
    start = datetime(2030, 1, 1, 23, 0, tzinfo=BERLIN).astimezone(UTC)
    spec = TaskSpec.model_validate({
        "task_name": "t", "job_details": {"type": "handler", "name": "noop"}, "schedule_type": "cron",
        "cron": "* * * * *", "timezone": "Europe/Berlin", "missed_run_policy": missed,
        "exclude_calendars": [{"calendar_id": "c"}]})
    pos = Position(spec=spec, task_id="t", anchor=start, next_fire_at=start + timedelta(minutes=1),
                   calendar=plan(*spec.exclude_calendars, dates={"c": [date(2030, 1, 2)]}))
    due = decide_due(pos, Flight(), start + timedelta(hours=6))
    assert due.more
    excluded = {reason for fire, reason in due.skipped if fire.astimezone(BERLIN).date() == date(2030, 1, 2)}
    others = {reason for fire, reason in due.skipped if fire.astimezone(BERLIN).date() != date(2030, 1, 2)}
    assert excluded == {SkipReason.CALENDAR} and SkipReason.CALENDAR not in others, (excluded, others)
