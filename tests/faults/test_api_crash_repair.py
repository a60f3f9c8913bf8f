"""Fault 5: an API process is killed -9 between starting a task's workflow and writing its row
(real processes: two APIs, a worker with its reconciler): the task is repaired, not lost, and
a client's retry with the same Idempotency-Key on the other API does not create a second one."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlmodel import col

from store.models import Task
from tests.faults.conftest import Stack, log_events, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, once_task
from tests.faults.invariants import audit, plans, settle
from tests.target import TargetServer


def _rows_named(stack: Stack, name: str) -> list[Task]:
    with Session(stack.engine) as session:
        rows = list(session.scalars(select(Task).where(col(Task.name) == name)))
        session.expunge_all()
    return rows


async def _wait_row(stack: Stack, name: str, timeout: float) -> Task:
    deadline = time.monotonic() + timeout
    while not (rows := _rows_named(stack, name)):
        assert time.monotonic() < deadline, f"no row for task {name!r} after {timeout}s"
        await asyncio.sleep(0.2)
    assert len(rows) == 1, f"{len(rows)} rows for task {name!r}"
    return rows[0]


async def _create_on_dying_api(stack: Stack, body: dict[str, object], key: str | None) -> None:
    """POST a create to a fresh API that dies after the workflow start, before the row write."""
    base = await stack.fleet.start_api("api-dying", role="dying-api")
    headers = {"Authorization": f"Bearer {stack.key}", **({"Idempotency-Key": key} if key else {})}
    async with httpx.AsyncClient(timeout=30) as http:
        with pytest.raises(httpx.HTTPError):  # the process dies before it can answer
            await http.post(f"{base}/task/create", json=body, headers=headers)
    process = stack.fleet.processes["api-dying"]
    assert await asyncio.to_thread(process.wait, 30) == 70


@pytest.mark.timeout(180)
async def test_api_killed_between_workflow_start_and_row_write_is_repaired(
    stack: Stack, target: TargetServer
) -> None:
    fleet = stack.fleet
    fleet.start_worker("worker", reconcile_interval_seconds="2", reconcile_grace_seconds="1")
    healthy = Api([await fleet.start_api("api")], stack.key)
    try:
        await wait_healthy(healthy.bases[0])
        ends = later(25)
        # 1. The client retries its create on the healthy API with the same Idempotency-Key.
        retried = interval_task("retried", http_job(target.url("/retried")), 3, until=ends)
        await _create_on_dying_api(stack, retried, key="create-retried-1")
        answer = await healthy.create(retried, key="create-retried-1")
        # 2. Nobody retries: the task must still get its row and run.
        abandoned = interval_task("abandoned", http_job(target.url("/abandoned")), 3, until=ends)
        await _create_on_dying_api(stack, abandoned, key=None)
        row = await _wait_row(stack, "abandoned", timeout=15)
        # 3. A one-time task whose create died the same way.
        once = once_task("once", http_job(target.url("/once")), later(8))
        await _create_on_dying_api(stack, once, key=None)
        once_row = await _wait_row(stack, "once", timeout=15)

        retried_row = await _wait_row(stack, "retried", timeout=15)
        assert answer["task_id"] == retried_row.id  # the retry found the same task
        ids = {"retried": retried_row.id, "abandoned": row.id, "once": once_row.id}
        await settle(stack.engine, ids.values(), timeout=60)
    finally:
        await healthy.close()

    report = audit(stack.engine, target.received, ids.values(), planned=plans(stack.engine, ids.values()))
    print(report.render())
    report.assert_holds()
    for name, task_id in ids.items():
        assert len(_rows_named(stack, name)) == 1
        assert report.task_rows[task_id].status == "COMPLETED", name
        assert [r for r in report.of_task(task_id) if r.status == "COMPLETED"], f"{name} never ran"
    repaired = log_events(fleet.logs / "worker.log", "reconcile.repaired")
    print(f"reconciler repairs logged: {[{k: e[k] for k in ('restarted', 'rows_written')} for e in repaired]}")
