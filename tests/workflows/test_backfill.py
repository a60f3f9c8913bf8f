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
from api.temporal import TemporalGateway
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
    until,
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


class HoldsOne:
    """Records each run's instant; the run of ``held`` heartbeats until ``go``."""

    def __init__(self, held: int) -> None:
        self.runs: list[datetime] = []
        self.held, self.holding, self.go = held, asyncio.Event(), asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.runs.append(ctx.scheduled_at)
        if len(self.runs) == self.held:
            self.holding.set()
            while not self.go.is_set():
                ctx.heartbeat()
                await asyncio.sleep(0.1)


async def test_a_keyed_backfill_retried_after_a_continue_as_new_is_answered_not_refused(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine,
) -> None:
    # Its first answer lost, the client sends the backfill again under its key while the
    # backfill runs in a later workflow run: it gets the task's state, not "a backfill of this
    # task is running already", and no instant runs twice.
    handler = HoldsOne(held=9)
    task = spec(schedule_type="interval", interval_seconds=3600, job_details=handler_job("hold"))
    async with new_worker(dev_env.client, sqlite_engine, handlers={"hold": handler},
                          run_options=RunOptions(history_limit=40)) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        gateway = TemporalGateway(dev_env.client, worker.task_queue)
        task_id = (await task_state(handle)).task_id
        now = await dev_env.get_current_time()
        past = [now - timedelta(minutes=10 * k) for k in range(12, 0, -1)]
        await gateway.backfill(task_id, request(past), request_id="cccc3333")
        await asyncio.wait_for(handler.holding.wait(), timeout=60)
        midway = await task_state(handle)
        assert midway.continued_as_new > 0 and midway.backfill is not None
        assert midway.backfill.status == "running"
        again = await gateway.backfill(task_id, request(past), request_id="cccc3333")
        assert again.backfill is not None and again.backfill.asked_at == midway.backfill.asked_at
        handler.go.set()

        async def done() -> bool:
            backfill = (await task_state(handle)).backfill
            return backfill is not None and backfill.status == "done"

        await until(done, timeout=60)
        await handle.terminate("test over")
    assert handler.runs == past  # each once, oldest first
