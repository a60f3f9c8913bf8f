"""Under a backlog, high-priority runs start before low-priority ones (real dev server)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import spec
from workflows.starter import start_task_workflow


async def test_high_priority_runs_first_under_a_backlog(dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    queue = f"prio-{uuid.uuid4()}"
    now = datetime.now(UTC)
    due = now + timedelta(seconds=3)
    ids: dict[str, str] = {}

    async def create(name: str, priority: str, run_at: datetime, job: dict[str, object]) -> None:
        task_id = uuid.uuid4().hex
        ids[task_id] = priority
        await start_task_workflow(
            dev_env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
            spec=spec(task_name=name, schedule_type="once", run_at=run_at, priority=priority,
                      job_details=job),
            created_at=now,
        )

    # One job slot, held by a blocker while the others come due: they queue up in Temporal.
    await create("blocker", "medium", now, {"type": "handler", "name": "sleep", "args": {"seconds": 6}})
    for n in range(6):  # low ones are created (and come due) first
        await create(f"low-{n}", "low", due, {"type": "handler", "name": "noop"})
    for n in range(6):
        await create(f"high-{n}", "high", due + timedelta(milliseconds=100), {"type": "handler", "name": "noop"})
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue, max_concurrent_activities=1):
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            done = {}
            for task_id, priority in ids.items():
                rows, _ = list_executions(sqlite_engine, task_id=task_id, limit=1)
                if rows and rows[0].status == "COMPLETED":
                    done[task_id] = (priority, rows[0].started_at)
            if len(done) == len(ids):
                break
            assert asyncio.get_running_loop().time() < deadline, f"{len(done)} of {len(ids)} done"
            await asyncio.sleep(0.3)
    order = [priority for priority, started in sorted(done.values(), key=lambda v: v[1]) if priority != "medium"]
    assert order == ["high"] * 6 + ["low"] * 6, order
