"""A task database that hangs instead of refusing (another connection holds its write lock)
does not stop a task's fires: a write attempt gives up once a commit has sat for
``WRITE_STALLED_AFTER`` and retries on a workflow timer, so the workflow task's commands go
out instead of waiting for the workflow task's heartbeat."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from config.settings import DispatchSettings
from tests.conftest import new_worker
from tests.workflows.helpers import (
    cancelled_and_counted,
    handler_job,
    locked_for_writes,
    spec,
    start_task,
    until,
)

LOCKED = 25.0  # seconds another connection holds the database's write lock


async def test_a_task_goes_on_running_its_fires_while_the_database_hangs(
    dev_env: WorkflowEnvironment, any_engine: Engine
) -> None:
    calls: list[float] = []

    async def count(ctx: object) -> None:
        calls.append(time.monotonic())

    task = spec(schedule_type="interval", interval_seconds=1, missed_run_policy="skip",
                job_details=handler_job("count"))
    lead = DispatchSettings().lead_seconds  # the production default
    async with new_worker(dev_env.client, any_engine, handlers={"count": count},
                          run_options=RunOptions(lead_seconds=lead)) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        await until(lambda: asyncio.sleep(0, len(calls) >= 3), timeout=30)
        with locked_for_writes(any_engine):
            locked_at = time.monotonic()
            await asyncio.sleep(LOCKED)
            during = [at for at in calls if at >= locked_at]
        await asyncio.sleep(5)
        # Every fire of the lock ran on time (one fire a second; the first may fall just before).
        assert len(during) >= LOCKED - 2, len(during)
        await cancelled_and_counted(handle, any_engine, calls)
