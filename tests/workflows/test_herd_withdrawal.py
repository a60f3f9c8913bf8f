"""A run sent further ahead for its place in a herd heartbeats further apart near its instant,
and its workflow withdraws it only while a heartbeat can still carry the withdrawal there in
time (real dev server, real workers, real time).

Base lead 6 s, 10 runs a second dispatched ahead of a herd, at most 12 s: a task created as
the 61st of one is sent about 12 s ahead (its timer wakes it up to a second early or late) and
beats about 6 s apart: when it is sent, about 6 s before its instant, then as it starts. It is withdrawn only more
than its beat and a second before its instant (the usual runs: 3 s).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
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

OPTIONS = RunOptions(lead_seconds=6, max_lead_seconds=12, herd_rate=10)
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
    # 4.5 s before: outside the usual 3 s, inside this run's 6-8 s. Withdrawn, it would learn
    # of it at its first beat after its start and be killed while it runs.
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
    assert paused.paused_at is not None and instant - paused.paused_at > timedelta(seconds=3)
    [(sent, _)] = await sent_jobs(dev_env, handle.id.removeprefix("task-"))
    # Its wait past the usual lead.
    assert sent.not_before is not None and sent.sent_at is not None
    assert 4.0 <= sent.beat_seconds <= 7.5
    assert sent.beat_seconds == pytest.approx((sent.not_before - sent.sent_at).total_seconds() - 6)


async def test_a_pause_further_than_a_herd_runs_beat_withdraws_it_before_it_starts(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 10.5 s before: after its dispatch, before its beat about 6 s before.
    job = Blocker()
    now = await dev_env.get_current_time()
    instant = now + timedelta(seconds=AHEAD)
    task = _every_minute_from(instant)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": job},
                          run_options=OPTIONS) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, crowd=CROWD)
        await _pause_at(dev_env, handle, instant, 10.5)

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


async def test_a_cancel_within_a_herd_runs_margin_answers_only_after_the_run_heard_of_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 34 s of herd lead: sent 40-41 s ahead, it beats 20 s apart, at about 40 and 20 s before
    # its instant, then as it starts. Cancelled 17 s before, within its 21 s margin, it hears
    # of the cancel only as it starts: the answer waits for that (10 s would answer first).
    job = Blocker()
    options = RunOptions(lead_seconds=6, max_lead_seconds=40, herd_rate=10)
    now = await dev_env.get_current_time()
    instant = now + timedelta(seconds=45)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": job},
                          run_options=options) as worker:
        handle = await start_task(dev_env, worker.task_queue, _every_minute_from(instant),
                                  crowd=340)

        async def dispatched() -> bool:
            return bool((await task_state(handle)).running)

        await until(dispatched, timeout=15)
        await asyncio.sleep((instant - await dev_env.get_current_time()).total_seconds() - 17)
        answer = await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        started_first = job.started.is_set()
        await asyncio.sleep(3 + (instant - await dev_env.get_current_time()).total_seconds())
    # No run starts after the answer; one that started first is in it.
    assert job.started.is_set() is started_first
    assert answer.status is TaskStatus.CANCELLED and answer.running == []
    [row] = executions(sqlite_engine, handle.id.removeprefix("task-"))
    if started_first:
        assert answer.started_before_cancel == [row.id] and row.status == "CANCELLED"
    else:
        assert answer.started_before_cancel == [] and (row.status, row.reason) == ("SKIPPED", "cancelled")
