"""Cron tasks across days, and the bounds of recurring tasks (start_date, end_date, max_runs)."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import (
    executions,
    running_task,
    spec,
    stamp,
    start_task,
    statuses,
    task_state,
)

BERLIN = ZoneInfo("Europe/Berlin")


def berlin_tens(after: datetime, count: int) -> list[datetime]:
    """The next ``count`` 10:00 wall-clock times in Berlin after ``after``."""
    day = after.astimezone(BERLIN).date()
    found: list[datetime] = []
    while len(found) < count:
        ten = datetime(day.year, day.month, day.day, 10, tzinfo=BERLIN)
        if ten > after:
            found.append(ten)
        day += timedelta(days=1)
    return found


async def test_daily_cron_runs_at_ten_berlin_each_day_until_max_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="cron", cron="0 10 * * *", timezone="Europe/Berlin", max_runs=4)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED
    assert (state.run_count, state.success_count, state.failure_count) == (4, 4, 0)
    rows = executions(sqlite_engine, state.task_id)
    expected = berlin_tens(state.created_at, 4)
    assert [row.scheduled_at for row in rows] == expected
    assert [row.id for row in rows] == [f"{state.task_id}:{stamp(t)}" for t in expected]
    assert statuses(rows) == ["COMPLETED"] * 4
    for row in rows:
        assert row.scheduled_at.astimezone(BERLIN).strftime("%H:%M:%S") == "10:00:00"
        assert row.started_at is not None and row.finished_at is not None
        # no drift: every run starts on its own scheduled time, not later and later
        assert timedelta(0) <= row.started_at - row.scheduled_at < timedelta(seconds=1)
    task_row = read_task(sqlite_engine, state.task_id, "t1")
    assert task_row is not None
    assert (task_row.status, task_row.run_count, task_row.next_run_at) == ("COMPLETED", 4, None)
    assert task_row.last_run_at == expected[-1] and task_row.last_run_status == "COMPLETED"


async def test_future_start_date_makes_the_task_wait(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    start = now + timedelta(days=3)
    first = start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    task = spec(schedule_type="cron", cron="0 * * * *", start_date=start, max_runs=2)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(timedelta(days=2))
        waiting = await task_state(handle)
        assert waiting.status is TaskStatus.PENDING and waiting.run_count == 0
        assert waiting.next_fire_at == first
        assert executions(sqlite_engine, waiting.task_id) == []
        row = read_task(sqlite_engine, waiting.task_id, "t1")
        assert row is not None and row.next_run_at == first
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED
    rows = executions(sqlite_engine, state.task_id)
    assert [r.scheduled_at for r in rows] == [first, first + timedelta(hours=1)]
    assert statuses(rows) == ["COMPLETED", "COMPLETED"]


async def test_end_date_ends_the_task_completed(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    task = spec(
        schedule_type="interval",
        interval_seconds=3600,
        end_date=now + timedelta(hours=3, minutes=30),
    )
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED and state.next_fire_at is None
    rows = executions(sqlite_engine, state.task_id)
    # fixed_rate counts from the creation time; the fourth fire would be past end_date
    assert [r.scheduled_at for r in rows] == [
        state.created_at + timedelta(hours=h) for h in (1, 2, 3)
    ]
    assert statuses(rows) == ["COMPLETED"] * 3
    task_row = read_task(sqlite_engine, state.task_id, "t1")
    assert task_row is not None and task_row.status == "COMPLETED" and task_row.run_count == 3
