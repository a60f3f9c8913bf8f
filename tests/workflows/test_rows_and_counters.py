"""A task's counters agree with its execution rows: a run no worker started and then cancelled
is no run, and a replayed dead letter is the same run again."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from scheduling.status import DeadLetter, TaskStatus
from store.tasks import read_task, scheduled_runs_executed, set_dead_letter
from tests.conftest import new_worker
from tests.workflows.helpers import (
    executions,
    handler_job,
    running_task,
    spec,
    task_state,
    until,
)
from tests.workflows.test_reported_starts import Counting, split_workers, start_ahead
from workflows.starter import state_from_row
from workflows.state import ReplayRequest
from workflows.task import TaskWorkflow


def assert_counters_match_rows(engine: Engine, task_id: str) -> None:
    """The task row's counters are what its execution rows say."""
    row = read_task(engine, task_id, "t1")
    assert row is not None
    outcomes = Counter(r.status for r in executions(engine, task_id))
    assert (row.run_count, row.success_count, row.failure_count, row.skipped_count) == (
        outcomes["COMPLETED"] + outcomes["FAILED"] + outcomes["CANCELLED"],
        outcomes["COMPLETED"], outcomes["FAILED"], outcomes["SKIPPED"])


async def test_a_run_no_worker_started_then_cancelled_is_skipped_and_not_counted(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Counting()
    async with split_workers(dev_env, sqlite_engine, job, lead=0) as (queue, _up, _down):  # no jobs worker
        now = await dev_env.get_current_time()
        task = spec(schedule_type="interval", interval_seconds=3600, start_date=now + timedelta(seconds=2),
                    max_runs=2, job_details=handler_job("count"))
        handle = await start_ahead(dev_env, queue, task)

        async def sent() -> bool:
            return bool((await task_state(handle)).running)

        await until(sent)  # past its instant, dispatched, taken by no worker
        answer = await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        final = await asyncio.wait_for(handle.result(), timeout=30)
    assert job.started == [] and answer.started_before_cancel == []
    assert final.status is TaskStatus.CANCELLED
    assert (final.run_count, final.cancelled_count, final.executed) == (0, 0, 0)
    [row] = executions(sqlite_engine, final.task_id)
    assert (row.status, row.reason) == ("SKIPPED", "cancelled")
    assert scheduled_runs_executed(sqlite_engine, final.task_id) == 0  # max_runs counts none
    assert_counters_match_rows(sqlite_engine, final.task_id)


class FailsOnce:
    """A handler whose first call fails; every later call succeeds."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls.append(ctx.execution_id)
        if len(self.calls) == 1:
            raise RuntimeError("first call fails")


async def test_a_replayed_dead_letter_is_no_new_run_and_keeps_its_trigger(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = FailsOnce()
    task = spec(schedule_type="interval", interval_seconds=600, max_runs=3,
                job_details=handler_job("flaky"), retry_policy={"max_attempts": 1})
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"flaky": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(timedelta(minutes=11))
        state = await task_state(handle)
        assert state.failure_count == 1 and state.last_run is not None
        dead = state.last_run
        assert set_dead_letter(sqlite_engine, dead.execution_id, state=DeadLetter.REPLAYED)  # as the API does
        await handle.execute_update(TaskWorkflow.replay_update, ReplayRequest(
            execution_id=dead.execution_id, scheduled_at=dead.scheduled_at))
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.status, r.trigger) for r in rows] == [("COMPLETED", "schedule")] * 3
    assert rows[0].id == dead.execution_id and rows[0].dead_letter == "replayed"
    assert job.calls.count(dead.execution_id) == 2
    assert (final.run_count, final.success_count, final.failure_count) == (3, 3, 0)
    assert final.executed == 3 == scheduled_runs_executed(sqlite_engine, final.task_id)
    row = read_task(sqlite_engine, final.task_id, "t1")
    assert row is not None and row.executed == 3  # the workflow's own count, on its row
    assert_counters_match_rows(sqlite_engine, final.task_id)


def test_a_task_restarted_from_its_row_keeps_its_cancelled_runs_counted() -> None:
    row = SimpleNamespace(id="a", tenant_id="t1", spec=spec(schedule_type="interval", interval_seconds=60
                                                             ).model_dump(mode="json"),
                          created_at=datetime(2026, 12, 1, tzinfo=UTC), status="PENDING",
                          status_reason=None, run_count=5, success_count=3, failure_count=1,
                          skipped_count=2, spec_version=4, next_probe_at=None, backfill=None)
    state = state_from_row(row, next_fire_at=None, executed=5, reason="restarted")
    assert (state.run_count, state.success_count, state.failure_count, state.cancelled_count) == (5, 3, 1, 1)
    assert state.spec_version == 4
