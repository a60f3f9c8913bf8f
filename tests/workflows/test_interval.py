"""Interval tasks: fixed_rate stays on its anchored grid, fixed_delay counts from completion."""

from __future__ import annotations

import itertools
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, spec, start_task, statuses
from workflows.task import TaskWorkflow

# The built-in `sleep` handler takes real time; a running activity holds the time-skipping
# clock, so each run lasts about this long on the task's clock too.
JOB_SECONDS = 0.5


async def test_fixed_rate_stays_anchored_even_when_the_job_takes_time(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(
        schedule_type="interval",
        interval_seconds=600,
        max_runs=3,
        job_details=handler_job("sleep", seconds=JOB_SECONDS),
    )
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED and state.run_count == 3
    rows = executions(sqlite_engine, state.task_id)
    assert statuses(rows) == ["COMPLETED"] * 3
    assert [r.scheduled_at for r in rows] == [
        state.created_at + timedelta(minutes=10 * k) for k in (1, 2, 3)
    ]
    for row in rows:
        assert row.started_at is not None and row.finished_at is not None
        assert row.finished_at - row.started_at >= timedelta(seconds=JOB_SECONDS)
        assert row.started_at - row.scheduled_at < timedelta(seconds=1)


async def test_fixed_delay_counts_the_interval_from_each_completion(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(
        schedule_type="interval",
        interval_seconds=600,
        interval_mode="fixed_delay",
        max_runs=3,
        job_details=handler_job("sleep", seconds=JOB_SECONDS),
    )
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED and state.run_count == 3
    rows = executions(sqlite_engine, state.task_id)
    assert statuses(rows) == ["COMPLETED"] * 3
    assert rows[0].scheduled_at == state.created_at + timedelta(minutes=10)
    for previous, row in itertools.pairwise(rows):
        assert previous.finished_at is not None
        assert previous.finished_at - previous.scheduled_at >= timedelta(seconds=JOB_SECONDS)
        assert row.scheduled_at == previous.finished_at + timedelta(minutes=10)
    # so the runs drift off the creation-time grid by the time each job took
    assert rows[2].scheduled_at - state.created_at >= timedelta(minutes=30, seconds=2 * JOB_SECONDS)


async def test_fixed_delay_task_goes_on_after_its_fire_was_skipped_in_a_pause(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(
        schedule_type="interval", interval_seconds=1800, interval_mode="fixed_delay", max_runs=1
    )
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await handle.execute_update(TaskWorkflow.pause_update, None)
        await time_env.sleep(timedelta(hours=1))  # the fire at +30 minutes falls inside the pause
        await handle.execute_update(TaskWorkflow.resume_update)
        state = await handle.result()

    rows = executions(sqlite_engine, state.task_id)
    assert [(r.status, r.reason) for r in rows] == [("SKIPPED", "paused"), ("COMPLETED", None)]
    assert rows[0].scheduled_at == state.created_at + timedelta(minutes=30)
    # the delay counts from the skip, as it would from a completion
    delay = rows[1].scheduled_at - state.created_at
    assert timedelta(minutes=90) <= delay < timedelta(minutes=91)
    assert state.status is TaskStatus.COMPLETED and state.run_count == 1
