"""Failed runs: retries up to max_attempts, then FAILED; HTTP 4xx is not retried, 5xx is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import Failing, executions, handler_job, spec, start_task

FAST_RETRIES = {"max_attempts": 3, "initial_interval_seconds": 0.1}


async def test_failing_handler_is_retried_then_the_run_and_the_task_fail(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    failing = Failing()
    task = spec(
        schedule_type="once",
        run_at=now + timedelta(minutes=5),
        job_details=handler_job("explode"),
        retry_policy=FAST_RETRIES,
    )
    async with new_worker(time_env.client, sqlite_engine, handlers={"explode": failing}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert failing.calls == 3
    assert state.status is TaskStatus.FAILED and state.failure_count == 1
    [run] = executions(sqlite_engine, state.task_id)
    assert (run.status, run.attempts) == ("FAILED", 3)
    assert run.error is not None and "RuntimeError: boom #3" in run.error
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None
    assert (row.status, row.failure_count, row.last_run_status) == ("FAILED", 1, "FAILED")


@pytest.mark.parametrize(
    ("status", "requests"),
    [(404, 1), (400, 1), (500, 3), (503, 3), (429, 3)],
)
async def test_http_client_errors_are_not_retried_server_errors_are(
    time_env: WorkflowEnvironment,
    sqlite_engine: Engine,
    target: TargetServer,
    status: int,
    requests: int,
) -> None:
    now = await time_env.get_current_time()
    task = spec(
        schedule_type="once",
        run_at=now + timedelta(minutes=5),
        job_details={"type": "http", "url": target.url(f"/status/{status}"), "method": "POST"},
        retry_policy=FAST_RETRIES,
    )
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert len(target.received) == requests
    assert state.status is TaskStatus.FAILED
    [run] = executions(sqlite_engine, state.task_id)
    assert (run.status, run.attempts, run.http_status) == ("FAILED", requests, status)
    assert run.error is not None and f"HTTP {status}" in run.error
    assert run.response_snippet == f"answered {status}"
    # every attempt carries the same idempotency key: the execution id
    assert {r.headers["Idempotency-Key"] for r in target.received} == {run.id}
