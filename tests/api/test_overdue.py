"""A run that does not come raises an alarm from the API, not from the task's workflow: with
every worker stopped across a task's instant, the webhook hears ``run.overdue``, the metric,
the list filter and the UI show it; once the workers are back the run comes and
``run.recovered`` follows. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from scheduling.status import execution_id
from store.engine import make_engine
from store.keys import create_key
from tests.api.conftest import database_url, serve_api
from tests.api.test_service_metrics import scrape, until, value
from tests.conftest import new_worker
from tests.target import TargetServer

CHECK_SECONDS = 0.5
OVERDUE_AFTER = 2.0
# The alarm comes within its bound (instant + overdue_after + one check interval); this much
# more is allowed for a slow machine (the API's passes and the workers' shutdown).
SLACK_SECONDS = 10.0


@dataclass
class Setup:
    base_url: str
    keys: dict[str, str]
    start_workers: Any  # () -> awaitable: the workflow and jobs workers, on the task queue
    stop_workers: Any

    def client(self, tenant: str = "t1") -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.keys[tenant]}"})


@pytest.fixture(params=["sqlite", "postgres"])
async def setup(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> AsyncIterator[Setup]:
    engine = make_engine(database_url(request, tmp_path_factory))
    keys = {tenant: create_key(engine, tenant)[1] for tenant in ("t1", "t2")}
    queue = f"overdue-{uuid.uuid4()}"
    workers = AsyncExitStack()

    async def start() -> None:
        await workers.enter_async_context(new_worker(dev_env.client, engine, task_queue=queue))

    async with serve_api(dev_env, engine, temporal_task_queue=queue,
                         overdue_check_seconds=CHECK_SECONDS,
                         overdue_after_seconds=300.0) as base_url:
        await start()
        try:
            yield Setup(base_url, keys, start, workers.aclose)
        finally:
            await workers.aclose()
    engine.dispose()


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def overdue_ids(api: httpx.AsyncClient) -> list[str]:
    answer = await api.get("/tasks", params={"status": "overdue"})
    assert answer.status_code == 200, answer.text
    return [t["task_id"] for t in answer.json()["items"]]


async def test_stopped_workers_raise_the_alarm_and_their_return_clears_it(
    setup: Setup, target: TargetServer,
) -> None:
    instant = datetime.now(UTC) + timedelta(seconds=4)
    body = {
        "task_name": "nightly", "schedule_type": "once", "run_at": iso(instant),
        "job_details": {"type": "http", "url": target.url("/job")},
        "notify": {"url": target.url("/hook"), "events": ["overdue"]},
        "overdue_after_seconds": OVERDUE_AFTER,
    }
    async with setup.client() as api, setup.client("t2") as other:
        created = await api.post("/task/create", json=body)
        assert created.status_code == 201, created.text
        task = created.json()
        assert task["schedule"]["overdue_after_seconds"] == OVERDUE_AFTER
        assert task["overdue_since"] is None
        await setup.stop_workers()  # the workflows and the jobs worker, across the instant

        def hooks(event: str) -> list[dict[str, Any]]:
            return [r.json() for r in target.received if r.path == "/hook" and r.json()["event"] == event]

        async def alarm() -> bool:
            return bool(hooks("run.overdue"))

        await until(alarm, timeout=4 + OVERDUE_AFTER + CHECK_SECONDS + SLACK_SECONDS)
        [note] = hooks("run.overdue")
        assert note["task_id"] == task["task_id"] and note["tenant_id"] == "t1"
        run_id = execution_id(task["task_id"], datetime.fromisoformat(task["next_run_at"]))
        assert note["execution_id"] == run_id
        assert datetime.fromisoformat(note["at"]) >= instant + timedelta(seconds=OVERDUE_AFTER)
        assert not [r for r in target.received if r.path == "/job"]  # the job did not run

        assert await overdue_ids(api) == [task["task_id"]]
        assert await overdue_ids(other) == []  # another tenant sees none of it
        shown = (await api.get(f"/tasks/{task['task_id']}")).json()
        assert shown["overdue_run_at"] == task["next_run_at"] and shown["overdue_since"]
        assert value(await scrape(setup.base_url), "scheduler_overdue_runs") == 1
        async with httpx.AsyncClient(base_url=setup.base_url, timeout=30) as browser:
            await browser.post("/ui/login", data={"key": setup.keys["t1"]})
            listed = await browser.get("/ui", params={"status": "overdue"})
            assert listed.status_code == 200 and "OVERDUE" in listed.text and "nightly" in listed.text

        await setup.start_workers()

        async def recovered() -> bool:
            return bool(hooks("run.recovered"))

        await until(recovered, timeout=60)
        [back] = hooks("run.recovered")
        assert back["task_id"] == task["task_id"] and back["execution_id"] == run_id
        # The detail says how the run came: started, or its fire decided (a skip, with why).
        [run] = (await api.get(f"/tasks/{task['task_id']}/executions")).json()["items"]
        came = f"skipped: {run['reason']}" if run["status"] == "SKIPPED" else "started"
        assert back["detail"].endswith(came), (back, run)
        assert await overdue_ids(api) == []
        assert (await api.get(f"/tasks/{task['task_id']}")).json()["overdue_since"] is None
        assert len(hooks("run.overdue")) == 1  # one alarm per run
        await asyncio.sleep(CHECK_SECONDS * 3)
        assert len(hooks("run.overdue")) == 1 and len(hooks("run.recovered")) == 1


async def test_bad_overdue_input_is_refused(setup: Setup, target: TargetServer) -> None:
    base = {"task_name": "n", "schedule_type": "interval", "interval_seconds": 60,
            "job_details": {"type": "http", "url": target.url("/job")}}
    async with setup.client() as api:
        for bad in (0, -5, "30", 8 * 86400):
            answer = await api.post("/task/create", json={**base, "overdue_after_seconds": bad})
            assert answer.status_code == 422, (bad, answer.text)
            assert "overdue_after_seconds" in answer.text
        assert (await api.get("/tasks", params={"status": "late"})).status_code == 422
        assert (await api.get("/tasks")).json()["items"] == []
