"""Calendars on the real worker: a fire on an excluded date is SKIPPED calendar, a shifted one
runs on the next business day at the same wall time, a calendar edited after the task was
created counts, and the history replays."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Engine
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from activities.options import RunOptions
from scheduling.calendars import CalendarChanges, CalendarDates
from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus
from store.calendars import add_calendar, replace_calendar
from store.models import Calendar
from tests.conftest import new_worker
from tests.workflows.helpers import (
    executions,
    running_task,
    spec,
    start_task,
    statuses,
    task_state,
    until,
)
from workflows.state import TaskState
from workflows.task import TaskWorkflow

BERLIN = ZoneInfo("Europe/Berlin")


def calendar(engine: Engine, *days: date, tenant: str = "t1") -> str:
    row = add_calendar(engine, Calendar(id=uuid.uuid4().hex, tenant_id=tenant, name="c",
                                        dates=[d.isoformat() for d in days]))
    return row.id


def tens(after: datetime, count: int) -> list[datetime]:
    """The next ``count`` 10:00 wall times in Berlin after ``after``."""
    day = after.astimezone(BERLIN).date()
    found: list[datetime] = []
    while len(found) < count:
        ten = datetime(day.year, day.month, day.day, 10, tzinfo=BERLIN)
        if ten > after:
            found.append(ten)
        day += timedelta(days=1)
    return found


async def replays(handle: object) -> None:
    history = await handle.fetch_history()  # type: ignore[attr-defined]
    replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)


async def test_a_fire_on_an_excluded_date_is_skipped_calendar_and_an_edit_counts(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    fires = tens(now, 4)
    cid = calendar(sqlite_engine)  # empty when the task is created
    other = calendar(sqlite_engine, fires[1].date(), tenant="t2")  # another tenant's: no effect
    task = spec(schedule_type="cron", cron="0 10 * * *", timezone="Europe/Berlin", max_runs=3,
                exclude_calendars=[{"calendar_id": cid}, {"calendar_id": other}])
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        replace_calendar(sqlite_engine, "t1", cid, name="c", dates=[fires[1].date().isoformat()],
                         holidays=None, now=now)
        state = await handle.result()
        await replays(handle)
    assert state.status is TaskStatus.COMPLETED
    rows = executions(sqlite_engine, state.task_id)
    assert [r.scheduled_at for r in rows] == fires
    assert statuses(rows) == ["COMPLETED", "SKIPPED", "COMPLETED", "COMPLETED"]
    assert rows[1].reason == "calendar" and rows[1].started_at is None


async def calendar_reads(handle: object) -> list[CalendarChanges]:
    """The answers of the calendar reads recorded in the workflow's history, in order."""
    history = await handle.fetch_history()  # type: ignore[attr-defined]
    found = []
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if not event.HasField("marker_recorded_event_attributes") or "result" not in marker.details:
            continue
        data = json.loads(marker.details["data"].payloads[0].data)
        if data["activity_type"] == "calendar_changes":
            found.append(CalendarChanges.model_validate_json(marker.details["result"].payloads[0].data))
    return found


async def test_the_history_holds_a_calendars_dates_once_per_version(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    """A workflow reads its calendars before every fire; the history records the dates of a
    calendar version once, so a tenant's big calendars do not grow every fire's history (and
    the workflow tasks every tenant's workflows share a worker for) by their size."""
    now = await time_env.get_current_time()
    fires = tens(now, 5)
    far = [date(2040, 1, 1) + timedelta(days=n) for n in range(1500)]  # never a fire's date
    cid = calendar(sqlite_engine, *far)
    task = spec(schedule_type="cron", cron="0 10 * * *", timezone="Europe/Berlin", max_runs=4,
                exclude_calendars=[{"calendar_id": cid}])
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        edited = fires[0] + timedelta(hours=1)
        await time_env.sleep(edited - now)
        replace_calendar(sqlite_engine, "t1", cid, name="c", holidays=None, now=edited,
                         dates=[d.isoformat() for d in [*far, fires[2].date()]])
        state = await handle.result()
        await replays(handle)
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.status) for r in rows] == [
        (fires[0], "COMPLETED"), (fires[1], "COMPLETED"), (fires[2], "SKIPPED"),
        (fires[3], "COMPLETED"), (fires[4], "COMPLETED")]
    reads = await calendar_reads(handle)
    assert len(reads) >= len(fires)  # one before each fire at least
    sent = [len(read.changed[0].dates) for read in reads if read.changed]
    assert sent == [len(far), len(far) + 1]  # the first read and the one after the edit
    assert all(read.kept == [cid] for read in reads if not read.changed)


