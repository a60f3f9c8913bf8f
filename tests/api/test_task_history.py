"""A task's history through the API and the real worker: every change recorded with its actor,
spec versions, rollback, and the version each run ran under; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from store.keys import find_active_key
from store.quotas import set_quota
from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import wait_for_status
from tests.target import TargetServer
from workflows.task import TaskWorkflow

pytestmark = ON_BOTH_DATABASES

DAILY = "0 6 * * *"
WEEKLY = "0 6 * * 1"


def key_id(stack: Stack, tenant: str = "t1") -> str:
    found = find_active_key(stack.engine, stack.keys[tenant])
    assert found is not None
    return found.id


async def events_until(api: httpx.AsyncClient, task_id: str, count: int,
                       timeout: float = 15) -> list[dict[str, Any]]:
    """The task's events once there are ``count`` of them (the workflow writes them behind)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        answer = await api.get(f"/tasks/{task_id}/events", params={"limit": 500})
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        if len(items) >= count:
            return items
        assert asyncio.get_running_loop().time() < deadline, [e["action"] for e in items]
        await asyncio.sleep(0.1)


async def create(api: httpx.AsyncClient, name: str) -> str:
    created = await api.post("/task/create", json={
        "task_name": name, "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "cron", "cron": DAILY, "timezone": "UTC",
    })
    assert created.status_code == 201, created.text
    assert created.json()["spec_version"] == 1
    return str(created.json()["task_id"])


async def test_every_change_is_recorded_and_a_rollback_restores_a_version(stack: Stack) -> None:
    me = key_id(stack)
    async with stack.client() as api:
        task_id = await create(api, "audited")
        updated = await api.post("/task/update", json={"task_id": task_id, "cron": WEEKLY})
        assert updated.status_code == 202, updated.text
        assert updated.json()["spec_version"] == 2
        assert (await api.post(f"/tasks/{task_id}/pause", json={"reason": "window"})).status_code == 202
        assert (await api.post(f"/tasks/{task_id}/resume")).status_code == 202

        # a run asked for through the API runs under the version of the moment
        assert (await api.post(f"/tasks/{task_id}/trigger")).status_code == 202
        deadline = asyncio.get_running_loop().time() + 15
        while not (runs := (await api.get(f"/tasks/{task_id}/executions")).json()["items"]) or \
                runs[0]["status"] != "COMPLETED":
            assert asyncio.get_running_loop().time() < deadline, runs
            await asyncio.sleep(0.1)
        assert [r["spec_version"] for r in runs] == [2]

        # an operator's plain Temporal signal is recorded too, as such
        handle = stack.env.client.get_workflow_handle_for(TaskWorkflow.run, f"task-{task_id}")
        await handle.signal(TaskWorkflow.pause_signal, "by hand")
        await wait_for_status(api, task_id, {"PAUSED"}, timeout=10)
        assert (await api.post(f"/tasks/{task_id}/resume")).status_code == 202

        rolled = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1},
                                headers={"Idempotency-Key": f"rb-{task_id}"})
        assert rolled.status_code == 202, rolled.text
        assert rolled.json()["spec_version"] == 3 and rolled.json()["schedule"]["cron"] == DAILY
        again = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1},
                               headers={"Idempotency-Key": f"rb-{task_id}"})
        assert again.status_code == 202 and again.json()["spec_version"] == 3  # acted once

        assert (await api.patch("/task/cancel", json={"task_id": task_id})).status_code == 202
        await wait_for_status(api, task_id, {"CANCELLED"})
        events = await events_until(api, task_id, 9)

    assert [(e["action"], e["actor"], e["spec_version"]) for e in events] == [
        ("cancel", me, 3), ("rollback", me, 3), ("resume", me, 2), ("pause", "temporal signal", 2),
        ("trigger", me, 2), ("resume", me, 2), ("pause", me, 2), ("update", me, 2), ("create", me, 1),
    ]
    assert events[3]["detail"] == {"reason": "by hand"}
    assert events[1]["detail"] == {"version": 1}
    assert [e["at"] for e in events] == sorted((e["at"] for e in events), reverse=True)
    assert all(e["spec"] is None for e in events if e["action"] not in ("create", "update", "rollback"))

    async with stack.client() as api:
        versions = (await api.get(f"/tasks/{task_id}/versions")).json()
        assert [(v["version"], v["action"], v["actor"], v["spec"]["cron"]) for v in versions["items"]] == [
            (3, "rollback", me, DAILY), (2, "update", me, WEEKLY), (1, "create", me, DAILY),
        ]
        # pages like the executions list: a cursor to the next page, none after the last
        first = (await api.get(f"/tasks/{task_id}/events", params={"limit": 4})).json()
        second = (await api.get(f"/tasks/{task_id}/events",
                                params={"limit": 5, "cursor": first["next_cursor"]})).json()
        assert [e["id"] for e in first["items"] + second["items"]] == [e["id"] for e in events]
        assert second["next_cursor"] is None


