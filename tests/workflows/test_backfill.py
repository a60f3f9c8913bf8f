"""Backfill in the workflow (time-skipping server, real jobs activity): every instant runs
once, oldest first, across continue-as-new; a one-time task runs its backfill too; max_runs does
not count its runs; a backfill asked as the workers return leaves the missed fires to the
catch-up, so each runs once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from activities.options import RunOptions
from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import (
    executions,
    handler_job,
    pass_time_without_worker,
    spec,
    start_task,
    stoppable_worker,
    task_state,
)
from workflows.state import BackfillItem, BackfillRequest
from workflows.task import TaskWorkflow


class Recorder:
    """A handler that records the instant of every run it makes."""

    def __init__(self) -> None:
        self.runs: list[datetime] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.runs.append(ctx.scheduled_at)


def request(instants: list[datetime]) -> BackfillRequest:
    return BackfillRequest(mode="missing", start=instants[0], end=instants[-1] + timedelta(seconds=1),
                           instants=[BackfillItem(scheduled_at=at) for at in instants])


async def test_every_instant_runs_once_oldest_first_across_continue_as_new(
    time_env: WorkflowEnvironment, sqlite_engine: Engine,
) -> None:
    recorder = Recorder()
    task = spec(schedule_type="interval", interval_seconds=3600, max_runs=1,
                job_details=handler_job("record"))
    async with new_worker(time_env.client, sqlite_engine, handlers={"record": recorder},
                          run_options=RunOptions(history_limit=40)) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        now = await time_env.get_current_time()
        past = [now - timedelta(minutes=10 * k) for k in range(12, 0, -1)]
        await handle.execute_update(TaskWorkflow.backfill_update, request(past))
        state = await handle.result()  # after its one scheduled run, an hour on
    assert state.continued_as_new > 0, "the history limit never continued the task as new"
    assert recorder.runs[:12] == past  # oldest first, each once, before the schedule's run
    assert len(recorder.runs) == 13
    assert state.status is TaskStatus.COMPLETED and state.executed == 1
    assert state.backfill is not None and (state.backfill.status, state.backfill.started) == ("done", 12)
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.trigger, r.status) for r in rows[:12]] == [
        (at, "backfill", "COMPLETED") for at in past]
    assert rows[12].trigger == "schedule" and len(rows) == 13


async def test_a_one_time_task_runs_its_backfill_and_its_own_run_then_ends(
    time_env: WorkflowEnvironment, sqlite_engine: Engine,
) -> None:
    recorder = Recorder()
    async with new_worker(time_env.client, sqlite_engine, handlers={"record": recorder}) as worker:
        now = await time_env.get_current_time()
        task = spec(schedule_type="once", run_at=now + timedelta(minutes=5),
                    job_details=handler_job("record"))
        handle = await start_task(time_env, worker.task_queue, task)
        await handle.execute_update(TaskWorkflow.backfill_update, request(
            [now - timedelta(minutes=2), now - timedelta(minutes=1)]))
        state = await handle.result()
    assert state.status is TaskStatus.COMPLETED
    assert state.backfill is not None and (state.backfill.status, state.backfill.started) == ("done", 2)
    assert len(recorder.runs) == 3


async def test_a_backfill_asked_as_workers_return_leaves_the_missed_fires_to_the_catch_up(
    time_env: WorkflowEnvironment, sqlite_engine: Engine,
) -> None:
    recorder = Recorder()
    task = spec(schedule_type="interval", interval_seconds=1800, missed_run_policy="catchup",
                max_runs=4, job_details=handler_job("record"))
    queue = f"tq-{uuid.uuid4()}"
    async with stoppable_worker(time_env, sqlite_engine, queue):
        handle = await start_task(time_env, queue, task)
        first = (await task_state(handle)).next_fire_at
    assert first is not None
    await pass_time_without_worker(time_env, handle, timedelta(hours=2, minutes=5), first_wake=first)
    missed = [first + timedelta(minutes=30 * k) for k in range(4)]
    # Sent while the workers are down: the workflow takes it with the fires it missed.
    asked = asyncio.create_task(handle.execute_update(TaskWorkflow.backfill_update, request(missed)))
    async with new_worker(time_env.client, sqlite_engine, task_queue=queue,
                          handlers={"record": recorder}, max_cached_workflows=0):
        await asked
        state = await handle.result()
    assert sorted(recorder.runs) == missed, "an instant ran twice, or not at all"
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.scheduled_at, r.trigger, r.status) for r in rows] == [
        (at, "catchup", "COMPLETED") for at in missed]
    assert state.backfill is not None and (state.backfill.status, state.backfill.started) == ("done", 0)
