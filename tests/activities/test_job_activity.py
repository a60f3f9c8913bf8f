"""The job activity on its own (no server): what it reports around the end of a job, and
what a retry takes from the rows."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from structlog.testing import capture_logs
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.handlers import HandlerContext
from activities.jobs import JobActivities
from activities.payloads import STARTED, JobFailureDetails, JobInput
from scheduling.spec import HandlerJob
from scheduling.status import ExecutionStatus, JobFailure, Trigger, execution_id
from store.batch import BatchWriter, Write
from store.models import ExecutionRecord
from store.tasks import write_record


async def test_a_cancel_that_comes_as_the_job_ends_still_reports_its_end() -> None:
    ended = asyncio.Event()

    async def quick(ctx: HandlerContext) -> str:
        ended.set()
        return "done"

    env = ActivityEnvironment()
    jobs = JobActivities(http=None, handlers={"quick": quick}, client=None)  # type: ignore[arg-type]
    run = asyncio.create_task(env.run(jobs.run_job, JobInput(
        execution_id="t:1", task_id="t", tenant_id="x", scheduled_at=datetime.now(UTC),
        job=HandlerJob(type="handler", name="quick"),
    )))
    await ended.wait()
    env.cancel()  # reaches the activity after its job returned, before it reported the end
    result = await run
    assert result.output == "done" and result.started_at is not None


FIRE = datetime(2026, 1, 1, 10, tzinfo=UTC)


def _completed_row(engine: Engine, *, started_at: datetime) -> str:
    """Store a COMPLETED run of task t1's fire at FIRE (by the schedule) and return its id."""
    run_id = execution_id("t1", FIRE)
    row = ExecutionRecord(id=run_id, task_id="t1", tenant_id="x", scheduled_at=FIRE,
                          trigger=Trigger.SCHEDULE, status=ExecutionStatus.COMPLETED, attempts=1,
                          started_at=started_at, finished_at=started_at + timedelta(seconds=1),
                          http_status=200)
    with engine.begin() as connection:
        write_record(engine, [row], None)(connection)
    return run_id


async def test_a_retried_backfill_runs_its_job_and_does_not_take_the_earlier_runs_outcome(
    sqlite_engine: Engine,
) -> None:
    # A backfill reruns an instant under the execution id of its earlier, COMPLETED run. Its
    # first attempt's RUNNING write does not land (the database blips) and its job fails: the
    # retry finds the earlier run's row, and must run the job, not return that run's outcome.
    run_id = _completed_row(sqlite_engine, started_at=FIRE)
    calls: list[int] = []

    async def job(ctx: HandlerContext) -> str:
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            raise ApplicationError("the target is down")  # retryable
        return "ran"

    class Blipping(BatchWriter):
        down = True

        async def submit(self, write: Write) -> None:
            if self.down:
                raise RuntimeError("the database is unavailable")
            await super().submit(write)

    writer = Blipping(sqlite_engine)
    jobs = JobActivities(http=None, handlers={"job": job}, client=None,  # type: ignore[arg-type]
                         engine=sqlite_engine, writer=writer)
    backfill = JobInput(execution_id=run_id, task_id="t1", tenant_id="x", scheduled_at=FIRE,
                        job=HandlerJob(type="handler", name="job"), trigger=Trigger.BACKFILL,
                        sent_at=datetime.now(UTC))
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError):
        await env.run(jobs.run_job, backfill)
    writer.down = False
    env.info = dataclasses.replace(env.info, attempt=2)
    result = await env.run(jobs.run_job, backfill)
    assert calls == [1, 2]
    assert result.attempt == 2 and result.output == "ran" and result.started_at != FIRE


