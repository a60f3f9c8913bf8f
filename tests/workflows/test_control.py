"""Changing a task while it sleeps: update (re-plans at once, invalid changes refused),
pause and resume, and manual triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from scheduling.spec import ScheduleType, TaskChanges
from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import (
    executions,
    far_daily_cron,
    running_task,
    spec,
    stamp,
    start_task,
    statuses,
    task_state,
)
from workflows.task import TaskWorkflow


def next_utc(after: datetime, hour: int, minute: int) -> datetime:
    """The next hh:mm UTC after ``after``."""
    candidate = after.astimezone(UTC).replace(hour=hour, minute=minute, second=0, microsecond=0)
    return candidate if candidate > after else candidate + timedelta(days=1)


async def test_update_cron_while_sleeping_replans_at_once(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="cron", cron=await far_daily_cron(time_env))
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=1))
        before = await time_env.get_current_time()
        updated = await handle.execute_update(
            TaskWorkflow.update_task, TaskChanges(cron="30 12 * * *", max_runs=1)
        )
        assert updated.spec.cron == "30 12 * * *"
        assert updated.next_fire_at == next_utc(before, 12, 30)
        row = read_task(sqlite_engine, updated.task_id, "t1")
        assert row is not None and row.next_run_at == updated.next_fire_at
        assert row.spec["cron"] == "30 12 * * *"
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.status) for r in rows] == [(updated.next_fire_at, "COMPLETED")]


async def test_update_interval_while_sleeping_replans_at_once(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=3600)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=10))
        before = await time_env.get_current_time()
        updated = await handle.execute_update(
            TaskWorkflow.update_task, TaskChanges(interval_seconds=60, max_runs=2)
        )
        assert updated.next_fire_at is not None
        # from the moment of the change, not after the hour the old timer was set for
        assert timedelta(seconds=60) <= updated.next_fire_at - before < timedelta(seconds=61)
        state = await handle.result()

    rows = executions(sqlite_engine, state.task_id)
    assert [r.scheduled_at for r in rows] == [
        updated.next_fire_at,
        updated.next_fire_at + timedelta(seconds=60),
    ]
    assert statuses(rows) == ["COMPLETED", "COMPLETED"]
    assert state.status is TaskStatus.COMPLETED


async def test_update_run_at_of_a_one_time_task(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    new_run_at = now + timedelta(hours=1)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(
            time_env, worker.task_queue, spec(schedule_type="once", run_at=now + timedelta(hours=5))
        )
        updated = await handle.execute_update(
            TaskWorkflow.update_task, TaskChanges(run_at=new_run_at)
        )
        assert updated.next_fire_at == new_run_at
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.status) for r in rows] == [(new_run_at, "COMPLETED")]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (TaskChanges(cron="61 * * * *"), "invalid cron expression '61 * * * *'"),
        (TaskChanges(timezone="Mars/Olympus"), "unknown IANA time zone 'Mars/Olympus'"),
        (
            TaskChanges(run_at=datetime(2030, 1, 1, tzinfo=UTC)),
            "run_at does not apply to schedule_type 'cron'",
        ),
        (TaskChanges(interval_seconds=-5), "interval_seconds"),
        (TaskChanges(schedule_type=ScheduleType.INTERVAL), "interval_seconds is required"),
        (TaskChanges(end_date=datetime(2000, 1, 1, tzinfo=UTC)), "end_date is in the past"),
    ],
    ids=["bad-cron", "bad-zone", "wrong-field", "negative-interval", "missing-field", "past-end"],
)
async def test_invalid_update_is_rejected_and_changes_nothing(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, changes: TaskChanges, message: str
) -> None:
    task = spec(schedule_type="cron", cron=await far_daily_cron(time_env))
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(timedelta(minutes=1))
        before = await task_state(handle)
        row_before = read_task(sqlite_engine, before.task_id, "t1")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(TaskWorkflow.update_task, changes)
        assert message in str(refused.value.cause)
        after = await task_state(handle)
        assert after == before
        row_after = read_task(sqlite_engine, before.task_id, "t1")
        assert row_before is not None and row_after is not None
        assert row_after._asdict() == row_before._asdict()


@pytest.mark.parametrize("via", ["update", "signal"])
async def test_pause_stops_runs_and_records_the_fires_inside_it(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, via: str
) -> None:
    task = spec(schedule_type="interval", interval_seconds=1800, max_runs=1)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=10))
        if via == "update":
            paused = await handle.execute_update(TaskWorkflow.pause_update, "maintenance")
            assert paused.status is TaskStatus.PAUSED
        else:
            await handle.signal(TaskWorkflow.pause_signal, "maintenance")
        await time_env.sleep(timedelta(hours=2))  # fires at +30, +60, +90 and +120 minutes

        state = await task_state(handle)
        assert state.status is TaskStatus.PAUSED and state.run_count == 0
        assert executions(sqlite_engine, state.task_id) == []
        row = read_task(sqlite_engine, state.task_id, "t1")
        assert row is not None
        assert (row.status, row.status_reason, row.next_run_at) == ("PAUSED", "maintenance", None)

        if via == "update":
            await handle.execute_update(TaskWorkflow.resume_update)
        else:
            await handle.signal(TaskWorkflow.resume_signal)
        state = await handle.result()

    created = state.created_at
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at - created, r.status, r.reason) for r in rows] == [
        (timedelta(minutes=30), "SKIPPED", "paused"),
        (timedelta(minutes=60), "SKIPPED", "paused"),
        (timedelta(minutes=90), "SKIPPED", "paused"),
        (timedelta(minutes=120), "SKIPPED", "paused"),
        # the first fire after the resume runs; the skipped ones did not use up max_runs
        (timedelta(minutes=150), "COMPLETED", None),
    ]
    assert state.status is TaskStatus.COMPLETED and state.skipped_count == 4


async def test_trigger_runs_the_job_now_outside_the_schedule(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="cron", cron=await far_daily_cron(time_env))
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(timedelta(minutes=1))
        scheduled = (await task_state(handle)).next_fire_at
        first_at = await time_env.get_current_time()
        await handle.execute_update(TaskWorkflow.trigger_update)
        await time_env.sleep(timedelta(minutes=1))
        second_at = await time_env.get_current_time()
        await handle.signal(TaskWorkflow.trigger_signal)  # what `temporal workflow signal` sends
        await time_env.sleep(timedelta(minutes=1))
        state = await task_state(handle)

    rows = executions(sqlite_engine, state.task_id)
    assert statuses(rows) == ["COMPLETED", "COMPLETED"]
    assert [r.trigger for r in rows] == ["manual", "manual"]
    assert [r.id for r in rows] == [
        f"{state.task_id}:manual-{stamp(r.scheduled_at)}-{n}" for n, r in enumerate(rows, 1)]
    # The shared test server's clock is far in the future by now (past 2100); there a time as a
    # float of seconds since the epoch keeps only about a microsecond: allow 1 ms below.
    slack = timedelta(milliseconds=1)
    assert first_at - slack <= rows[0].scheduled_at < first_at + timedelta(seconds=1)
    assert second_at - slack <= rows[1].scheduled_at < second_at + timedelta(seconds=1)
    # the schedule itself is untouched: same next fire, no scheduled run used up
    assert state.next_fire_at == scheduled and state.executed == 0 and state.run_count == 2
    assert state.success_count == 2 and state.status is TaskStatus.PENDING


async def test_changing_only_the_bounds_keeps_the_fixed_rate_grid(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=600)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=15))
        created = (await task_state(handle)).created_at
        updated = await handle.execute_update(
            TaskWorkflow.update_task, TaskChanges(end_date=created + timedelta(minutes=35))
        )
        assert updated.next_fire_at == created + timedelta(minutes=20)
        state = await handle.result()

    rows = executions(sqlite_engine, state.task_id)
    assert [r.scheduled_at - created for r in rows] == [timedelta(minutes=m) for m in (10, 20, 30)]
    assert state.status is TaskStatus.COMPLETED
