"""The API dies between starting the workflow and writing the row: the task is not lost."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from store.engine import make_engine, migrate
from store.keys import create_key
from store.tasks import list_executions, list_tasks, read_task
from tests.conftest import new_worker
from tests.faults.processes import free_port, process_env, start_process, stop, wait_http


async def test_api_killed_between_workflow_start_and_row_write(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    engine = make_engine(url)
    migrate(engine)
    _, key = create_key(engine, "t1")
    queue = f"crash-{uuid.uuid4()}"
    port = free_port()
    env = process_env(temporal=dev_env.client.service_client.config.target_host, database_url=url,
                      task_queue=queue, api_port=str(port))
    api = start_process("dying-api", env, tmp_path / "api.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/livez", api)
        run_at = datetime.now(UTC) + timedelta(seconds=3)
        with pytest.raises(httpx.HTTPError):  # the process dies before it can answer
            httpx.post(f"http://127.0.0.1:{port}/task/create", timeout=30,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"task_name": "survivor", "job_details": {"type": "handler", "name": "noop"},
                             "schedule_type": "once", "run_at": run_at.isoformat()})
        assert api.wait(timeout=30) == 70
        assert list_tasks(engine, tenant_id="t1", limit=5)[0] == []  # no row was written
    finally:
        stop(api)
    async with new_worker(dev_env.client, engine, task_queue=queue):
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            rows, _ = list_tasks(engine, tenant_id="t1", limit=5)
            if rows and rows[0].status == "COMPLETED":
                break
            assert asyncio.get_running_loop().time() < deadline, rows
            await asyncio.sleep(0.2)
    task = read_task(engine, rows[0].id, "t1")
    assert task is not None and task.name == "survivor"
    runs, _ = list_executions(engine, task_id=task.id, limit=5)
    assert [r.status for r in runs] == ["COMPLETED"]
    engine.dispose()
