"""The task row carries the own instant of the oldest run neither started nor decided: a fire
waiting in the queue behind a run that is going, until a worker reports it started."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, running_task, spec, until


class Gate:
    """A handler whose first call waits until the test opens the gate; the others return."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls += 1
        if self.calls == 1:
            while not self.open.is_set():
                ctx.heartbeat()
                await asyncio.sleep(0.1)


async def test_a_queued_fire_is_on_the_row_until_its_run_starts(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    gate = Gate()
    async with new_worker(dev_env.client, sqlite_engine, handlers={"gate": gate}) as worker:
        now = await dev_env.get_current_time()
        first = (now + timedelta(seconds=2)).replace(microsecond=0)
        task = spec(schedule_type="interval", interval_seconds=2, start_date=first,
                    overlap_policy="buffer_one", job_details=handler_job("gate"),
                    heartbeat_timeout_seconds=5)
        async with running_task(dev_env, worker.task_queue, task) as handle:
            task_id = handle.id.removeprefix("task-")
            second = first + timedelta(seconds=2)

            async def queued() -> bool:
                row = read_task(sqlite_engine, task_id, "t1")
                return row is not None and row.unstarted_at == second

            await until(queued)  # the first run is going, the second fire waits in the queue
            row = read_task(sqlite_engine, task_id, "t1")
            assert row is not None and row.next_run_at is not None and row.next_run_at > second
            gate.open.set()

            async def started() -> bool:
                rows = [r for r in executions(sqlite_engine, task_id) if r.scheduled_at == second]
                return bool(rows and rows[0].started_at)

            await until(started)

            async def moved() -> bool:
                row = read_task(sqlite_engine, task_id, "t1")
                return row is not None and row.unstarted_at != second

            await until(moved)
