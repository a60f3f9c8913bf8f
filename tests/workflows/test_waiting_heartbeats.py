"""A run dispatched far ahead of its instant gets a heartbeat timeout of half its wait."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from activities.payloads import RUN_JOB
from scheduling.status import workflow_id
from tests.conftest import new_worker
from tests.workflows.helpers import spec
from workflows.starter import start_task_workflow


async def _run_job_heartbeat_timeouts(env: WorkflowEnvironment, task_id: str) -> list[float]:
    handle = env.client.get_workflow_handle(workflow_id(task_id))
    await handle.result()
    timeouts = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == RUN_JOB:
                timeouts.append(scheduled.heartbeat_timeout.ToTimedelta().total_seconds())
    return timeouts


async def test_a_run_waiting_longer_than_twice_its_heartbeat_timeout_gets_half_its_wait(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await dev_env.get_current_time()
    run_at = now + timedelta(seconds=8)
    ids = {"short": uuid.uuid4().hex, "usual": uuid.uuid4().hex}
    async with new_worker(dev_env.client, sqlite_engine,
                          run_options=RunOptions(lead_seconds=20.0, max_lead_seconds=60.0)) as worker:
        for name, heartbeat in (("short", 2.0), ("usual", 30.0)):
            # A lead longer than the wait: the run goes out in the workflow's first task.
            await start_task_workflow(
                dev_env.client, task_queue=worker.task_queue, task_id=ids[name], tenant_id="t1",
                spec=spec(schedule_type="once", run_at=run_at, heartbeat_timeout_seconds=heartbeat),
                created_at=now,
            )
        short = await _run_job_heartbeat_timeouts(dev_env, ids["short"])
        usual = await _run_job_heartbeat_timeouts(dev_env, ids["usual"])
    # Dispatched ~8 s ahead: a 2 s timeout becomes ~4 s, a 30 s one stays 30 s.
    assert len(short) == 1 and 3.0 <= short[0] <= 4.0, short
    assert usual == [30.0]
