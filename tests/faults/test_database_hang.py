"""A task database that hangs instead of refusing (another connection holds its write lock)
does not stop a task's fires: a write attempt gives up once a commit has sat for
``WRITE_STALLED_AFTER`` and retries on a workflow timer, so the workflow task's commands go
out instead of waiting for the workflow task's heartbeat. The task has a calendar: before each
fire it reads the calendars (reads go on) while the write in flight hangs, and the history of
those interleaved local activities replays."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import date

from sqlalchemy import Engine
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from activities.options import RunOptions
from config.settings import DispatchSettings
from store.calendars import add_calendar
from store.models import Calendar
from tests.conftest import new_worker
from tests.workflows.helpers import (
    cancelled_and_counted,
    handler_job,
    locked_for_writes,
    spec,
    start_task,
    until,
)
from workflows.task import TaskWorkflow

LOCKED = 25.0  # seconds another connection holds the database's write lock


async def test_a_task_goes_on_running_its_fires_while_the_database_hangs(
    dev_env: WorkflowEnvironment, any_engine: Engine
) -> None:
    calls: list[float] = []

    async def count(ctx: object) -> None:
        calls.append(time.monotonic())

    holidays = add_calendar(any_engine, Calendar(id=uuid.uuid4().hex, tenant_id="t1", name="far",
                                                 dates=[date(2099, 12, 25).isoformat()]))
    task = spec(schedule_type="interval", interval_seconds=1, missed_run_policy="skip",
                job_details=handler_job("count"), exclude_calendars=[{"calendar_id": holidays.id}])
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
    replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())