async def test_a_shifted_fire_runs_on_the_next_business_day_at_the_same_wall_time(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    saturday = next(t for t in tens(now, 8) if t.weekday() == 5)
    sunday = saturday.date() + timedelta(days=1)
    cid = calendar(sqlite_engine, saturday.date(), sunday)
    task = spec(schedule_type="cron", cron="0 10 * * 6", timezone="Europe/Berlin", max_runs=1,
                drift_threshold_seconds=5, exclude_calendars=[{"calendar_id": cid, "shift": True}])
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()
        await replays(handle)
    assert state.status is TaskStatus.COMPLETED
    (row,) = executions(sqlite_engine, state.task_id)
    assert row.status == "COMPLETED" and row.scheduled_at == saturday
    monday = saturday + timedelta(days=2)
    assert row.started_at is not None and monday <= row.started_at < monday + timedelta(minutes=1)
    assert row.instant == monday and not row.drifted  # lateness counts from the new day


async def test_a_dates_task_runs_each_date_once_and_completes(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    dates = [now + timedelta(hours=5), now + timedelta(days=2), now + timedelta(hours=1)]
    task = spec(schedule_type="dates", dates=[*dates, dates[0]])  # a repeated instant runs once
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()
        await replays(handle)
    assert state.status is TaskStatus.COMPLETED
    rows = executions(sqlite_engine, state.task_id)
    assert [r.scheduled_at for r in rows] == sorted(dates)
    assert statuses(rows) == ["COMPLETED"] * 3


async def test_a_run_sent_ahead_is_not_sent_for_an_excluded_date(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    """On the real server with a lead: the fires of an excluded day are never sent ahead, each
    is SKIPPED calendar at its instant, and the task runs nothing."""
    today = (await dev_env.get_current_time()).astimezone(UTC).date()
    cid = calendar(sqlite_engine, today, today + timedelta(days=1))
    task = spec(schedule_type="interval", interval_seconds=1, exclude_calendars=[{"calendar_id": cid}])
    async with new_worker(dev_env.client, sqlite_engine,
                          run_options=RunOptions(lead_seconds=5)) as worker:
        async with running_task(dev_env, worker.task_queue, task) as handle:
            async def skipped_three() -> bool:
                return len(executions(sqlite_engine, (await task_state(handle)).task_id)) >= 3

            await until(skipped_three)
            state = await task_state(handle)
    rows = executions(sqlite_engine, state.task_id)
    assert {(r.status, r.reason) for r in rows} == {("SKIPPED", "calendar")}
    assert state.run_count == 0 and state.running == []


async def test_calendars_added_by_an_update_count_from_the_next_fire(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    fires = tens(now, 3)
    cid = calendar(sqlite_engine, fires[0].date())
    task = spec(schedule_type="cron", cron="0 10 * * *", timezone="Europe/Berlin", max_runs=2)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        changes = TaskChanges.model_validate({"exclude_calendars": [{"calendar_id": cid}]})
        updated = await handle.execute_update(TaskWorkflow.update_task, changes)
        assert [ref.calendar_id for ref in updated.spec.exclude_calendars] == [cid]
        state = await handle.result()
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.status, r.reason) for r in rows] == [
        (fires[0], "SKIPPED", "calendar"), (fires[1], "COMPLETED", None), (fires[2], "COMPLETED", None)]


def test_the_calendar_plan_follows_every_read_and_every_spec_change() -> None:
    """The plan a state builds of its calendars is built once per read, and never outlives
    the dates or the spec it was built of."""
    first, second = datetime(2030, 3, 4, 9, tzinfo=UTC), datetime(2030, 3, 5, 9, tzinfo=UTC)
    task = spec(schedule_type="cron", cron="0 9 * * *", exclude_calendars=[{"calendar_id": "c"}])
    state = TaskState(task_id="t", tenant_id="t1", spec=task, created_at=first, anchor=first)
    state.calendar_dates = [CalendarDates(calendar_id="c", dates=[first.date()], version="1")]
    assert state.calendar() is state.calendar()
    assert state.position().verdict(first).excluded and not state.position().verdict(second).excluded

    read = CalendarChanges(changed=[CalendarDates(calendar_id="c", dates=[second.date()], version="2")])
    state.calendar_dates = read.applied_to(state.calendar_dates)
    assert not state.position().verdict(first).excluded and state.position().verdict(second).excluded

    state.spec = spec(schedule_type="cron", cron="0 9 * * *", exclude_calendars=[{"calendar_id": "d"}])
    assert not state.position().verdict(second).excluded  # "c" no longer named
