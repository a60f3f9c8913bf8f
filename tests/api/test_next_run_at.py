"""One next_run_at: every answer, the task row and the NextRunAt search attribute show the
soonest instant still to come (jitter included), also while a run waits for it on a worker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso
from workflows.attributes import NEXT_RUN_AT

pytestmark = ON_BOTH_DATABASES


async def _until(check: Any, timeout: float = 20) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await check()):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)
    return value


async def _shown(api: httpx.AsyncClient, task_id: str) -> str | None:
    next_run_at: str | None = (await api.get(f"/tasks/{task_id}")).json()["next_run_at"]
    return next_run_at


async def test_next_run_at_is_the_same_in_every_answer_within_the_lead(stack: Stack) -> None:
    # Hourly from 10 s from now: with the 10 s lead, its first run is sent to the jobs worker
    # at once and waits there for its instant.
    start = (datetime.now(UTC) + timedelta(seconds=10.5)).replace(microsecond=0)
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "within-the-lead", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600, "start_date": iso(start),
        })
        assert created.status_code == 201, created.text
        task_id, first = created.json()["task_id"], created.json()["next_run_at"]
        assert datetime.fromisoformat(first) == start
        handle = stack.env.client.get_workflow_handle(f"task-{task_id}")

        async def dispatched() -> bool:
            history = await handle.fetch_history()
            return any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events)
        await _until(dispatched)
        assert await _shown(api, task_id) == first

        answers = {}
        updated = await api.post("/task/update", json={"task_id": task_id, "task_name": "renamed"})
        answers["update"] = updated.json()["next_run_at"]
        answers["trigger"] = (await api.post(f"/tasks/{task_id}/trigger")).json()["next_run_at"]
        paused = (await api.post(f"/tasks/{task_id}/pause", json={"reason": "a moment"})).json()
        assert paused["next_run_at"] is None and await _shown(api, task_id) is None
        answers["resume"] = (await api.post(f"/tasks/{task_id}/resume")).json()["next_run_at"]
        answers["get"] = await _shown(api, task_id)
        assert datetime.now(UTC) < start - timedelta(seconds=3), "the test ran too slowly"
        await api.patch("/task/cancel", json={"task_id": task_id})
    assert answers == dict.fromkeys(answers, first)


async def test_next_run_at_search_attribute_includes_jitter(stack: Stack) -> None:
    nominal = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "jittered", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600, "start_date": iso(nominal),
            "jitter_seconds": 900,
        })
        assert created.status_code == 201, created.text
        task_id, shown = created.json()["task_id"], created.json()["next_run_at"]
        planned = datetime.fromisoformat(shown)
        assert nominal < planned < nominal + timedelta(seconds=900)
        handle = stack.env.client.get_workflow_handle(f"task-{task_id}")

        async def attribute() -> datetime | None:
            return (await handle.describe()).typed_search_attributes.get(NEXT_RUN_AT)
        # From the start, and after the workflow has written its row.
        at_start = await attribute()
        await _until(lambda: _written(api, task_id))
        written = await attribute()
        assert await _shown(api, task_id) == shown
        await api.patch("/task/cancel", json={"task_id": task_id})
    assert at_start is not None and written is not None
    assert abs(at_start - planned) < timedelta(seconds=1)
    assert abs(written - planned) < timedelta(seconds=1)


async def _written(api: httpx.AsyncClient, task_id: str) -> bool:
    body = (await api.get(f"/tasks/{task_id}")).json()
    return bool(body.get("updated_at") != body.get("created_at"))
