"""One-time tasks on the time-skipping server."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import TaskStatus
from store.tasks import list_executions, read_task
from tests.conftest import new_worker
from tests.workflows.helpers import spec, start_task


async def test_once_task_runs_at_run_at_and_completes(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    run_at = now + timedelta(hours=3)
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, spec(schedule_type="once", run_at=run_at))
        state = await handle.result()
    assert state.status is TaskStatus.COMPLETED
    assert state.run_count == 1 and state.success_count == 1
    task_id = state.task_id
    row = read_task(sqlite_engine, task_id, "t1")
    assert row is not None and row.status == "COMPLETED" and row.next_run_at is None
    executions, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
    assert [e.status for e in executions] == ["COMPLETED"]
    assert executions[0].scheduled_at == run_at
    assert executions[0].id == f"{task_id}:{run_at.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
    assert executions[0].started_at is not None and executions[0].started_at >= run_at
