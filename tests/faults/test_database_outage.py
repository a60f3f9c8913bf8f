"""Fault 4: PostgreSQL (the scheduler's database) is stopped for 30 s while runs fire:
bookkeeping retries until it is back, nothing is lost, and the API answers 503 meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.faults.conftest import Stack, make_stack, wait_healthy
from tests.faults.driver import Api, http_job, interval_task, later, now, once_task
from tests.faults.invariants import audit, plans, settle
from tests.faults.processes import PostgresCluster
from tests.target import TargetServer

DOWN = 30
POLICIES = ("skip", "single_catchup", "catchup")


@pytest.fixture
async def pg_stack(tmp_path: Path, dev_env: WorkflowEnvironment,
                   pg_cluster: PostgresCluster) -> AsyncIterator[Stack]:
    built = make_stack(tmp_path, temporal=dev_env.client.service_client.config.target_host,
                       database_url=pg_cluster.url)
    try:
        yield built
    finally:
        built.fleet.close()
        built.engine.dispose()


@pytest.mark.timeout(240)
async def test_database_down_for_30s_while_runs_fire(
    pg_stack: Stack, pg_cluster: PostgresCluster, target: TargetServer
) -> None:
    stack, fleet = pg_stack, pg_stack.fleet
    fleet.start_worker("worker")
    base = await fleet.start_api("api")
    api = Api([base], stack.key)
    try:
        await wait_healthy(base)
        stop_at = later(8)
        back_at = stop_at + timedelta(seconds=DOWN)
        ends = back_at + timedelta(seconds=15)
        ids = {}
        for policy in POLICIES:
            ids[f"every-{policy}"] = (await api.create(interval_task(
                f"every-{policy}", http_job(target.url(f"/every/{policy}")), 3, until=ends,
                missed_run_policy=policy)))["task_id"]
        ids["once-during"] = (await api.create(once_task(
            "once-during", http_job(target.url("/once-during")), stop_at + timedelta(seconds=10))))["task_id"]

        await asyncio.sleep((stop_at - now()).total_seconds())
        await asyncio.to_thread(pg_cluster.stop)
        stopped = time.monotonic()
        seen_before = len(target.received)

        # While the database is down the API answers 503 (problem+json), never 500.
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {stack.key}"}) as http:
            for method, path, body in (
                ("GET", f"/tasks/{ids['every-skip']}", None),
                ("GET", "/tasks", None),
                ("POST", "/task/create", once_task("while-down", http_job(target.url("/x")), later(60))),
                ("POST", f"/tasks/{ids['every-skip']}/pause", {}),
            ):
                answer = await http.request(method, base + path, json=body)
                assert answer.status_code == 503, (method, path, answer.status_code, answer.text)
                assert answer.headers["content-type"].startswith("application/problem+json")
            health = await http.get(f"{base}/checkHealth")
            assert health.status_code == 503 and health.json()["down"] == ["database"], health.text
            assert (await http.get(f"{base}/livez")).status_code == 200

        await asyncio.sleep(max(0.0, DOWN - (time.monotonic() - stopped)))
        during = len(target.received) - seen_before
        await asyncio.to_thread(pg_cluster.start)
        await wait_healthy(base, timeout=60)
        await settle(stack.engine, ids.values(), timeout=90)
        assert fleet.alive("worker") and fleet.alive("api")
    finally:
        await api.close()

    report = audit(stack.engine, target.received, ids.values(), planned=plans(stack.engine, ids.values()))
    print(f"{during} requests reached the target while the database was down; {report.render()}")
    report.assert_holds()
    assert [r.status for r in report.of_task(ids["once-during"])] == ["COMPLETED"]
    for task_id in ids.values():
        assert report.task_rows[task_id].status == "COMPLETED"
    # catchup runs every fire of the outage: none is recorded as missed.
    assert not [r for r in report.of_task(ids["every-catchup"]) if r.reason == "missed"]
