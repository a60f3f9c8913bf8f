"""A busy task whose history fills while the task database refuses writes: its workflow run
hands the rows it could not write to the next one and goes on running its fires, instead of
waiting for the database (every fire of the outage then went to the missed-run policy)."""

from __future__ import annotations

import asyncio
import time

from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from store.engine import make_engine, migrate
from tests.conftest import new_worker
from tests.faults.processes import PostgresCluster
from tests.workflows.helpers import (
    cancelled_and_counted,
    handler_job,
    spec,
    start_task,
    task_state,
    until,
)

DOWN = 25.0  # seconds the database is stopped: a 1 s task drains twice at a limit of 150


async def test_a_task_whose_history_fills_while_the_database_is_down_goes_on_running(
    dev_env: WorkflowEnvironment, pg_cluster: PostgresCluster
) -> None:
    engine = make_engine(pg_cluster.url)
    migrate(engine)
    calls: list[float] = []

    async def count(ctx: object) -> None:
        calls.append(time.monotonic())

    task = spec(schedule_type="interval", interval_seconds=1, missed_run_policy="skip",
                job_details=handler_job("count"))
    try:
        async with new_worker(dev_env.client, engine, handlers={"count": count},
                              run_options=RunOptions(history_limit=150)) as worker:
            handle = await start_task(dev_env, worker.task_queue, task)
            await until(lambda: asyncio.sleep(0, len(calls) >= 3), timeout=30)
            await asyncio.to_thread(pg_cluster.stop)
            down_at = time.monotonic()
            before = (await task_state(handle)).continued_as_new
            await asyncio.sleep(DOWN)
            during = [at for at in calls if at >= down_at]
            continued = (await task_state(handle)).continued_as_new - before
            await asyncio.to_thread(pg_cluster.start)
            await asyncio.sleep(10)  # the carried rows, and the rest, are written
            assert continued >= 1, "the history never filled while the database was down"
            # It went on running its fires (before, the jobs stopped once the history filled).
            assert len(during) >= DOWN / 2, (len(during), continued)
            await cancelled_and_counted(handle, engine, calls)
    finally:
        engine.dispose()
