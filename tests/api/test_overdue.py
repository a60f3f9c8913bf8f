"""A run that does not come raises an alarm from the API, not from the task's workflow: with
every worker stopped across a task's instant, the webhook hears ``run.overdue``, the metric,
the list filter and the UI show it; once the workers are back the run comes and
``run.recovered`` follows. With only the jobs worker stopped, the workflow sends the run and
moves the row on, and the run it reports unstarted raises the alarm. On SQLite and PostgreSQL."""

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

from outbound.egress import EgressPolicy, guarded_client
from scheduling.status import execution_id
from store.engine import make_engine
from store.keys import create_key
from tests.api.conftest import database_url, serve_api
from tests.api.test_service_metrics import scrape, until, value
from tests.conftest import new_worker
from tests.target import TargetServer
from worker.build import build_activities, build_jobs_worker, build_workflow_worker

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


@dataclass
class Split:
    base_url: str
    key: str
    start_jobs: Any  # () -> awaitable: the jobs worker alone, on the task queue
    stop_jobs: Any


@pytest.fixture(params=["sqlite", "postgres"])
async def split(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> AsyncIterator[Split]:
    """The API, a workflows worker that stays up, and a jobs worker the test stops and starts."""
    engine = make_engine(database_url(request, tmp_path_factory))
    key = create_key(engine, "t1")[1]
    queue = f"overdue-jobs-{uuid.uuid4()}"
    jobs = AsyncExitStack()
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(guarded_client(EgressPolicy.from_list(["127.0.0.1"])))
        activities = build_activities(engine=engine, http=http, client=dev_env.client)

        async def start_jobs() -> None:
            await jobs.enter_async_context(
                build_jobs_worker(dev_env.client, task_queue=queue, activities=activities))

        base_url = await stack.enter_async_context(serve_api(
            dev_env, engine, temporal_task_queue=queue, overdue_check_seconds=CHECK_SECONDS,
            overdue_after_seconds=300.0))
        await stack.enter_async_context(build_workflow_worker(
            dev_env.client, task_queue=queue, activities=activities))
        await start_jobs()
        stack.push_async_callback(jobs.aclose)
        yield Split(base_url, key, start_jobs, jobs.aclose)
    engine.dispose()


async def test_a_run_sent_to_stopped_jobs_workers_raises_the_alarm(
    split: Split, target: TargetServer,
) -> None:
    """The workflows worker stays up: it sends the run at its instant and the row's next run
    moves on to the next fire; the run no jobs worker started is overdue all the same."""
    instant = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    body = {
        "task_name": "every-ten-minutes", "schedule_type": "interval", "interval_seconds": 600,
        "start_date": iso(instant), "missed_run_policy": "skip",
        "job_details": {"type": "http", "url": target.url("/job")},
        "notify": {"url": target.url("/hook"), "events": ["overdue"]},
        "overdue_after_seconds": OVERDUE_AFTER,
    }

    def hooks(event: str) -> list[dict[str, Any]]:
        return [r.json() for r in target.received if r.path == "/hook" and r.json()["event"] == event]

    headers = {"Authorization": f"Bearer {split.key}"}
    async with httpx.AsyncClient(base_url=split.base_url, timeout=30, headers=headers) as api:
        created = await api.post("/task/create", json=body)
        assert created.status_code == 201, created.text
        task = created.json()
        assert datetime.fromisoformat(task["next_run_at"]) == instant
        await split.stop_jobs()  # only the jobs worker, across the instant

        async def alarm() -> bool:
            return bool(hooks("run.overdue"))

        await until(alarm, timeout=4 + OVERDUE_AFTER + CHECK_SECONDS + SLACK_SECONDS)
        [note] = hooks("run.overdue")
        assert note["task_id"] == task["task_id"]
        assert note["execution_id"] == execution_id(task["task_id"], instant)
        assert datetime.fromisoformat(note["at"]) >= instant + timedelta(seconds=OVERDUE_AFTER)
        shown = (await api.get(f"/tasks/{task['task_id']}")).json()
        assert datetime.fromisoformat(shown["overdue_run_at"]) == instant
        # The workflow ran meanwhile: it sent the run and moved the row to the next fire.
        assert datetime.fromisoformat(shown["next_run_at"]) == instant + timedelta(seconds=600)
        assert await overdue_ids(api) == [task["task_id"]]
        assert value(await scrape(split.base_url), "scheduler_overdue_runs") == 1
        assert not [r for r in target.received if r.path == "/job"]

        await split.start_jobs()

        async def recovered() -> bool:
            return bool(hooks("run.recovered"))

        await until(recovered, timeout=60)
        [back] = hooks("run.recovered")
        assert back["task_id"] == task["task_id"]
        # Started late by the worker's claim, or decided by the missed-run policy (skip).
        [run] = (await api.get(f"/tasks/{task['task_id']}/executions")).json()["items"]
        assert run["scheduled_at"] and datetime.fromisoformat(run["scheduled_at"]) == instant
        came = f"skipped: {run['reason']}" if run["status"] == "SKIPPED" else "started"
        assert back["detail"].endswith(came), (back, run)
        assert await overdue_ids(api) == []
        await asyncio.sleep(CHECK_SECONDS * 3)
        assert len(hooks("run.overdue")) == 1 and len(hooks("run.recovered")) == 1
