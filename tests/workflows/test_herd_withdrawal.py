"""A run sent further ahead for its place in a herd heartbeats further apart near its instant,
and its workflow withdraws it only while a heartbeat can still carry the withdrawal there in
time (real dev server, real workers, real time).

Base lead 6 s, 10 runs a second dispatched ahead of a herd: a task created as the 61st of one
goes 12 s ahead and beats every 6 s, at about 12 s and 6 s before its instant, then as it
starts. It is withdrawn only more than 7 s before its instant (the usual runs: 3 s).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from scheduling.spec import TaskSpec
from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import (
    Blocker,
    TaskHandle,
    executions,
    handler_job,
    sent_jobs,
    spec,
    start_task,
    task_state,
    until,
)
from workflows.task import TaskWorkflow

OPTIONS = RunOptions(lead_seconds=6, max_lead_seconds=30, herd_rate=10)
CROWD = 60  # 6 s of herd lead: the run's beat
AHEAD = 20.0  # the instant, from the task's start


def _every_minute_from(start: datetime) -> TaskSpec:
    return spec(schedule_type="interval", interval_seconds=60, start_date=start,
                job_details=handler_job("block"))


async def _pause_at(env: WorkflowEnvironment, handle: TaskHandle, instant: datetime,
                    before_instant: float) -> None:
    """Pause the task ``before_instant`` seconds before ``instant``, once its run was sent."""
    async def dispatched() -> bool:
        return bool((await task_state(handle)).running)

    await until(dispatched)
    now = await env.get_current_time()
    await asyncio.sleep((instant - now).total_seconds() - before_instant)
    await handle.execute_update(TaskWorkflow.pause_update, "pause")


async def test_a_pause_nearer_than_a_herd_runs_beat_lets_it_run_whole(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 4.5 s before: outside the usual 3 s, inside this run's 7 s. Withdrawn, it would learn of
    # it at its first beat after its start and be killed while it runs.
    job = Blocker()
    now = await dev_env.get_current_time()
    instant = now + timedelta(seconds=AHEAD)
    task = _every_minute_from(instant)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": job},
                          run_options=OPTIONS) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, crowd=CROWD)
        await _pause_at(dev_env, handle, instant, 4.5)
        await asyncio.wait_for(job.started.wait(), timeout=15)
        await asyncio.sleep(3)  # past the beat a withdrawal would have come with
        job.open.set()

        async def ended() -> bool:
            return [r.status for r in executions(sqlite_engine, handle.id.removeprefix("task-"))
                    ] == ["COMPLETED"]

        await until(ended)
        paused = await task_state(handle)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
    assert not job.cancelled.is_set()
    assert paused.status is TaskStatus.PAUSED and paused.run_count == 1
    [(sent, _)] = await sent_jobs(dev_env, handle.id.removeprefix("task-"))
    assert 6.0 <= sent.beat_seconds <= 6.5  # and twice how late its timer fired (policy.lead)


async def test_a_pause_further_than_a_herd_runs_beat_withdraws_it_before_it_starts(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 9.5 s before: after its dispatch, before its beat at about 6 s.
    job = Blocker()
    now = await dev_env.get_current_time()
    instant = now + timedelta(seconds=AHEAD)
    task = _every_minute_from(instant)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": job},
                          run_options=OPTIONS) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, crowd=CROWD)
        await _pause_at(dev_env, handle, instant, 9.5)

        async def withdrawn() -> bool:
            return not (await task_state(handle)).running

        await until(withdrawn, timeout=9)
        await asyncio.sleep(2 + (instant - await dev_env.get_current_time()).total_seconds())
        paused = await task_state(handle)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
    assert not job.started.is_set()
    assert paused.status is TaskStatus.PAUSED and paused.run_count == 0
    assert [r.status for r in executions(sqlite_engine, handle.id.removeprefix("task-"))
            if r.status == "COMPLETED"] == []
