"""A new task held by the server before its first workflow task (`SCHEDULER_HOLD_AFTER_SECONDS`,
`SCHEDULER_HOLD_AT_MOST_SECONDS`).

On the real dev server: its workflow runs no workflow task before the wake; held until its first
dispatch, its first workflow task dispatches the run (no timer in between); held for a limited
time, it wakes then, writes its row and waits for the run as usual. Updates and Temporal
cancellation reach it at once, and a plain signal waits for the wake but still comes before the
run."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

from sqlalchemy import Engine
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.contracts import RUN_JOB
from activities.handlers import HandlerContext
from store.tasks import get_task
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, spec, until
from workflows.starter import start_task_workflow
from workflows.state import TaskState, TaskStatus, Trigger, workflow_id
from workflows.task import TaskWorkflow

LEAD = 2.0


class Calls:
    """A handler that notes when it was called."""

    def __init__(self) -> None:
        self.at: list[datetime] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.at.append(ctx.scheduled_at)


async def _start_held(env: WorkflowEnvironment, queue: str, run_at: datetime, *,
                      hold_after: float = 1.0, hold_at_most: float = 0.0,
                      ) -> WorkflowHandle[TaskWorkflow, TaskState]:
    task_id = uuid.uuid4().hex
    started = await start_task_workflow(
        env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
        spec=spec(schedule_type="once", run_at=run_at, job_details=handler_job("calls")),
        created_at=await env.get_current_time(), lead_seconds=LEAD, max_lead_seconds=60.0,
        hold_after_seconds=hold_after, hold_at_most_seconds=hold_at_most,
    )
    assert started
    return env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))


async def _event_kinds(handle: WorkflowHandle[TaskWorkflow, TaskState]) -> list[str]:
    return [event.WhichOneof("attributes") or "" async for event in handle.fetch_history_events()]


async def test_a_held_task_runs_no_workflow_task_until_its_run_is_dispatched(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    calls = Calls()
    run_at = (await dev_env.get_current_time()).replace(microsecond=0) + timedelta(seconds=7)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"calls": calls}) as worker:
        handle = await _start_held(dev_env, worker.task_queue, run_at)
        description = await handle.describe()
        assert description.execution_time is not None
        assert abs((description.execution_time - (run_at - timedelta(seconds=LEAD))).total_seconds()) < 0.01
        await asyncio.sleep(2)
        # Two seconds later the worker has still not seen it.
        assert await _event_kinds(handle) == ["workflow_execution_started_event_attributes"]
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED and calls.at == [run_at]
    [run] = executions(sqlite_engine, state.task_id)
    assert run.status == "COMPLETED" and run.started_at is not None
    assert timedelta(0) <= run.started_at - run_at < timedelta(seconds=1)
    kinds = await _event_kinds(handle)
    # The first workflow task wrote the row and dispatched the run: no timer before it.
    assert "timer_started_event_attributes" not in kinds[:kinds.index("activity_task_scheduled_event_attributes")]
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            assert event.activity_task_scheduled_event_attributes.activity_type.name == RUN_JOB
            # dispatched at the wake, ahead of the instant
            assert event.event_time.ToDatetime().timestamp() <= run_at.timestamp() - LEAD + 1.0
            break
    row = get_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and row.status == "COMPLETED"


async def test_updates_and_temporal_cancellation_reach_a_held_task_at_once(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    calls = Calls()
    tomorrow = (await dev_env.get_current_time()) + timedelta(days=1)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"calls": calls}) as worker:
        paused = await _start_held(dev_env, worker.task_queue, tomorrow)
        triggered = await _start_held(dev_env, worker.task_queue, tomorrow)
        cancelled = await _start_held(dev_env, worker.task_queue, tomorrow)
        for handle in (paused, triggered, cancelled):
            assert await _event_kinds(handle) == ["workflow_execution_started_event_attributes"]

        state = await asyncio.wait_for(paused.execute_update(TaskWorkflow.pause_update, "maintenance"), 10)
        assert state.paused and state.status is TaskStatus.PAUSED

        await asyncio.wait_for(triggered.execute_update(TaskWorkflow.trigger_update), 10)

        async def manual_run_done() -> bool:
            rows = executions(sqlite_engine, triggered.id.removeprefix("task-"))
            return [(r.trigger, r.status) for r in rows] == [(Trigger.MANUAL.value, "COMPLETED")]

        await until(manual_run_done)
        assert len(calls.at) == 1

        await cancelled.cancel()  # `temporal workflow cancel`, the Temporal UI's cancel
        await until(lambda: _status_is(cancelled, WorkflowExecutionStatus.CANCELED))
        row = get_task(sqlite_engine, cancelled.id.removeprefix("task-"), "t1")
        assert row is not None and row.status == "CANCELLED"

        paused_row = get_task(sqlite_engine, paused.id.removeprefix("task-"), "t1")
        assert paused_row is not None and paused_row.status == "PAUSED"
        for handle in (paused, triggered):
            await handle.execute_update(TaskWorkflow.cancel_update, "test over")


async def test_a_plain_signal_reaches_a_held_task_at_its_wake_before_the_run(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    calls = Calls()
    run_at = (await dev_env.get_current_time()) + timedelta(seconds=8)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"calls": calls}) as worker:
        handle = await _start_held(dev_env, worker.task_queue, run_at)
        await handle.signal("cancel", "from an operator")
        await asyncio.sleep(2)
        # Recorded, not yet handled: the workflow has run no code.
        assert await _event_kinds(handle) == [
            "workflow_execution_started_event_attributes",
            "workflow_execution_signaled_event_attributes",
        ]
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        state = await handle.result()

    assert state.status is TaskStatus.CANCELLED and state.run_count == 0
    assert calls.at == [] and executions(sqlite_engine, state.task_id) == []
    # Handled at the wake, a lead ahead of the run.
    kinds = await _event_kinds(handle)
    assert "activity_task_scheduled_event_attributes" not in kinds


async def test_a_task_held_for_a_while_wakes_then_and_waits_for_its_run_as_usual(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    """The shipped kind of hold: the create's workflow task is deferred, not saved. A plain
    signal sent during the hold is handled at the wake, long before the run."""
    calls = Calls()
    began = await dev_env.get_current_time()
    run_at = began.replace(microsecond=0) + timedelta(seconds=12)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"calls": calls}) as worker:
        handle = await _start_held(dev_env, worker.task_queue, run_at, hold_at_most=3.0)
        paused = await _start_held(dev_env, worker.task_queue, run_at, hold_at_most=3.0)
        description = await handle.describe()
        assert description.execution_time is not None
        assert 2.5 < (description.execution_time - began).total_seconds() < 3.5
        await paused.signal("pause", "from an operator")
        await asyncio.sleep(1)
        assert await _event_kinds(handle) == ["workflow_execution_started_event_attributes"]
        assert get_task(sqlite_engine, handle.id.removeprefix("task-"), "t1") is None

        # After the hold and well before the run: the row is written and a timer set.
        async def row_written() -> bool:
            return _row_status(sqlite_engine, handle) is not None

        async def paused_by_the_signal() -> bool:
            return _row_status(sqlite_engine, paused) == "PAUSED"

        await until(row_written)
        awake = await dev_env.get_current_time()
        assert awake < run_at - timedelta(seconds=LEAD + 4)
        kinds = await _event_kinds(handle)
        assert "timer_started_event_attributes" in kinds
        assert "activity_task_scheduled_event_attributes" not in kinds
        await until(paused_by_the_signal)
        assert await dev_env.get_current_time() < run_at - timedelta(seconds=LEAD + 4)

        state = await handle.result()
        assert state.status is TaskStatus.COMPLETED and calls.at == [run_at]
        [run] = executions(sqlite_engine, state.task_id)
        assert run.started_at is not None
        assert timedelta(0) <= run.started_at - run_at < timedelta(seconds=1)
        assert executions(sqlite_engine, paused.id.removeprefix("task-")) == []
        await paused.execute_update(TaskWorkflow.cancel_update, "test over")


def _row_status(engine: Engine, handle: WorkflowHandle[TaskWorkflow, TaskState]) -> str | None:
    row = get_task(engine, handle.id.removeprefix("task-"), "t1")
    return None if row is None else row.status


async def _status_is(handle: WorkflowHandle[TaskWorkflow, TaskState], status: WorkflowExecutionStatus) -> bool:
    return (await handle.describe()).status is status
