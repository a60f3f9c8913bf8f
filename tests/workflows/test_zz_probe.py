from __future__ import annotations
import asyncio, time, uuid
from contextlib import asynccontextmanager
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
import httpx
from temporalio.worker import Worker
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from store.tasks import list_executions
from tests.conftest import new_worker
from tests.workflows.helpers import spec, start_task
from workflows.task import TaskWorkflow
from worker.build import build_activities, WORKFLOWS

@asynccontextmanager
async def ns_worker(client, engine, task_queue):
    async with httpx.AsyncClient() as http:
        acts = build_activities(engine=engine, http=http, client=client, task_queue=task_queue)
        with ThreadPoolExecutor(8) as ex:
            w = Worker(client, task_queue=task_queue, workflows=list(WORKFLOWS), activities=acts, activity_executor=ex, max_cached_workflows=0)
            async with w:
                yield w

async def test_probe_down(time_env, sqlite_engine):
    q = f"tq-{uuid.uuid4()}"
    async with ns_worker(time_env.client, sqlite_engine, q) as worker:
        h = await start_task(time_env, q, spec(schedule_type="interval", interval_seconds=1800, missed_run_policy="catchup"))
        await time_env.sleep(timedelta(minutes=10))
        st = await h.query(TaskWorkflow.query_state)
    start = await time_env.get_current_time()
    t=time.monotonic()
    await asyncio.wait_for(time_env.sleep(st.next_fire_at - start + timedelta(milliseconds=1)), 5)
    ts = time_env.client.test_service
    await ts.unlock_time_skipping(UnlockTimeSkippingRequest())
    await asyncio.wait_for(time_env.sleep(timedelta(hours=2) - (st.next_fire_at - start)), 5)
    await ts.lock_time_skipping(LockTimeSkippingRequest())
    print("down", time.monotonic()-t, await time_env.get_current_time() - start)
    async with new_worker(time_env.client, sqlite_engine, task_queue=q) as worker:
        t=time.monotonic()
        await asyncio.wait_for(time_env.sleep(timedelta(seconds=1)), 20)
        print("up", time.monotonic()-t)
        st = await h.query(TaskWorkflow.query_state)
        print(st)
        await h.terminate()
    rows, _ = list_executions(sqlite_engine, task_id=st.task_id, limit=10)
    for r in rows: print(r.scheduled_at, r.started_at, r.finished_at, r.status, r.trigger, r.reason)

async def test_probe_after(time_env, sqlite_engine):
    t=time.monotonic(); a = await time_env.get_current_time()
    await asyncio.wait_for(time_env.sleep(timedelta(minutes=10)), 5)
    print("after", time.monotonic()-t, await time_env.get_current_time() - a)
