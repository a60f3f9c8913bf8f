"""A job attempt whose completion never reaches the server: the server retries the attempt,
and the retry finds the run completed instead of running the job again."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio import activity
from temporalio.client import Client
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput
from temporalio.worker import Interceptor as WorkerInterceptor

from activities.handlers import HandlerContext
from activities.payloads import RUN_JOB
from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, spec, start_task
from workflows.state import TaskState


class LoseFirstCompletion(ClientInterceptor, WorkerInterceptor):
    """Keeps the first attempt of every job from reporting back, as a lost connection or a
    server out of capacity does: the job has run, and the server never hears of it."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Swallow(next, self.lost)


class _Swallow(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, lost: list[str]) -> None:
        super().__init__(next)
        self._lost = lost

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        info = activity.info()
        if info.activity_type == RUN_JOB and info.attempt == 1:
            self._lost.append(info.activity_id)
            await asyncio.Event().wait()  # no completion, no heartbeat: the server times it out
        return result


class Counting:
    """A handler that counts its calls and answers with the call number."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, ctx: HandlerContext) -> dict[str, int]:
        self.calls += 1
        return {"call": self.calls}


async def _run_losing_first_completion(
    env: WorkflowEnvironment, engine: Engine, **task: Any
) -> tuple[LoseFirstCompletion, Counting, TaskState]:
    """A one-time task due now whose first job attempt's completion is lost, run to its end."""
    lossy = LoseFirstCompletion()
    config = env.client.config()
    client = Client(
        env.client.service_client, namespace=config["namespace"],
        data_converter=config["data_converter"], interceptors=[lossy],
    )
    handler = Counting()
    due = spec(schedule_type="once", run_at=await env.get_current_time(),
               job_details=handler_job("count"), **task)
    async with new_worker(client, engine, handlers={"count": handler}) as worker:
        handle = await start_task(env, worker.task_queue, due)
        return lossy, handler, await handle.result()


# 1 s: the retry comes before the workflow would find an unreported run untaken (8 s past its
# instant); 20 s: after it, so only the start report, sent as the job starts, keeps the fire
# from being decided again and run a second time as a catch-up.
@pytest.mark.parametrize("heartbeat_timeout", [1, 20])
async def test_a_retry_after_a_lost_completion_does_not_run_the_job_again(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, heartbeat_timeout: int
) -> None:
    lossy, handler, state = await _run_losing_first_completion(
        time_env, sqlite_engine, heartbeat_timeout_seconds=heartbeat_timeout)

    assert len(lossy.lost) == 1  # the first attempt's completion was lost, and it was retried
    assert handler.calls == 1
    assert state.status is TaskStatus.COMPLETED and state.success_count == 1
    [run] = executions(sqlite_engine, state.task_id)
    assert (run.status, run.attempts) == ("COMPLETED", 1)
    assert run.started_at is not None and run.finished_at is not None


@pytest.mark.parametrize("heartbeat_timeout", [1, 20])
async def test_a_lost_completion_of_the_last_attempt_is_a_completed_run(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, heartbeat_timeout: int
) -> None:
    # No retry finds the row: the workflow reads it once the server times the attempt out.
    lossy, handler, state = await _run_losing_first_completion(
        time_env, sqlite_engine, heartbeat_timeout_seconds=heartbeat_timeout,
        retry_policy={"max_attempts": 1})

    assert len(lossy.lost) == 1 and handler.calls == 1
    assert state.status is TaskStatus.COMPLETED
    assert (state.success_count, state.failure_count) == (1, 0)
    [run] = executions(sqlite_engine, state.task_id)
    assert (run.status, run.attempts, run.error) == ("COMPLETED", 1, None)
    # Its end is the one the jobs worker wrote, not when the server gave up on the attempt.
    assert run.started_at is not None and run.finished_at is not None
    assert run.finished_at - run.started_at < timedelta(seconds=heartbeat_timeout)


def test_only_a_completed_row_counts_as_the_job_done() -> None:
    from datetime import UTC, datetime, timedelta

    from activities.execution_rows import completed_result
    from scheduling.status import Trigger
    from store.models import TaskExecution

    start = datetime(2026, 11, 30, 12, tzinfo=UTC)

    def row(status: str, finished: datetime | None, trigger: str = "schedule") -> TaskExecution:
        return TaskExecution(id="t:1", task_id="t", tenant_id="t1", scheduled_at=start, trigger=trigger,
                             status=status, started_at=start, finished_at=finished, attempts=2)

    scheduled = Trigger.SCHEDULE
    done = completed_result(row("COMPLETED", start + timedelta(seconds=1)), scheduled)
    assert done is not None and done.attempt == 2 and done.started_at == start
    assert completed_result(row("RUNNING", None), scheduled) is None  # still running, or died mid-job
    # a replayed dead letter's reopened row keeps the failed run's finish: not done
    assert completed_result(row("RUNNING", start - timedelta(hours=1)), scheduled) is None
    assert completed_result(row("FAILED", start + timedelta(seconds=1)), scheduled) is None
    assert completed_result(None, scheduled) is None
    # a backfill of the instant, whose own row write did not land, finds the earlier run's
    assert completed_result(row("COMPLETED", start + timedelta(seconds=1)), Trigger.BACKFILL) is None
    backfilled = row("COMPLETED", start + timedelta(seconds=1), trigger="backfill")
    assert completed_result(backfilled, Trigger.BACKFILL) is not None
    # a replayed dead letter keeps the row's trigger: its completed row is its own
    assert completed_result(row("COMPLETED", start + timedelta(seconds=1)), Trigger.REPLAY) is not None


async def test_the_workflow_takes_only_a_row_completed_since_the_run_was_sent(
    sqlite_engine: Engine,
) -> None:
    from datetime import UTC, datetime

    from activities.bookkeeping import BookkeepingActivities
    from activities.payloads import CompletedRun, RowAsk
    from scheduling.status import Trigger
    from store.models import ExecutionRecord
    from tests.store.writes import jobs_worker_completed

    start = datetime(2026, 11, 30, 12, tzinfo=UTC)
    jobs_worker_completed(sqlite_engine, ExecutionRecord(
        id="t:1", task_id="t", tenant_id="t1", scheduled_at=start, trigger="backfill",
        status="COMPLETED", attempts=1, started_at=start, finished_at=start + timedelta(seconds=2),
        http_status=200))
    books = BookkeepingActivities(sqlite_engine)

    async def asked(sent: datetime) -> CompletedRun | None:
        return await books.completed_row(RowAsk(execution_id="t:1", trigger=Trigger.BACKFILL,
                                                since=sent))

    done = await asked(start)
    assert done is not None and done.finished_at == start + timedelta(seconds=2)
    assert done.http_status == 200
    # Sent after that row's run ended: the row is an earlier run's of the same instant.
    assert await asked(start + timedelta(seconds=3)) is None
