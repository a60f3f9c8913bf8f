"""The jobs worker's polls: autoscaled by default, a fixed number when configured; either way
never more than its slots, and runs dispatched ahead all run once (real dev server)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum

from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import spec
from worker.build import jobs_polls
from worker.settings import Settings
from workflows.starter import start_task_workflow


def test_polls_scale_with_the_backlog_unless_a_fixed_number_is_set() -> None:
    assert jobs_polls(2000) == PollerBehaviorAutoscaling(minimum=5, initial=20, maximum=100)
    assert jobs_polls(2000, fixed=20) == PollerBehaviorSimpleMaximum(maximum=20)


def test_polls_never_outnumber_the_slots() -> None:
    # A poll holds a slot while it waits: more polls than slots left a one-slot worker stalled.
    assert jobs_polls(1) == PollerBehaviorAutoscaling(minimum=1, initial=1, maximum=1)
    assert jobs_polls(3, fixed=20) == PollerBehaviorSimpleMaximum(maximum=3)


def test_the_setting_reads_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().worker_job_polls == 0
    monkeypatch.setenv("SCHEDULER_WORKER_JOB_POLLS", "20")
    assert Settings().worker_job_polls == 20
    monkeypatch.setenv("SCHEDULER_WORKER_JOB_POLLS", "-1")
    with pytest.raises(ValueError, match="worker_job_polls"):
        Settings()


async def test_runs_dispatched_ahead_all_run_once_with_two_fixed_polls(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    queue = f"polls-{uuid.uuid4()}"
    now = datetime.now(UTC)
    due = now + timedelta(seconds=4)
    task_ids = [uuid.uuid4().hex for _ in range(12)]
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue, job_polls=2):
        for n, task_id in enumerate(task_ids):
            await start_task_workflow(
                dev_env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
                spec=spec(task_name=f"polled-{n}", schedule_type="once", run_at=due,
                          job_details={"type": "handler", "name": "noop"}),
                created_at=now, lead_seconds=3.0,
            )
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            rows = {t: list_executions(sqlite_engine, task_id=t, limit=10)[0] for t in task_ids}
            if all(r and r[0].status == "COMPLETED" for r in rows.values()):
                break
            assert asyncio.get_running_loop().time() < deadline, rows
            await asyncio.sleep(0.3)
    for task_id, runs in rows.items():
        assert len(runs) == 1, (task_id, runs)
        started = runs[0].started_at
        assert started is not None
        # Dispatched ahead and held on the worker's clock: none starts before its instant.
        assert started.replace(tzinfo=UTC) >= due - timedelta(milliseconds=1), (task_id, started)
