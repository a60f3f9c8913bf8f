"""Cancelling a task: while it sleeps and while its job runs, through the API's update and
through the plain `cancel` signal operators send with the Temporal CLI."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities import options
from activities.handlers import HandlerContext
from activities.options import RunOptions
from activities.starts import StartReports
from scheduling.policy import UNTAKEN_AFTER
from scheduling.status import TaskStatus, workflow_id
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
from workflows.starter import start_task_workflow
from workflows.state import TaskState
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


class FailFirst(Blocker):
    """Fails its first ``failures`` attempts, then blocks as Blocker does."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def __call__(self, ctx: HandlerContext) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("not yet")
        await super().__call__(ctx)


@pytest.mark.parametrize(("via", "failures"), [("update", 0), ("signal", 0), ("update", 1)])
async def test_cancel_while_running_cancels_the_job_through_its_heartbeats(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, via: str, failures: int
) -> None:
    now = await time_env.get_current_time()
    blocker = FailFirst(failures)
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
    # The attempt that was cancelled is its last, not the last its retry policy allows (3).
    assert run.attempts == failures + 1
    assert run.scheduled_at == now + timedelta(hours=1)
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and (row.status, row.status_reason) == ("CANCELLED", "stop it")
    assert row.last_run_status == "CANCELLED"


