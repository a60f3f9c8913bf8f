"""A create counts the herd its task joins: the tasks of every tenant due in the second of its
first run. Its workflow gets the count and dispatches its runs further ahead by it. An update
that retimes a task counts the herd of its new next run the same way."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from temporalio.api.enums.v1 import EventType

from api import service
from scheduling.status import TaskStatus
from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso
from workflows.state import TaskState, TaskWorkflowInput
from workflows.task import TaskWorkflow

pytestmark = ON_BOTH_DATABASES


async def _crowd(stack: Stack, task_id: str) -> int:
    """The herd count the task's workflow was started with."""
    handle = stack.env.client.get_workflow_handle(f"task-{task_id}")
    async for event in handle.fetch_history_events():
        assert event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [start] = await stack.env.client.data_converter.decode(payloads, [TaskWorkflowInput])
        assert isinstance(start, TaskWorkflowInput)
        return start.crowd
    raise AssertionError("no history")


async def _kept(stack: Stack, task_id: str) -> int:
    """The herd count the task's workflow holds now."""
    handle = stack.env.client.get_workflow_handle(f"task-{task_id}")
    state = await handle.query(TaskWorkflow.query_state, result_type=TaskState)
    return state.crowd


async def _create(stack: Stack, tenant: str, run_at: datetime, created: list[tuple[str, str]]) -> str:
    async with stack.client(tenant) as api:
        answer = await api.post("/task/create", json={
            "task_name": "herd", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": iso(run_at)})
    assert answer.status_code == 201, answer.text
    created.append((tenant, answer.json()["task_id"]))
    return str(answer.json()["task_id"])


async def test_each_create_counts_the_tasks_due_in_its_first_runs_second(stack: Stack) -> None:
    herd = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
    created: list[tuple[str, str]] = []

    async def create(tenant: str, run_at: datetime) -> str:
        return await _create(stack, tenant, run_at, created)

    try:
        # Within one second, of any tenant: each counts those created before it.
        herd_ids = [await create("t1", herd), await create("t1", herd + timedelta(milliseconds=400)),
                    await create("t2", herd + timedelta(milliseconds=900))]
        assert [await _crowd(stack, task_id) for task_id in herd_ids] == [0, 1, 2]
        # The next second is another herd; a cancelled task leaves its herd.
        assert await _crowd(stack, await create("t1", herd + timedelta(seconds=1))) == 0
        async with stack.client("t1") as api:
            cancelled = await api.patch("/task/cancel", json={"task_id": herd_ids[0]})
            assert cancelled.status_code == 202, cancelled.text
            for _ in range(100):  # the row says so once the workflow has written it
                if (await api.get(f"/tasks/{herd_ids[0]}")).json()["status"] == TaskStatus.CANCELLED:
                    break
                await asyncio.sleep(0.1)
        assert await _crowd(stack, await create("t2", herd)) == 2
    finally:
        for tenant, task_id in created:
            async with stack.client(tenant) as api:
                await api.patch("/task/cancel", json={"task_id": task_id})


async def test_a_create_whose_count_the_database_cannot_give_still_makes_its_task(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only how far ahead its runs go hangs on the count: unread, the task is created, counted 0.
    def outage(engine: Engine, at: datetime, *, besides: str | None = None) -> int:
        raise OperationalError("SELECT count(*)", {}, Exception("the database is unavailable"))

    monkeypatch.setattr(service, "tasks_due_in_second", outage)
    async with stack.client("t1") as api:
        answer = await api.post("/task/create", json={
            "task_name": "unread-herd", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": iso(datetime.now(UTC) + timedelta(hours=3))})
        assert answer.status_code == 201, answer.text
        task_id = answer.json()["task_id"]
        assert await _crowd(stack, task_id) == 0
        await api.patch("/task/cancel", json={"task_id": task_id})


async def test_an_update_that_retimes_a_task_counts_the_herd_of_its_new_next_run(stack: Stack) -> None:
    herd = (datetime.now(UTC) + timedelta(hours=4)).replace(microsecond=0)
    created: list[tuple[str, str]] = []
    try:
        for tenant, offset in (("t1", 0), ("t2", 300)):
            await _create(stack, tenant, herd + timedelta(milliseconds=offset), created)
        moved = await _create(stack, "t1", herd + timedelta(hours=1), created)
        assert await _kept(stack, moved) == 0
        async with stack.client("t1") as api:
            async def update(**changes: object) -> None:
                answer = await api.post("/task/update", json={"task_id": moved, **changes})
                assert answer.status_code == 202, answer.text

            # Into the herd's second: it counts the two there (of both tenants).
            await update(run_at=iso(herd + timedelta(milliseconds=500)))
            assert await _kept(stack, moved) == 2
            # A change that keeps its timing keeps its herd.
            await update(task_name="renamed")
            assert await _kept(stack, moved) == 2
            # Moved within the same second: the same herd, itself not counted in it.
            await update(run_at=iso(herd + timedelta(milliseconds=700)))
            assert await _kept(stack, moved) == 2
            # Out of it, into a second where nothing else runs: none.
            await update(run_at=iso(herd + timedelta(seconds=7)))
            assert await _kept(stack, moved) == 0
    finally:
        for tenant, task_id in created:
            async with stack.client(tenant) as api:
                await api.patch("/task/cancel", json={"task_id": task_id})
