"""Lateness and drift count from the instant the scheduler aimed at (the fire's time plus its
jitter), on the time-skipping server with the real workflow and jobs activity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from api.schemas import ExecutionOut
from scheduling.policy import instant_of
from store.models import TaskExecution
from tests.conftest import new_worker
from tests.workflows.helpers import executions, spec, start_task

# A fixed fire and task id, so that the jitter is known: 17.027 s of the 30 s window.
RUN_AT = datetime(2031, 1, 6, 9, 0, tzinfo=UTC)
TASK_ID = "jitter-a"
JITTER = timedelta(seconds=17.027)


async def _jittered_run(env: WorkflowEnvironment, engine: Engine, **fields: Any) -> TaskExecution:
    task = spec(schedule_type="once", run_at=RUN_AT, jitter_seconds=30, **fields)
    assert instant_of(task, TASK_ID, RUN_AT, 30) == RUN_AT + JITTER
    async with new_worker(env.client, engine) as worker:
        handle = await start_task(env, worker.task_queue, task, task_id=TASK_ID)
        await handle.result()
    [row] = executions(engine, TASK_ID)
    assert row.status == "COMPLETED" and row.started_at is not None
    assert row.started_at >= RUN_AT + JITTER  # it did wait for its jittered instant
    return row


async def test_jittered_run_is_not_late(time_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    row = await _jittered_run(time_env, sqlite_engine)
    assert row.instant == RUN_AT + JITTER
    assert row.lateness_ms is not None and row.lateness_ms < 1000, row.lateness_ms
    assert row.lateness_ms == (row.started_at - row.instant).total_seconds() * 1000
    # The API shows the jitter beside the lateness.
    shown = ExecutionOut.from_row(row)
    assert shown.jitter_ms == 17_027 and shown.instant == RUN_AT + JITTER


async def test_jitter_larger_than_drift_threshold_is_not_drift(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    row = await _jittered_run(time_env, sqlite_engine, drift_threshold_seconds=1)
    assert row.lateness_ms is not None and row.lateness_ms < 1000
    assert row.drifted is False
