"""A pause starts when it was asked, and every fire inside it is recorded however it ends; a
re-time leaves no run of the old schedule behind in the new one."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from scheduling.policy import UNTAKEN_AFTER
from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import (
    TaskHandle,
    executions,
    handler_job,
    pass_time_without_worker,
    running_task,
    spec,
    start_task,
    stoppable_worker,
    task_state,
    until,
)
from tests.workflows.test_reported_starts import Counting, split_workers, start_ahead
from workflows.task import NEVER_RUNS, TaskWorkflow

MINUTES = timedelta(minutes=1)


async def test_fires_before_a_pause_go_to_the_missed_run_policy(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=1800, missed_run_policy="catchup")
    async with stoppable_worker(time_env, sqlite_engine, queue):
        handle = await start_task(time_env, queue, task)
        await time_env.sleep(10 * MINUTES)
        before = await task_state(handle)
    try:
        # Down from +10 to +130 minutes: the fires at +30, +60, +90, +120 are missed; the
        # pause comes before the workflow is back.
        assert before.next_fire_at is not None
        await pass_time_without_worker(time_env, handle, timedelta(hours=2), first_wake=before.next_fire_at)
        await handle.signal(TaskWorkflow.pause_signal, "after the outage")
        async with new_worker(time_env.client, sqlite_engine, task_queue=queue):
            await time_env.sleep(MINUTES)
            held = await task_state(handle)
            await handle.execute_update(TaskWorkflow.resume_update)
            await time_env.sleep(MINUTES)
            after = await task_state(handle)
    finally:
        await handle.terminate("test over")

    created = before.created_at
    assert held.paused and [r.trigger for r in held.queue] == ["catchup"] * 4
    rows = executions(sqlite_engine, before.task_id)
    assert [(r.scheduled_at - created, r.status, r.trigger) for r in rows] == [
        (30 * k * MINUTES, "COMPLETED", "catchup") for k in (1, 2, 3, 4)]
    assert after.next_fire_at == created + 150 * MINUTES and after.run_count == 4


async def test_fires_inside_a_pause_are_recorded_when_cancelled_during_it(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=1800)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(10 * MINUTES)
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        await time_env.sleep(150 * MINUTES)  # fires at +30 ... +150 minutes
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
        final = await handle.result()

    rows = executions(sqlite_engine, final.task_id)
    assert [(r.scheduled_at - final.created_at, r.status, r.reason) for r in rows] == [
        (30 * k * MINUTES, "SKIPPED", "paused") for k in range(1, 6)]
    assert final.status is TaskStatus.CANCELLED and final.skipped_count == 5


async def test_fires_inside_a_pause_are_recorded_when_retimed_during_it(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=1800)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(10 * MINUTES)
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        await time_env.sleep(150 * MINUTES)  # fires at +30 ... +150 minutes
        updated = await handle.execute_update(
            TaskWorkflow.update_task, TaskChanges(interval_seconds=600, max_runs=1))
        await time_env.sleep(15 * MINUTES)  # the new schedule's first fire, still paused
        await handle.execute_update(TaskWorkflow.resume_update)
        final = await handle.result()

    created, retimed = final.created_at, updated.anchor
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.scheduled_at, r.status, r.reason) for r in rows] == [
        *[(created + 30 * k * MINUTES, "SKIPPED", "paused") for k in range(1, 6)],
        (retimed + 10 * MINUTES, "SKIPPED", "paused"),
        (retimed + 20 * MINUTES, "COMPLETED", None),
    ]
    assert final.status is TaskStatus.COMPLETED


async def test_fires_inside_a_pause_are_recorded_when_the_end_date_passes_during_it(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    task = spec(schedule_type="interval", interval_seconds=1800, end_date=now + 100 * MINUTES)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(10 * MINUTES)
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        await time_env.sleep(2 * 60 * MINUTES)  # fires at +30, +60, +90; the end at +100
        state = await task_state(handle)

    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at - state.created_at, r.status, r.reason) for r in rows] == [
        (30 * k * MINUTES, "SKIPPED", "paused") for k in (1, 2, 3)]
    assert state.status is TaskStatus.COMPLETED


async def test_fires_inside_a_pause_are_recorded_across_a_continue_as_new(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # On the dev server: the time-skipping server can strand the run a continue-as-new starts
    # (a query never answered; temporalio/sdk-java#3088).
    task = spec(schedule_type="interval", interval_seconds=8, max_runs=1)  # 8 s to pause in
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(history_limit=80)) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        created = (await task_state(handle)).created_at
        await asyncio.sleep(max(0.0, (created + timedelta(seconds=17)
                                      - await dev_env.get_current_time()).total_seconds()))
        for _ in range(30):  # manual runs go on in a pause, and grow the history
            await handle.execute_update(TaskWorkflow.trigger_update)
            if await _continued(handle):
                break
        await until(lambda: _continued(handle))
        resumed = await handle.execute_update(TaskWorkflow.resume_update)
        final = await asyncio.wait_for(handle.result(), timeout=60)

    # Every fire while paused (+8 and +16 before the continue-as-new, any more before the
    # resume) is SKIPPED paused; the first after the resume runs.
    rows = [r for r in executions(sqlite_engine, final.task_id) if r.trigger != "manual"]
    assert len(rows) >= 3
    assert [r.scheduled_at - created for r in rows] == [
        timedelta(seconds=8 * k) for k in range(1, len(rows) + 1)]
    assert [(r.status, r.reason) for r in rows] == [("SKIPPED", "paused")] * (len(rows) - 1) + [
        ("COMPLETED", None)]
    assert resumed.resumed_at is not None
    assert rows[-2].scheduled_at <= resumed.resumed_at < rows[-1].scheduled_at
    assert final.status is TaskStatus.COMPLETED and final.executed == 1


async def _continued(handle: TaskHandle) -> bool:
    return (await task_state(handle)).continued_as_new > 0


async def test_a_run_of_the_old_schedule_that_comes_back_after_an_update_is_skipped_rescheduled(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Counting()
    task = spec(schedule_type="interval", interval_seconds=14, max_runs=1,
                job_details=handler_job("count"))
    async with split_workers(dev_env, sqlite_engine, job, lead=10) as (queue, up, _):
        handle = await start_ahead(dev_env, queue, task)
        first = (await task_state(handle)).created_at + timedelta(seconds=14)
        # Re-timed 1.5 s before the run sent ahead reaches its instant: too near to withdraw,
        # and no jobs worker takes it.
        await asyncio.sleep(max(0.0, (first - timedelta(seconds=1.5)
                                      - await dev_env.get_current_time()).total_seconds()))
        updated = await handle.execute_update(TaskWorkflow.update_task,
                                              TaskChanges(interval_seconds=20))
        assert updated.running and updated.next_fire_at is None  # max_runs counts it ahead
        await asyncio.sleep((UNTAKEN_AFTER + timedelta(seconds=3)).total_seconds())
        back = await task_state(handle)
        up.set()
        final = await asyncio.wait_for(handle.result(), timeout=60)

    new_first = updated.anchor + timedelta(seconds=20)
    # No catch-up of the old fire; the new schedule is where the update put it (its first
    # fire waits, or is already sent ahead).
    assert back.queue == [] and new_first in (back.next_fire_at, back.latest_taken)
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.scheduled_at, r.status, r.reason, r.trigger) for r in rows] == [
        (first, "SKIPPED", "rescheduled", "schedule"),
        (new_first, "COMPLETED", None, "schedule"),
    ]
    assert final.status is TaskStatus.COMPLETED and final.run_count == 1


async def test_a_change_that_leaves_the_task_no_run_is_refused_and_the_task_goes_on(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=600, max_runs=5)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(25 * MINUTES)  # two runs
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(TaskWorkflow.update_task, TaskChanges(max_runs=2))
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == NEVER_RUNS
        assert cause.details == ({"field": "max_runs"},)
        assert str(cause.message) == ("max_runs: the task has run 2 time(s) already; max_runs=2 "
                                      "leaves it no run")
        await handle.execute_update(TaskWorkflow.update_task, TaskChanges(max_runs=3))
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.success_count == 3
