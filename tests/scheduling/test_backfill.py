"""Backfill's pure rules: the past instants of a range, by the workflow's fire math, and which
of them a mode runs again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.backfill import (
    MAX_BACKFILL_INSTANTS,
    BackfillAction,
    BackfillMode,
    BadRange,
    action,
    calendar_keeps,
    earlier_result,
    instants_between,
    undecided,
)
from scheduling.calendars import RUNS, Verdict
from scheduling.fire import next_fire
from scheduling.spec import TaskSpec

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(days=30)
JOB = {"type": "handler", "name": "noop"}


def spec(**fields: object) -> TaskSpec:
    return TaskSpec.model_validate({"task_name": "t", "job_details": JOB, **fields})


def test_cron_instants_are_the_workflows_fires_in_the_half_open_range() -> None:
    task = spec(schedule_type="cron", cron="0 10 * * *", timezone="Europe/Berlin")
    start, end = T0, T0 + timedelta(days=3)
    fires = instants_between(task, T0, start, end, NOW)
    expected, fire = [], next_fire(task, anchor=T0, after=start - timedelta(microseconds=1))
    while fire is not None and fire < end:
        expected.append(fire)
        fire = next_fire(task, anchor=T0, after=fire)
    assert fires == expected and len(fires) == 3
    assert all(f.astimezone(task.zone()).hour == 10 for f in fires)
    # the start is included when it is an instant, the end never
    on_instant = instants_between(task, T0, fires[0], fires[2], NOW)
    assert on_instant == fires[:2]


def test_fixed_rate_instants_stay_on_the_anchored_grid() -> None:
    task = spec(schedule_type="interval", interval_seconds=600)
    fires = instants_between(task, T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=35), NOW)
    assert fires == [T0 + timedelta(minutes=m) for m in (10, 20, 30)]


def test_an_interval_without_start_date_first_fires_one_step_after_its_anchor() -> None:
    task = spec(schedule_type="interval", interval_seconds=600)
    fires = instants_between(task, T0, T0 - timedelta(hours=1), T0 + timedelta(minutes=25), NOW)
    assert fires == [T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)]
    dated = spec(schedule_type="interval", interval_seconds=600, start_date=T0)
    assert instants_between(dated, T0 + timedelta(days=1), T0, T0 + timedelta(minutes=15), NOW) == [
        T0, T0 + timedelta(minutes=10)]


def test_once_has_its_run_at_in_range_or_nothing() -> None:
    task = spec(schedule_type="once", run_at=T0)
    assert instants_between(task, T0, T0 - timedelta(hours=1), T0 + timedelta(hours=1), NOW) == [T0]
    assert instants_between(task, T0, T0 + timedelta(seconds=1), T0 + timedelta(hours=1), NOW) == []


@pytest.mark.parametrize(("start", "end", "message"), [
    (T0, T0, "start must be before end"),
    (T0 + timedelta(hours=1), T0, "start must be before end"),
    (T0, NOW + timedelta(seconds=1), "end must not be in the future"),
])
def test_bad_ranges_are_refused(start: datetime, end: datetime, message: str) -> None:
    task = spec(schedule_type="cron", cron="0 10 * * *")
    with pytest.raises(BadRange, match=message):
        instants_between(task, T0, start, end, NOW)


def test_more_than_the_limit_is_refused_and_the_limit_itself_is_not() -> None:
    task = spec(schedule_type="interval", interval_seconds=60)
    limit = T0 + timedelta(minutes=MAX_BACKFILL_INSTANTS + 1)  # the first fire is T0 + 1 min
    assert len(instants_between(task, T0, T0, limit, NOW)) == MAX_BACKFILL_INSTANTS
    with pytest.raises(BadRange, match="more than 1000"):
        instants_between(task, T0, T0, limit + timedelta(minutes=1), NOW)


def test_fixed_delay_has_no_past_instants() -> None:
    task = spec(schedule_type="interval", interval_seconds=60, interval_mode="fixed_delay")
    with pytest.raises(BadRange, match="fixed_delay"):
        instants_between(task, T0, T0, T0 + timedelta(hours=1), NOW)


@pytest.mark.parametrize(("mode", "status", "dead_letter", "expected"), [
    ("missing", None, None, "run"), ("missing", "SKIPPED", None, "run"),
    ("missing", "FAILED", "open", "keep"), ("missing", "COMPLETED", None, "keep"),
    ("failed", "FAILED", "open", "run"), ("failed", "FAILED", "dismissed", "run"),
    ("failed", None, None, "keep"), ("failed", "SKIPPED", None, "keep"),
    ("failed", "COMPLETED", None, "keep"), ("all", "COMPLETED", None, "run"),
    ("all", None, None, "run"), ("all", "RUNNING", None, "keep"), ("failed", "RUNNING", None, "keep"),
])
def test_modes_pick_their_instants(mode: str, status: str | None, dead_letter: str | None,
                                   expected: str) -> None:
    assert action(BackfillMode(mode), status, dead_letter) is BackfillAction(expected)


def test_earlier_result_names_the_status_and_why() -> None:
    assert earlier_result(None, None, None) is None
    assert earlier_result("SKIPPED", "missed", None) == "backfilled; before: SKIPPED (missed)"
    assert earlier_result("FAILED", None, "HttpStatus 500") == "backfilled; before: FAILED (HttpStatus 500)"
    assert len(earlier_result("FAILED", None, "x" * 2000) or "") <= 480


def test_undecided_is_at_or_after_the_next_fire_or_held() -> None:
    assert undecided(T0, "t:a", T0, set()) and undecided(T0 + timedelta(hours=1), "t:a", T0, set())
    assert not undecided(T0 - timedelta(hours=1), "t:a", T0, set())
    assert undecided(T0 - timedelta(hours=1), "t:a", T0, {"t:a"})  # in flight
    assert undecided(T0 - timedelta(hours=1), "t:a", None, {T0 - timedelta(hours=1)})  # queued
    assert not undecided(T0, "t:a", None, set())  # the schedule has no fire left


def test_calendar_keeps_excluded_dates_and_calendar_skips_only() -> None:
    assert calendar_keeps(RUNS, "SKIPPED", "calendar") is not None
    assert "cal1" in (calendar_keeps(Verdict(calendar_id="cal1"), None, None) or "")
    assert calendar_keeps(Verdict(calendar_id="cal1", shifted_to=T0), None, None) is None
    assert calendar_keeps(RUNS, "SKIPPED", "missed") is None and calendar_keeps(RUNS, None, None) is None