async def test_a_retried_replay_whose_completion_was_lost_does_not_run_its_job_again(
    sqlite_engine: Engine,
) -> None:
    # A replay reruns a dead letter under its row, which keeps the trigger it first ran by: a
    # COMPLETED row a retry of the replay finds is the replay's own (its completion was lost).
    run_id = _completed_row(sqlite_engine, started_at=datetime.now(UTC))
    calls: list[str] = []

    async def job(ctx: HandlerContext) -> str:
        calls.append(ctx.execution_id)
        return "ran"

    jobs = JobActivities(http=None, handlers={"job": job}, client=None,  # type: ignore[arg-type]
                         engine=sqlite_engine)
    replay = JobInput(execution_id=run_id, task_id="t1", tenant_id="x", scheduled_at=FIRE,
                      job=HandlerJob(type="handler", name="job"), trigger=Trigger.REPLAY,
                      sent_at=datetime.now(UTC))
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result = await env.run(jobs.run_job, replay)
    assert calls == [] and result.attempt == 1 and result.http_status == 200


async def test_a_handlers_own_beats_keep_the_mark_that_its_job_started() -> None:
    # A retry after its worker died reads that mark from the last beat: without it, and
    # without the run's row, the retry would be refused as a late first start.
    async def working(ctx: HandlerContext) -> str:
        for left in range(3):
            ctx.heartbeat(left)
            await asyncio.sleep(0.05)
        return "done"

    beats: list[tuple[object, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    jobs = JobActivities(http=None, handlers={"working": working}, client=None)  # type: ignore[arg-type]
    await env.run(jobs.run_job, JobInput(execution_id="t:1", task_id="t", tenant_id="x",
                                         scheduled_at=datetime.now(UTC),
                                         job=HandlerJob(type="handler", name="working")))
    handlers_beats = [b for b in beats if len(b) > 1]
    assert len(handlers_beats) == 3 and all(b[0] == STARTED for b in beats), beats


async def test_a_handlers_own_error_on_a_retry_says_which_attempt_failed() -> None:
    async def refusing(ctx: HandlerContext) -> None:
        raise ApplicationError("downstream refused")

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=3)
    jobs = JobActivities(http=None, handlers={"refusing": refusing}, client=None)  # type: ignore[arg-type]
    with pytest.raises(ApplicationError) as failed:
        await env.run(jobs.run_job, JobInput(execution_id="t:1", task_id="t", tenant_id="x",
                                             scheduled_at=datetime.now(UTC),
                                             job=HandlerJob(type="handler", name="refusing")))
    details = JobFailureDetails.of(failed.value.details)
    assert details is not None and details.attempt == 3


async def test_a_plain_function_handler_runs_off_the_event_loop_and_beats_through_it() -> None:
    # It blocks until a coroutine on the loop lets it go: on the loop itself it never would.
    release = threading.Event()

    def blocking(ctx: HandlerContext) -> str:
        ctx.heartbeat("working")
        if not release.wait(timeout=10):
            raise RuntimeError("the event loop stood still")
        return "done"

    async def let_go() -> None:
        await asyncio.sleep(0.1)
        release.set()

    beats: list[tuple[object, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    jobs = JobActivities(http=None, handlers={"blocking": blocking}, client=None)  # type: ignore[arg-type]
    job = JobInput(execution_id="t:1", task_id="t", tenant_id="x", scheduled_at=datetime.now(UTC),
                   job=HandlerJob(type="handler", name="blocking"))
    result, _ = await asyncio.gather(env.run(jobs.run_job, job), let_go())
    assert result.output == "done"
    assert (STARTED, "working") in beats


async def test_a_plain_function_handler_past_its_run_timeout_ends_the_run_as_timed_out() -> None:
    release, returned = threading.Event(), threading.Event()

    def stuck(ctx: HandlerContext) -> None:
        release.wait(timeout=10)
        returned.set()

    jobs = JobActivities(http=None, handlers={"stuck": stuck}, client=None)  # type: ignore[arg-type]
    job = JobInput(execution_id="t:1", task_id="t", tenant_id="x", scheduled_at=datetime.now(UTC),
                   job=HandlerJob(type="handler", name="stuck"), run_timeout_seconds=0.3)
    try:
        with capture_logs() as logs, pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(jobs.run_job, job)
        assert failed.value.type == JobFailure.RUN_TIMEOUT and not returned.is_set()
        # Its end is a failed attempt's (the SDK logs it), not a cancelled one's.
        assert "job.cancelled" not in [line["event"] for line in logs], logs
    finally:
        release.set()
