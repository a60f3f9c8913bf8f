"""Creates are refused (503, Retry-After) while Temporal is behind: the workers take workflow
tasks, but the oldest has waited past the bound in the task queue. While nobody takes them (no
worker) creates go on, and once the workers catch up they are taken again. A real dev server
reports the queue; its backlog figures refresh every few seconds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import httpx
import pytest
from temporalio.service import RPCError

from api import admission as admission_module
from api.admission import BACKLOG_STALE_AFTER, BEHIND_RETRY_AFTER_SECONDS, CreateAdmission
from config.temporal import QueueReading, describe_queue
from tests.api.conftest import ON_BOTH_DATABASES, Stack, serve_api
from tests.conftest import new_worker

T = TypeVar("T")

BOUND = 1.0  # seconds a workflow task may wait before creates are refused
# The dev server refreshes a queue's backlog figures every 5 s and the API reads them every 1 s.
SEEN_WITHIN = 20.0


async def _until(check: Callable[[], Awaitable[T | None]], what: str) -> T:
    deadline = time.monotonic() + SEEN_WITHIN
    while (answer := await check()) is None:
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.5)
    return answer


@ON_BOTH_DATABASES
async def test_creates_are_refused_while_the_workers_fall_behind(stack: Stack) -> None:
    queue = f"behind-{uuid.uuid4()}"
    tag = f"backlog-{time.time_ns()}"
    async with serve_api(stack.env, stack.engine, temporal_task_queue=queue,
                         api_max_workflow_backlog_seconds=BOUND) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30,
                                     headers={"Authorization": f"Bearer {stack.keys['t1']}"}) as http:
            answered: dict[str, int] = {}  # task name: the create's status

            async def create() -> httpx.Response:
                name = f"{tag}-{len(answered)}"
                run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
                answer = await http.post("/task/create", json={
                    "task_name": name, "job_details": {"type": "handler", "name": "noop"},
                    "schedule_type": "once", "run_at": run_at})
                answered[name] = answer.status_code
                return answer

            # No worker yet: the first workflow tasks wait, but nobody takes any, so this is
            # the workers being down, not behind: creates go on past the bound and a refresh.
            for _ in range(3):
                answer = await create()
                assert answer.status_code == 201, answer.text
                await asyncio.sleep(3 * BOUND + 1)
            answer = await create()
            assert answer.status_code == 201, answer.text

            async def taken_by_a_worker() -> QueueReading | None:
                try:
                    reading = await describe_queue(stack.env.client, "workflow", queue, "workflow")
                except RPCError:  # its 3 s ran out on a loaded machine: not read yet
                    return None
                return reading if reading.backlog == 0 and reading.dispatch_rate > 0 else None

            async with new_worker(stack.env.client, stack.engine, task_queue=queue):
                await _until(taken_by_a_worker, "the worker did not take the waiting workflow tasks")
            # It took tasks and is gone: the tasks of these creates wait, and soon the oldest
            # has waited past the bound while Temporal still counts the tasks taken lately.

            async def refused() -> httpx.Response | None:
                answer = await create()
                assert answer.status_code in (201, 503), answer.text
                return answer if answer.status_code == 503 else None

            behind = await _until(refused, "no create was refused while the workflow tasks waited")
            assert behind.headers["Retry-After"] == str(BEHIND_RETRY_AFTER_SECONDS)
            assert behind.headers["content-type"].startswith("application/problem+json")
            problem = behind.json()
            assert problem["type"].endswith("/overloaded")
            assert "the scheduler is behind: workflow tasks have waited" in problem["detail"]
            assert f"(bound {BOUND:g}s)" in problem["detail"]

            async with new_worker(stack.env.client, stack.engine, task_queue=queue):
                # The worker catches up: once the queue reads empty, creates are taken again.
                async def taken() -> httpx.Response | None:
                    answer = await create()
                    assert answer.status_code in (201, 503), answer.text
                    return answer if answer.status_code == 201 else None

                await _until(taken, "creates were still refused after the workers caught up")

            # Every create answered 201 made its task, once; a refused one made none.
            made = []
            for name in answered:
                page = await http.get("/tasks", params={"name": name})
                assert page.status_code == 200, page.text
                made += [item["task_name"] for item in page.json()["items"]]
            assert sorted(made) == sorted(name for name, status in answered.items() if status == 201)
            assert 503 in answered.values()


def test_a_reading_not_renewed_refuses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that stopped renewing (a hung call, a stalled loop) leaves its last reading:
    once that is older than BACKLOG_STALE_AFTER it no longer refuses creates."""
    now = [1000.0]
    monkeypatch.setattr(admission_module.time, "monotonic", lambda: now[0])
    gate = CreateAdmission(limit=10, max_backlog_seconds=BOUND)
    behind = QueueReading(name="workflow", task_queue="q", type="workflow", pollers=1, backlog=9,
                          backlog_age_seconds=BOUND + 1, dispatch_rate=3.0)
    gate.note_backlog(behind)
    assert gate.behind
    now[0] += BACKLOG_STALE_AFTER - 0.1
    assert gate.behind
    now[0] += 0.2
    assert not gate.behind
    gate.note_backlog(behind)  # renewed
    assert gate.behind
