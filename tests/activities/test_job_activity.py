"""The job activity on its own (no server): what it reports around the end of a job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio.testing import ActivityEnvironment

from activities.handlers import HandlerContext
from activities.jobs import JobActivities
from activities.payloads import JobInput
from scheduling.spec import HandlerJob


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
