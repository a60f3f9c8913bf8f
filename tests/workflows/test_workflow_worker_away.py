"""Messages that reach a task while its workflow worker is away: the fires that came due
meanwhile are decided before the message changes the schedule or ends the task (found by the
randomized seam test: an update after a workflow-worker outage left eight fires with no row).

On the dev server: the message is sent while no workflow worker runs, so the worker that comes
back gets it in the same workflow task as the timers that fired meanwhile (messages first)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus
from tests.workflows.helpers import (
    executions,
    spec,
    start_task,
    stoppable_worker,
    task_state,
    until,
)
from workflows.task import TaskWorkflow

AWAY = 4.5  # seconds with no workflow worker: four or five fires of a 1 s interval


async def _first_run_recorded(engine: Engine, task_id: str) -> None:
    async def recorded() -> bool:
        return any(row.status == "COMPLETED" for row in executions(engine, task_id))

    await until(recorded)


def _one_row_per_fire(engine: Engine, task_id: str, last: timedelta) -> list[tuple[str, str | None]]:
    """The rows of the 1 s fires from the first one to ``last`` after it: exactly one each."""
    rows = [r for r in executions(engine, task_id) if r.trigger in ("schedule", "catchup")]
    first = rows[0].scheduled_at
    fires = [first + timedelta(seconds=n) for n in range(int(last.total_seconds()) + 1)]
    for fire in fires:
        assert sum(1 for r in rows if r.scheduled_at == fire) == 1, (fire, rows)
    return [(r.status, r.reason) for r in rows if r.scheduled_at in fires]


async def test_an_update_after_the_workflow_worker_was_away_decides_the_old_fires_first(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=1, missed_run_policy="skip")
    async with stoppable_worker(dev_env, sqlite_engine, queue):
        handle = await start_task(dev_env, queue, task)
        task_id = (await task_state(handle)).task_id
        await _first_run_recorded(sqlite_engine, task_id)
    await asyncio.sleep(AWAY)
    update = asyncio.create_task(handle.execute_update(
        TaskWorkflow.update_task, TaskChanges(interval_seconds=3600)))
    await asyncio.sleep(0.5)  # the update waits at the server for a worker
    async with stoppable_worker(dev_env, sqlite_engine, queue):
        changed = await asyncio.wait_for(update, 30)
        await handle.execute_update(TaskWorkflow.cancel_update, "test over")
        await handle.result()
    first = executions(sqlite_engine, task_id)[0].scheduled_at
    outcomes = _one_row_per_fire(sqlite_engine, task_id, changed.anchor - first - timedelta(seconds=1))
    assert len(outcomes) >= 4, outcomes
    # Missed while the worker was away (the newest one may still have been on time).
    assert all(status in ("COMPLETED", "FAILED") or reason in ("missed", "overlap")
               for status, reason in outcomes), outcomes


async def test_a_cancel_sent_while_the_workflow_worker_was_away_records_the_fires_due_before_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=1)
    async with stoppable_worker(dev_env, sqlite_engine, queue):
        handle = await start_task(dev_env, queue, task)
        task_id = (await task_state(handle)).task_id
        await _first_run_recorded(sqlite_engine, task_id)
    await asyncio.sleep(AWAY)
    await handle.signal(TaskWorkflow.cancel_signal, "while the worker was away")
    await asyncio.sleep(0.5)
    async with stoppable_worker(dev_env, sqlite_engine, queue):
        final = await asyncio.wait_for(handle.result(), 30)
    assert final.status is TaskStatus.CANCELLED
    first = executions(sqlite_engine, task_id)[0].scheduled_at
    assert final.cancelled_at is not None
    outcomes = _one_row_per_fire(sqlite_engine, task_id,
                                 final.cancelled_at - first - timedelta(seconds=1))
    assert len(outcomes) >= 4, outcomes
    assert ("SKIPPED", "cancelled") in outcomes, outcomes
    assert final.skipped_count == sum(1 for r in executions(sqlite_engine, task_id)
                                      if r.status == "SKIPPED")