async def test_a_rollback_to_a_version_the_task_lacks_changes_nothing(stack: Stack) -> None:
    async with stack.client() as api, stack.client("t2") as other:
        changed = await create(api, "many-versions")
        for cron in (WEEKLY, DAILY):
            assert (await api.post("/task/update", json={"task_id": changed, "cron": cron})).status_code == 202
        single = await create(api, "one-version")

        # version 3 is the other task's; version 7 nobody's
        for version in (3, 7):
            refused = await api.post(f"/tasks/{single}/rollback", json={"version": version})
            assert refused.status_code == 404, refused.text
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert f"no version {version}" in refused.json()["detail"]
        # another tenant sees neither the task nor its history
        assert (await other.post(f"/tasks/{changed}/rollback", json={"version": 1})).status_code == 404
        assert (await other.get(f"/tasks/{changed}/events")).status_code == 404
        assert (await other.get(f"/tasks/{changed}/versions")).status_code == 404
        # bad bodies are refused by the schema
        for body in ({}, {"version": 0}, {"version": "one"}, {"version": True}, {"version": 1, "extra": True}):
            assert (await api.post(f"/tasks/{single}/rollback", json=body)).status_code == 422, body

        await asyncio.sleep(0.5)  # a write the refusals made would have landed by now
        task = (await api.get(f"/tasks/{single}")).json()
        assert task["spec_version"] == 1 and task["schedule"]["cron"] == DAILY
        assert [e["action"] for e in await events_until(api, single, 1)] == ["create"]
        assert [e["action"] for e in await events_until(api, changed, 3)] == ["update", "update", "create"]


async def test_a_restored_spec_is_validated_like_any_update(stack: Stack) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "often", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 600,
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        updated = await api.post("/task/update", json={"task_id": task_id, "interval_seconds": 7200})
        assert updated.status_code == 202, updated.text
        set_quota(stack.engine, "t1", min_interval_seconds=3600)
        try:
            # version 1 runs more often than the tenant may now: refused as that update would be
            refused = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1})
            assert refused.status_code == 422, refused.text
            assert "min_interval_seconds" in refused.json()["detail"]
        finally:
            set_quota(stack.engine, "t1", min_interval_seconds=None)
        task = (await api.get(f"/tasks/{task_id}")).json()
        assert task["spec_version"] == 2 and task["schedule"]["interval_seconds"] == 7200
        allowed = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1})
        assert allowed.status_code == 202, allowed.text
        assert allowed.json()["schedule"]["interval_seconds"] == 600
        assert allowed.json()["spec_version"] == 3


async def test_a_replayed_dead_letter_is_recorded_with_its_actor(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "failing", "schedule_type": "cron", "cron": DAILY, "timezone": "UTC",
            "job_details": {"type": "http", "url": target.url("/status/404")},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        assert (await api.post(f"/tasks/{task_id}/trigger")).status_code == 202
        deadline = asyncio.get_running_loop().time() + 15
        while not (runs := (await api.get(f"/tasks/{task_id}/executions")).json()["items"]) or \
                runs[0]["dead_letter"] != "open":
            assert asyncio.get_running_loop().time() < deadline, runs
            await asyncio.sleep(0.1)
        replayed = await api.post(f"/dead-letters/{runs[0]['id']}/replay")
        assert replayed.status_code == 202, replayed.text
        events = await events_until(api, task_id, 3)
    assert [(e["action"], e["actor"]) for e in events] == [
        ("replay", key_id(stack)), ("trigger", key_id(stack)), ("create", key_id(stack))]
    assert events[0]["detail"] == {"execution_id": runs[0]["id"]}


async def test_the_circuit_breakers_pause_is_recorded_as_the_schedulers(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "breaker-history", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/status/404")},
            "retry_policy": {"max_attempts": 1}, "max_consecutive_failures": 2,
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        await wait_for_status(api, task_id, {"PAUSED"}, timeout=40)
        events = await events_until(api, task_id, 2)
        assert (await api.patch("/task/cancel", json={"task_id": task_id})).status_code == 202
    assert [(e["action"], e["actor"]) for e in events] == [("pause", "scheduler"), ("create", key_id(stack))]
    assert "2 consecutive failed runs" in events[0]["detail"]["reason"]


async def test_a_rollback_is_measured_against_the_body_limit_as_sent_not_as_escaped(stack: Stack) -> None:
    # 500 "é" are 1,000 bytes of UTF-8, and 3,000 written as \u00e9 escapes.
    body = {"task_name": "accents", "job_details": {"type": "handler", "name": "noop", "args": {"note": "é" * 500}},
            "schedule_type": "interval", "interval_seconds": 600}
    set_quota(stack.engine, "t1", max_body_bytes=2000)
    try:
        async with stack.client() as api:
            created = await api.post("/task/create", content=json.dumps(body, ensure_ascii=False).encode(),
                                     headers={"Content-Type": "application/json"})
            assert created.status_code == 201, created.text
            task_id = created.json()["task_id"]
            updated = await api.post("/task/update", json={"task_id": task_id, "interval_seconds": 7200})
            assert updated.status_code == 202, updated.text
            rolled = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1})
            assert rolled.status_code == 202, rolled.text
            assert rolled.json()["schedule"]["interval_seconds"] == 600
    finally:
        set_quota(stack.engine, "t1", max_body_bytes=None)
