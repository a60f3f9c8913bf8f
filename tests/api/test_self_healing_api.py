"""The self-healing breaker and the resume choices through the API, on the real dev server:
bad input is a 422 that changes nothing, the probe shows in the task, and a resume records
the pause's fires as asked."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import wait_for_status
from tests.api.test_input_bounds import ONCE, RECURRING, assert_refused, tenant_state
from tests.api.test_policies_e2e import _events, _until
from tests.target import TargetServer

pytestmark = ON_BOTH_DATABASES


@pytest.mark.parametrize("value", [0, -5, 86_401, "60", True])
async def test_a_bad_auto_resume_after_is_a_422_and_changes_nothing(stack: Stack, value: Any) -> None:
    before = await tenant_state(stack)
    async with stack.client("t2") as api:
        body = {**RECURRING, "auto_resume_after_seconds": value}
        assert_refused(await api.post("/task/recurring", json=body), "auto_resume_after_seconds")
        assert_refused(await api.post("/task/create", json=body), "auto_resume_after_seconds")
    assert await tenant_state(stack) == before


async def test_auto_resume_after_is_set_changed_and_refused_by_update(stack: Stack) -> None:
    async with stack.client("t1") as api:
        created = await api.post("/task/create", json={**ONCE, "auto_resume_after_seconds": 600})
        assert created.status_code == 201, created.text
        task = created.json()
        assert task["schedule"]["auto_resume_after_seconds"] == 600 and task["next_probe_at"] is None
        update = {"task_id": task["task_id"], "auto_resume_after_seconds": 0}
        assert_refused(await api.post("/task/update", json=update), "auto_resume_after_seconds")
        shown = (await api.get(f"/tasks/{task['task_id']}")).json()
        assert shown["schedule"]["auto_resume_after_seconds"] == 600
        changed = await api.post("/task/update", json={**update, "auto_resume_after_seconds": 90.5})
        assert changed.status_code == 202, changed.text
        assert changed.json()["schedule"]["auto_resume_after_seconds"] == 90.5


async def _paused_task(api: Any, **fields: Any) -> str:
    created = await api.post("/task/recurring", json={
        **RECURRING, "task_name": "resumable", "interval_seconds": 1, **fields})
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
    return task_id


async def _skipped(api: Any, task_id: str) -> list[str]:
    rows = (await api.get(f"/tasks/{task_id}/executions", params={"limit": 500})).json()["items"]
    return [row["reason"] for row in rows if row["status"] == "SKIPPED"]


@pytest.mark.parametrize("body", [{"missed": "later"}, {"missed": None}, {"missed": "policy", "x": 1}, [1]])
async def test_a_bad_resume_body_is_a_422_and_changes_nothing(stack: Stack, body: Any) -> None:
    async with stack.client("t1") as api:
        task_id = await _paused_task(api)
        response = await api.post(f"/tasks/{task_id}/resume", json=body)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PAUSED"
        async with stack.client("t2") as other:
            refused = await other.post(f"/tasks/{task_id}/resume", json={"missed": "policy"})
            assert refused.status_code == 404
        assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PAUSED"
        await api.patch("/task/cancel", json={"task_id": task_id})


async def test_resume_skip_records_paused_and_policy_lets_the_policy_decide(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task_id = await _paused_task(api, missed_run_policy="skip")
        await asyncio.sleep(4.5)
        resumed = await api.post(f"/tasks/{task_id}/resume", json={"missed": "skip"})
        assert resumed.status_code == 202 and resumed.json()["status"] in ("PENDING", "RUNNING")
        await _until(lambda: _has(api, task_id, "paused", 2))
        assert "missed" not in await _skipped(api, task_id)

        assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
        await asyncio.sleep(4.5)
        headers = {"Idempotency-Key": f"resume-{task_id}"}
        resumed = await api.post(f"/tasks/{task_id}/resume", json={"missed": "policy"}, headers=headers)
        assert resumed.status_code == 202, resumed.text
        again = await api.post(f"/tasks/{task_id}/resume", json={"missed": "policy"}, headers=headers)
        assert again.json() == resumed.json()  # the same answer under the same key
        reused = await api.post(f"/tasks/{task_id}/resume", headers=headers)
        assert reused.status_code == 422  # the key of another request
        await _until(lambda: _has(api, task_id, "missed", 2))
        await api.patch("/task/cancel", json={"task_id": task_id})


async def _has(api: Any, task_id: str, reason: str, count: int) -> bool:
    return (await _skipped(api, task_id)).count(reason) >= count


async def test_auto_paused_task_shows_and_runs_its_probe(stack: Stack, target: TargetServer) -> None:
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "healing", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/status/503")},
            "retry_policy": {"max_attempts": 1}, "max_consecutive_failures": 2,
            "auto_resume_after_seconds": 1.5,
            "notify": {"url": target.url("/notify"), "events": ["auto_paused", "probe_failed"]},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        paused = await wait_for_status(api, task_id, {"PAUSED"}, timeout=40)
        assert paused["next_probe_at"] is not None and "probe run at" in paused["status_reason"]
        first = datetime.fromisoformat(paused["next_probe_at"])
        assert first <= datetime.now(UTC) + timedelta(seconds=2)

        async def probed_twice() -> bool:
            rows = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
            return len([r for r in rows if r["trigger"] == "probe" and r["status"] == "FAILED"]) >= 2
        await _until(probed_twice)
        shown = (await api.get(f"/tasks/{task_id}")).json()
        assert shown["status"] == "PAUSED" and datetime.fromisoformat(shown["next_probe_at"]) > first
        await _until(lambda: asyncio.sleep(0, _events(target).count("probe_failed") >= 2))
        assert _events(target)[0] == "auto_paused"
        resumed = await api.post(f"/tasks/{task_id}/resume")
        assert resumed.json()["next_probe_at"] is None
        await api.patch("/task/cancel", json={"task_id": task_id})
