"""Cancelling a task: while it sleeps and while its job runs, through the API's update and
through the plain `cancel` signal operators send with the Temporal CLI."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import (
    Blocker,
    TaskHandle,
    executions,
    handler_job,
    spec,
    start_task,
    until,
)
from workflows.task import TaskWorkflow


async def cancel(handle: TaskHandle, via: str, reason: str) -> None:
    if via == "update":
        await handle.execute_update(TaskWorkflow.cancel_update, reason)
    else:
        # by name, exactly as `temporal workflow signal --name cancel` does
        await handle.signal("cancel", reason)


@pytest.mark.parametrize("via", ["update", "signal"])
async def test_cancel_while_sleeping(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, via: str
) -> None:
    task = spec(schedule_type="interval", interval_seconds=3600)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=10))
        await cancel(handle, via, "no longer needed")
        state = await handle.result()

    assert state.status is TaskStatus.CANCELLED and state.status_reason == "no longer needed"
    assert state.run_count == 0 and state.next_fire_at is None
    assert executions(sqlite_engine, state.task_id) == []
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None
    assert (row.status, row.status_reason, row.next_run_at) == (
        "CANCELLED",
        "no longer needed",
        None,
    )


@pytest.mark.parametrize("via", ["update", "signal"])
async def test_cancel_while_running_cancels_the_job_through_its_heartbeats(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, via: str
) -> None:
    now = await time_env.get_current_time()
    blocker = Blocker()
    task = spec(
        schedule_type="once",
        run_at=now + timedelta(hours=1),
        job_details=handler_job("block"),
        # cancellation reaches a job with its next heartbeat, sent at most every 0.8 x timeout
        heartbeat_timeout_seconds=2,
    )
    async with new_worker(time_env.client, sqlite_engine, handlers={"block": blocker}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        result = asyncio.create_task(handle.result())  # lets the clock skip to run_at
        await asyncio.wait_for(blocker.started.wait(), timeout=30)

        async def reported_running() -> bool:  # once the jobs worker's report arrives
            state = await handle.query(TaskWorkflow.query_state)
            return state.status is TaskStatus.RUNNING and len(state.running) == 1

        await until(reported_running)
        await cancel(handle, via, "stop it")
        state = await asyncio.wait_for(result, timeout=30)

    assert blocker.cancelled.is_set()
    assert state.status is TaskStatus.CANCELLED and state.cancelled_count == 1
    [run] = executions(sqlite_engine, state.task_id)
    assert run.status == "CANCELLED" and run.finished_at is not None
    assert run.scheduled_at == now + timedelta(hours=1)
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and (row.status, row.status_reason) == ("CANCELLED", "stop it")
    assert row.last_run_status == "CANCELLED"
