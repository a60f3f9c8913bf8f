"""A run sent further ahead for its place in a herd heartbeats further apart near its instant,
and its workflow withdraws it only while a heartbeat can still carry the withdrawal there in
time (real dev server, real workers, real time).

Base lead 6 s, 10 runs a second dispatched ahead of a herd, at most 12 s: a task created as
the 61st of one is sent about 12 s ahead (its timer wakes it up to a second early or late) and
beats about 6 s apart: when it is sent, about 6 s before its instant, then as it starts. It is
withdrawn only more than its beat and a second before its instant (the usual runs: 3 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from scheduling.status import TaskStatus
from store.models import TaskExecution
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


@asynccontextmanager
async def _herd_run(env: WorkflowEnvironment, engine: Engine, *, ahead: float = 20.0,
                    crowd: int = CROWD, options: RunOptions = OPTIONS,
                    ) -> AsyncIterator[tuple[Blocker, datetime, TaskHandle]]:
    """A task created into a herd, every minute from ``ahead`` seconds on, its job blocking
    until the test opens it; yields once its first run was sent."""
    job = Blocker()
    instant = await env.get_current_time() + timedelta(seconds=ahead)
    task = spec(schedule_type="interval", interval_seconds=60, start_date=instant,
                job_details=handler_job("block"))
    async with new_worker(env.client, engine, handlers={"block": job},
                          run_options=options) as worker:
        handle = await start_task(env, worker.task_queue, task, crowd=crowd)

        async def sent() -> bool:
            return bool((await task_state(handle)).running)

        await until(sent, timeout=15)
        yield job, instant, handle


async def _until_before(env: WorkflowEnvironment, instant: datetime, seconds: float) -> None:
    await asyncio.sleep((instant - await env.get_current_time()).total_seconds() - seconds)


def _rows(engine: Engine, handle: TaskHandle) -> list[TaskExecution]:
    return executions(engine, handle.id.removeprefix("task-"))


async def test_a_pause_nearer_than_a_herd_runs_beat_lets_it_run_whole(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 4.5 s before: outside the usual 3 s, inside this run's 6-8 s. Withdrawn, it would learn
    # of it at its first beat after its start and be killed while it runs.
    async with _herd_run(dev_env, sqlite_engine) as (job, instant, handle):
        await _until_before(dev_env, instant, 4.5)
        await handle.execute_update(TaskWorkflow.pause_update, "pause")
        await asyncio.wait_for(job.started.wait(), timeout=15)
        await asyncio.sleep(3)  # past the beat a withdrawal would have come with
        job.open.set()

        async def ended() -> bool:
            return [r.status for r in _rows(sqlite_engine, handle)] == ["COMPLETED"]

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
    async with _herd_run(dev_env, sqlite_engine) as (job, instant, handle):
        await _until_before(dev_env, instant, 10.5)
        await handle.execute_update(TaskWorkflow.pause_update, "pause")

        async def withdrawn() -> bool:
            return not (await task_state(handle)).running

        await until(withdrawn, timeout=9)
        await _until_before(dev_env, instant, -2)
        paused = await task_state(handle)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
    assert not job.started.is_set()
    assert paused.status is TaskStatus.PAUSED and paused.run_count == 0
    assert [r.status for r in _rows(sqlite_engine, handle) if r.status == "COMPLETED"] == []


async def test_a_cancel_within_a_herd_runs_margin_answers_only_after_the_run_heard_of_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # 34 s of herd lead: sent 40-41 s ahead, it beats 20 s apart, at about 40 and 20 s before
    # its instant, then as it starts. Cancelled 17 s before, within its 21 s margin, it hears
    # of the cancel only as it starts: the answer waits for that (10 s would answer first).
    options = RunOptions(lead_seconds=6, max_lead_seconds=40, herd_rate=10)
    async with _herd_run(dev_env, sqlite_engine, ahead=45, crowd=340,
                         options=options) as (job, instant, handle):
        await _until_before(dev_env, instant, 17)
        answer = await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        started_first = job.started.is_set()
        await _until_before(dev_env, instant, -3)
    # No run starts after the answer; one that started first is in it.
    assert job.started.is_set() is started_first
    assert answer.status is TaskStatus.CANCELLED and answer.running == []
    [row] = _rows(sqlite_engine, handle)
    if started_first:
        assert answer.started_before_cancel == [row.id] and row.status == "CANCELLED"
    else:
        assert answer.started_before_cancel == [] and (row.status, row.reason) == ("SKIPPED", "cancelled")
