"""Tasks the UI tests look at, made through the public API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from scheduling.status import ExecutionStatus

XSS_NAME = "<script>alert(1)</script>"


async def create(api: httpx.AsyncClient, name: str, **schedule: Any) -> dict[str, Any]:
    """Create a noop-handler task and return it."""
    schedule = schedule or {"schedule_type": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}
    answer = await api.post("/task/create", json={
        "task_name": name, "job_details": {"type": "handler", "name": "noop"}, **schedule,
    })
    assert answer.status_code == 201, answer.text
    task: dict[str, Any] = answer.json()
    return task


async def ran_and_paused(api: httpx.AsyncClient, name: str, runs: int = 4) -> dict[str, Any]:
    """An every-second task that has run at least ``runs`` times, then paused so it holds still."""
    task = await create(api, name, schedule_type="interval", interval_seconds=1)
    deadline = asyncio.get_running_loop().time() + 60
    while (await api.get(f"/tasks/{task['task_id']}")).json()["success_count"] < runs:
        assert asyncio.get_running_loop().time() < deadline, "the interval task did not run"
        await asyncio.sleep(0.2)
    paused = await api.post(f"/tasks/{task['task_id']}/pause", json={"reason": "ui test"})
    assert paused.status_code == 202, paused.text
    # A run that started before the pause still ends: wait until every run has ended and no
    # new one came for longer than the interval.
    seen: list[Any] = []
    while True:
        assert asyncio.get_running_loop().time() < deadline, "the paused task did not hold still"
        runs = (await api.get(f"/tasks/{task['task_id']}/executions")).json()["items"]
        ended = all(run["status"] != ExecutionStatus.RUNNING for run in runs)
        if ended and runs == seen:
            return task
        seen = runs
        await asyncio.sleep(1.5)


@asynccontextmanager
async def sign_in(base_url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client that signed in through the login form (cookie, no Bearer header)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        answer = await browser.post("/ui/login", data={"key": key})
        assert answer.status_code == 303, answer.text
        yield browser
