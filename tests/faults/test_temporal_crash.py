"""Fault 3: the Temporal dev server is killed -9 and started again on the same SQLite file:
every task is still scheduled and runs; meanwhile the API answers 503, never 500."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import Stack, make_stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, now, once_task
from tests.faults.invariants import audit, plans, settle
from tests.faults.processes import TemporalServer
from tests.target import TargetServer

DOWN = 20


@pytest.fixture
async def temporal(tmp_path: Path) -> AsyncIterator[TemporalServer]:
    server = TemporalServer(db_file=tmp_path / "temporal.db", log=tmp_path / "temporal.log")
    await server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
async def own_stack(tmp_path: Path, temporal: TemporalServer) -> AsyncIterator[Stack]:
    built = make_stack(tmp_path, temporal=temporal.address,
                       database_url=f"sqlite:///{tmp_path / 'scheduler.db'}")
    try:
        yield built
    finally:
        built.fleet.close()
        built.engine.dispose()


@pytest.mark.timeout(240)
async def test_temporal_killed_and_restarted_on_its_file(
    own_stack: Stack, temporal: TemporalServer, target: TargetServer
) -> None:
    stack, fleet = own_stack, own_stack.fleet
    fleet.start_worker("worker")
    base = await fleet.start_api("api")
    api = Api([base], stack.key)
    try:
        await wait_healthy(base)
        kill_at = later(8)
        back_at = kill_at + timedelta(seconds=DOWN)
        ends = back_at + timedelta(seconds=15)
        ids = {}
        for name, every in (("every-3s", 3), ("every-4s", 4)):
            ids[name] = (await api.create(interval_task(
                name, http_job(target.url(f"/{name}")), every, until=ends)))["task_id"]
        for name, at in (("once-during", kill_at + timedelta(seconds=8)),
                         ("once-after", back_at + timedelta(seconds=8))):
            ids[name] = (await api.create(once_task(name, http_job(target.url(f"/{name}")), at)))["task_id"]

        await asyncio.sleep((kill_at - now()).total_seconds())
        assert {"/every-3s", "/every-4s"} <= {r.path for r in target.received}
        temporal.kill()

        # While Temporal is down: reads that need only the database work; everything that
        # needs Temporal answers 503 with a problem, never 500.
        async with httpx.AsyncClient(timeout=40, headers={"Authorization": f"Bearer {stack.key}"}) as http:
            created = await http.post(f"{base}/task/create", json=once_task(
                "while-down", http_job(target.url("/while-down")), later(60)))
            assert created.status_code == 503, created.text
            assert created.headers["content-type"].startswith("application/problem+json")
            paused = await http.post(f"{base}/tasks/{ids['every-3s']}/pause", json={})
            assert paused.status_code == 503, paused.text
            health = await http.get(f"{base}/checkHealth")
            assert health.status_code == 503 and "temporal" in health.json()["down"], health.text
            read = await http.get(f"{base}/tasks/{ids['every-4s']}")
            assert read.status_code == 200, read.text
        assert fleet.alive("worker") and fleet.alive("api")

        await asyncio.sleep(max(0.0, (back_at - now()).total_seconds()))
        await temporal.start()
        await wait_healthy(base, timeout=60)
        ids["created-after"] = (await api.create(once_task(
            "created-after", http_job(target.url("/created-after")), later(3))))["task_id"]
        await settle(stack.engine, ids.values(), timeout=60)
        assert fleet.alive("worker") and fleet.alive("api")
    finally:
        await api.close()

    report = audit(stack.engine, target.received, ids.values(), planned=plans(stack.engine, ids.values()))
    print(report.render())
    report.assert_holds()
    for name, task_id in ids.items():
        assert report.task_rows[task_id].status == "COMPLETED", name
    # The one-time runs all happened (late for the one due during the outage).
    for name in ("once-during", "once-after", "created-after"):
        assert [r.status for r in report.of_task(ids[name])] == ["COMPLETED"], name
    # The recurring tasks ran again after the restart.
    for name in ("every-3s", "every-4s"):
        after = [r for r in report.of_task(ids[name]) if r.status == "COMPLETED" and r.scheduled_at > back_at]
        assert len(after) >= 2, name
