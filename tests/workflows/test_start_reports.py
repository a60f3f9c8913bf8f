"""When a jobs worker tells a task's workflow that a run started (activities/starts.py): a job
that succeeds within ``REPORT_AFTER`` reports no start, its completion carries it; a longer job
reports its start while it runs; a job that fails or is cancelled reports its start before its
end, so the workflow records it as a run that ran, never as one no worker took."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from scheduling.status import TaskStatus
from store.tasks import list_executions, read_task
from tests.conftest import new_worker
from tests.workflows.helpers import Failing, TaskHandle, handler_job, spec, start_task, until
from workflows.task import TaskWorkflow


async def _events(handle: TaskHandle) -> list[int]:
    return [event.event_type async for event in handle.fetch_history_events()]


class Gate:
    """A handler that heartbeats until the test opens it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.started.set()
        while not self.open.is_set():
            ctx.heartbeat()
            await asyncio.sleep(0.05)


async def test_a_job_done_within_the_report_delay_reports_no_start(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    task = spec(schedule_type="once", run_at=(now + timedelta(minutes=5)).replace(microsecond=0))
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        final = await asyncio.wait_for(handle.result(), timeout=30)
        events = await _events(handle)
    [row], _ = list_executions(sqlite_engine, task_id=final.task_id, limit=10)

    assert final.status is TaskStatus.COMPLETED and final.success_count == 1
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in events
    # One workflow task fewer: start, the fire, the completion.
    assert events.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 3
    assert row.status == "COMPLETED" and row.started_at is not None and row.finished_at is not None


async def test_a_longer_job_reports_its_start_while_it_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    gate = Gate()
    task = spec(schedule_type="once", run_at=(now + timedelta(minutes=5)).replace(microsecond=0),
                job_details=handler_job("gate"), heartbeat_timeout_seconds=2)
    async with new_worker(time_env.client, sqlite_engine, handlers={"gate": gate}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        result = asyncio.create_task(handle.result())
        await asyncio.wait_for(gate.started.wait(), timeout=30)
        task_id = (await handle.query(TaskWorkflow.query_state)).task_id

        async def running() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "RUNNING"

        await until(running)
        gate.open.set()
        final = await asyncio.wait_for(result, timeout=30)
        events = await _events(handle)

    assert final.status is TaskStatus.COMPLETED and final.success_count == 1
    signaled = events.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert signaled < events.index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)


async def test_a_quick_failure_reports_its_start_before_its_end(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    failing = Failing()
    task = spec(schedule_type="once", run_at=(now + timedelta(minutes=5)).replace(microsecond=0),
                job_details=handler_job("failing"), retry_policy={"max_attempts": 1})
    async with new_worker(time_env.client, sqlite_engine, handlers={"failing": failing}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        final = await asyncio.wait_for(handle.result(), timeout=30)
        events = await _events(handle)
    [row], _ = list_executions(sqlite_engine, task_id=final.task_id, limit=10)

    # It failed at once, well within the report delay, and ran exactly once.
    assert failing.calls == 1
    assert final.failure_count == 1 and final.skipped_count == 0
    assert row.status == "FAILED" and row.started_at is not None
    signaled = events.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert signaled < events.index(EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED)
