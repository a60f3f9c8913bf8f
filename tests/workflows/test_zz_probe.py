from __future__ import annotations
import asyncio, time
from datetime import timedelta
from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import spec, start_task

async def test_probe_sleep_plain(time_env, sqlite_engine):
    t=time.monotonic(); a = await time_env.get_current_time()
    await time_env.sleep(timedelta(minutes=10))
    print("plain", time.monotonic()-t, await time_env.get_current_time() - a)

async def test_probe_sleep_wf(time_env, sqlite_engine):
    async with new_worker(time_env.client, sqlite_engine) as worker:
        q = worker.task_queue
        h = await start_task(time_env, q, spec(schedule_type="interval", interval_seconds=1800, missed_run_policy="catchup"))
        await asyncio.sleep(1)
        t=time.monotonic(); a = await time_env.get_current_time()
        await time_env.sleep(timedelta(seconds=5))
        print("wf", time.monotonic()-t, await time_env.get_current_time() - a)
        t=time.monotonic(); a = await time_env.get_current_time()
        await time_env.sleep(timedelta(minutes=10))
        print("wf", time.monotonic()-t, await time_env.get_current_time() - a)
