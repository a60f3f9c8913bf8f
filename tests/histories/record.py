"""Record workflow histories for the replay tests: `python -m tests.histories.record`.

Run it when a released TaskWorkflow version changes behaviour on purpose: it writes one JSON
history per scenario next to this file, named after the scenario and the date. Keep the old
files: every recorded history must keep replaying (see docs/upgrades.md).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from scheduling.spec import TaskChanges
from store.engine import make_engine, migrate
from tests.conftest import _binary, new_worker, register_search_attributes
from tests.workflows.helpers import spec, start_task
from workflows.starter import start_task_workflow
from workflows.state import TaskState
from workflows.task import TaskWorkflow

HERE = Path(__file__).parent


async def _fail(ctx: object) -> None:
    raise RuntimeError("boom")


async def record(only: set[str] | None = None) -> list[Path]:
    from temporalio.contrib.pydantic import pydantic_data_converter

    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=_binary("temporal-test-server")
    )
    await register_search_attributes(env.client)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/r.db")
        migrate(engine)
        async with new_worker(env.client, engine, handlers={"fail": _fail}) as worker:
            queue = worker.task_queue
            now = await env.get_current_time()
            handles: dict[str, WorkflowHandle[TaskWorkflow, TaskState]] = {}

            handles["once"] = await start_task(env, queue, spec(schedule_type="once", run_at=now + timedelta(minutes=5)))

            # Dispatched ahead of its instant: the job waits on the worker's clock.
            ahead_id = uuid.uuid4().hex
            await start_task_workflow(
                env.client, task_queue=queue, task_id=ahead_id, tenant_id="t1",
                spec=spec(schedule_type="interval", interval_seconds=3, max_runs=2),
                created_at=await env.get_current_time(), lead_seconds=2,
            )
            handles["interval_dispatched_ahead"] = env.client.get_workflow_handle(f"task-{ahead_id}")

            # Fires faster than the lead: dispatched together as one series.
            series_id = uuid.uuid4().hex
            await start_task_workflow(
                env.client, task_queue=queue, task_id=series_id, tenant_id="t1",
                spec=spec(schedule_type="interval", interval_seconds=1, max_runs=3),
                created_at=await env.get_current_time(), lead_seconds=2,
            )
            handles["interval_series"] = env.client.get_workflow_handle(f"task-{series_id}")

            cron = await start_task(env, queue, spec(schedule_type="cron", cron="0 * * * *", max_runs=6))
            await env.sleep(timedelta(hours=2, minutes=10))
            await cron.execute_update(TaskWorkflow.update_task, TaskChanges(cron="30 * * * *", task_name="renamed"))
            await cron.execute_update(TaskWorkflow.pause_update, "maintenance")
            await env.sleep(timedelta(hours=1))
            await cron.execute_update(TaskWorkflow.resume_update)
            await cron.execute_update(TaskWorkflow.trigger_update)
            handles["cron_update_pause_trigger"] = cron

            failing = await start_task(env, queue, spec(
                schedule_type="interval", interval_seconds=600, max_runs=2,
                job_details={"type": "handler", "name": "fail"},
                retry_policy={"max_attempts": 2, "initial_interval_seconds": 1},
            ))
            handles["interval_failures"] = failing

            cancelled = await start_task(env, queue, spec(schedule_type="interval", interval_seconds=60))
            await env.sleep(timedelta(minutes=3, seconds=5))
            await cancelled.signal(TaskWorkflow.cancel_signal)
            handles["interval_cancelled"] = cancelled

            for name, handle in handles.items():
                await handle.result()
                if only and name not in only:
                    continue
                history = await handle.fetch_history()
                stamp = datetime.now(UTC).strftime("%Y%m%d")
                path = HERE / f"{name}-{stamp}.json"
                path.write_text(history.to_json())
                written.append(path)
        engine.dispose()
    await env.shutdown()
    return written


if __name__ == "__main__":
    # Names given: record only those scenarios (e.g. a new one beside the kept files).
    for path in asyncio.run(record(set(sys.argv[1:]) or None)):
        print(f"wrote {path}", file=sys.stderr)