class BlockEach:
    """A handler that heartbeats until cancelled; one started event per execution id."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}

    def event(self, task_id: str) -> asyncio.Event:
        return self.started.setdefault(task_id, asyncio.Event())

    async def __call__(self, ctx: HandlerContext) -> None:
        self.event(ctx.task_id).set()
        while True:
            ctx.heartbeat()
            await asyncio.sleep(0.05)


async def test_a_job_cancelled_the_moment_it_starts_is_recorded_cancelled_while_running(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # A cancel a few milliseconds before a dispatched run's instant reaches its job only with
    # the job's next heartbeat, just after it started: the run is recorded as what it was
    # (started: CANCELLED and counted, and the cancel's answer lists it; or SKIPPED).
    blocker = BlockEach()
    base = datetime.now(UTC) + timedelta(seconds=3)
    run_ats = [base + timedelta(seconds=0.4 * n) for n in range(8)]
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": blocker},
                          run_options=RunOptions(lead_seconds=2)) as worker:
        handles = []
        for run_at in run_ats:
            task = spec(schedule_type="once", run_at=run_at, job_details=handler_job("block"),
                        heartbeat_timeout_seconds=2)
            task_id = uuid.uuid4().hex
            await start_task_workflow(dev_env.client, task_queue=worker.task_queue,
                                      task_id=task_id, tenant_id="t1", spec=task,
                                      created_at=datetime.now(UTC))
            handles.append(dev_env.client.get_workflow_handle_for(TaskWorkflow.run,
                                                                  workflow_id(task_id)))

        async def cancel_at(handle: TaskHandle, run_at: datetime, early: float) -> TaskState:
            await asyncio.sleep((run_at - datetime.now(UTC)).total_seconds() - early)
            await handle.execute_update(TaskWorkflow.cancel_update, "at the start")
            return await asyncio.wait_for(handle.result(), timeout=30)

        finals = await asyncio.gather(*(cancel_at(h, at, 0.005 * n)
                                        for n, (h, at) in enumerate(zip(handles, run_ats, strict=True))))
    for final in finals:
        [row] = executions(sqlite_engine, final.task_id)
        if blocker.event(final.task_id).is_set():
            assert (row.status, row.error, final.cancelled_count, final.run_count) == (
                "CANCELLED", "cancelled while running", 1, 1), row
            assert final.started_before_cancel == [row.id]  # the cancel's answer says so
        else:
            assert (row.status, row.reason, final.run_count) == ("SKIPPED", "cancelled", 0), row
    print("started before the cancel reached them:",
          sum(1 for f in finals if blocker.event(f.task_id).is_set()), "of", len(finals))


@pytest.mark.parametrize("report", ["late", "lost"])
async def test_a_cancelled_run_whose_start_report_is_late_or_lost_is_recorded_cancelled(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch, report: str
) -> None:
    # The jobs worker's "started" signal reaches the server 4 s late (a slow frontend), or never
    # (given up on after UNTAKEN_AFTER), and the task is cancelled while the job runs: the
    # cancelled end waits for the report, or says itself that the job started, so the workflow
    # counts a cancelled run, not a withdrawn one whose row stays RUNNING.
    original = StartReports._send

    async def late(self: StartReports, handle: Any, start: Any) -> bool:
        await asyncio.sleep(4)
        return await original(self, handle, start)

    async def lost(self: StartReports, handle: Any, start: Any) -> bool:
        await asyncio.sleep(UNTAKEN_AFTER.total_seconds())
        return False

    monkeypatch.setattr(StartReports, "_send", late if report == "late" else lost)
    blocker = Blocker()
    task = spec(schedule_type="once", run_at=datetime.now(UTC) + timedelta(seconds=2),
                job_details=handler_job("block"), heartbeat_timeout_seconds=2)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": blocker}) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        await asyncio.wait_for(blocker.started.wait(), timeout=30)
        await asyncio.sleep(0.5)  # the job's RUNNING row is written; its report is not out
        await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        final = await asyncio.wait_for(handle.result(), timeout=30)
    assert blocker.cancelled.is_set()
    [row] = executions(sqlite_engine, final.task_id)
    assert (row.status, row.error, row.finished_at is not None, final.status, final.run_count,
            final.cancelled_count) == (
        "CANCELLED", "cancelled while running", True, TaskStatus.CANCELLED, 1, 1), row


async def test_a_release_9_run_records_a_lost_start_reports_cancel_as_it_always_did(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs of release 9 replay their histories as they recorded them: the jobs worker's
    # CancelledWhileRunning is a failed run there (release 10 records it cancelled).
    async def lost(self: StartReports, handle: Any, start: Any) -> bool:
        await asyncio.sleep(UNTAKEN_AFTER.total_seconds())
        return False

    monkeypatch.setattr(StartReports, "_send", lost)
    monkeypatch.setattr(options, "RELEASE", 9)  # what the workflows worker answers its runs
    blocker = Blocker()
    task = spec(schedule_type="once", run_at=datetime.now(UTC) + timedelta(seconds=2),
                job_details=handler_job("block"), heartbeat_timeout_seconds=2)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"block": blocker}) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, release=9)
        await asyncio.wait_for(blocker.started.wait(), timeout=30)
        await asyncio.sleep(0.5)
        await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        final = await asyncio.wait_for(handle.result(), timeout=30)
    [row] = executions(sqlite_engine, final.task_id)
    assert (row.status, row.error, final.failure_count) == (
        "FAILED", "CancelledWhileRunning: cancelled while running", 1), row


async def test_a_failed_attempt_cancelled_while_its_lost_start_report_is_awaited_is_recorded_failed(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job fails, its start report is being given up on, and the task is cancelled
    # meanwhile: the failure, which says the job started, is recorded, not a withdrawal that
    # leaves the row RUNNING; and the worker keeps no report behind.
    reporters: list[StartReports] = []
    original_init = StartReports.__init__

    def init(self: StartReports, client: Any) -> None:
        original_init(self, client)
        reporters.append(self)

    async def lost(self: StartReports, handle: Any, report: Any) -> bool:
        await asyncio.sleep(UNTAKEN_AFTER.total_seconds())
        return False

    monkeypatch.setattr(StartReports, "__init__", init)
    monkeypatch.setattr(StartReports, "_send", lost)
    failed = asyncio.Event()

    async def fail(ctx: HandlerContext) -> None:
        failed.set()
        raise RuntimeError("boom")

    task = spec(schedule_type="once", run_at=datetime.now(UTC) + timedelta(seconds=2),
                job_details=handler_job("fail"), heartbeat_timeout_seconds=2)
    async with new_worker(dev_env.client, sqlite_engine, handlers={"fail": fail}) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        await asyncio.wait_for(failed.wait(), timeout=30)
        await asyncio.sleep(0.5)  # the attempt failed and waits for its start report
        await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        final = await asyncio.wait_for(handle.result(), timeout=30)
        await asyncio.sleep(UNTAKEN_AFTER.total_seconds())  # the report is given up on
        left = [dict(r._sending) for r in reporters]
    [row] = executions(sqlite_engine, final.task_id)
    assert (row.status, row.attempts, final.status, final.run_count) == (
        "FAILED", 1, TaskStatus.CANCELLED, 1), row
    assert row.error is not None and "boom" in row.error
    assert reporters and all(not sending for sending in left), left
