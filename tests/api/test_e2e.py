"""End to end through HTTP only: real API, real worker, real dev server, real HTTP target."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.api.conftest import Stack
from tests.target import TargetServer
from workflows.task import TaskWorkflow


async def wait_for_status(client: httpx.AsyncClient, task_id: str, wanted: set[str], timeout: float = 30) -> dict[str, Any]:
    """Poll the task until it reaches one of the wanted statuses."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        body = (await client.get(f"/tasks/{task_id}")).json()
        if body["status"] in wanted:
            return body
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"task stayed {body['status']}, wanted {wanted}")
        await asyncio.sleep(0.2)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def test_once_http_task_fires_once_with_idempotency_key(stack: Stack, target: TargetServer) -> None:
    run_at = datetime.now(UTC) + timedelta(seconds=3)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "ping-target",
            "job_details": {"type": "http", "url": target.url("/hook"), "method": "POST",
                            "body": {"hello": "world"},
                            # The blanks around a value are not part of it (RFC 9110): taken off.
                            "headers": {"X-Team": "growth", "X-Padded": " padded\t"}},
            "schedule_type": "once",
            "run_at": iso(run_at),
        })
        assert created.status_code == 201, created.text
        task = created.json()
        assert task["status"] == "PENDING"
        assert task["job_details"]["headers"]["X-Padded"] == "padded"
        assert datetime.fromisoformat(task["next_run_at"]) == run_at.replace(microsecond=run_at.microsecond)
        task_id = task["task_id"]

        requests = await target.wait_for(1, timeout=30)
        final = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"})
        assert final["status"] == "COMPLETED"
        assert final["run_count"] == 1 and final["success_count"] == 1
        assert final["next_run_at"] is None

        executions = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        assert len(executions) == 1
        run = executions[0]
        assert run["status"] == "COMPLETED" and run["http_status"] == 200
        assert '"ok": true' in run["response_snippet"] or '"ok":true' in run["response_snippet"]
        assert run["id"] == final["last_run"]["execution_id"]
        assert datetime.fromisoformat(run["started_at"]) >= run_at

    await asyncio.sleep(1.5)  # a duplicate delivery would show up here
    assert len(target.received) == 1
    request = requests[0]
    assert request.headers["Idempotency-Key"] == run["id"]
    assert (request.headers["X-Team"], request.headers["X-Padded"]) == ("growth", "padded")
    assert request.json() == {"hello": "world"}


def _signal(stack: Stack, task_id: str, name: str) -> None:
    """What an operator types: a plain signal through the Temporal CLI."""
    address = stack.env.client.service_client.config.target_host
    temporal = str(Path(sys.executable).parent / "temporal")
    result = subprocess.run(
        [temporal, "workflow", "signal", "--address", address, "--workflow-id",
         f"task-{task_id}", "--name", name],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr


async def test_plain_signals_act_from_a_tasks_first_second(stack: Stack) -> None:
    """Created an hour ahead, a task takes `temporal workflow signal` pause, resume, trigger
    and cancel at once, and its state query answers all along."""
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "operated", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": iso(datetime.now(UTC) + timedelta(hours=1)),
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        handle = stack.env.client.get_workflow_handle_for(TaskWorkflow.run, f"task-{task_id}")
        assert (await handle.query(TaskWorkflow.query_state)).status == "PENDING"

        # Each acts within seconds, an hour before the run (15 s: CI's load, not the bound).
        _signal(stack, task_id, "pause")
        await wait_for_status(api, task_id, {"PAUSED"}, timeout=15)
        _signal(stack, task_id, "resume")
        await wait_for_status(api, task_id, {"PENDING"}, timeout=15)
        _signal(stack, task_id, "trigger")

        async def triggered() -> bool:
            runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
            return [r["status"] for r in runs] == ["COMPLETED"]

        deadline = asyncio.get_running_loop().time() + 15
        while not await triggered():
            assert asyncio.get_running_loop().time() < deadline, "the trigger signal did not run"
            await asyncio.sleep(0.1)
        _signal(stack, task_id, "cancel")
        final = await wait_for_status(api, task_id, {"CANCELLED"}, timeout=15)
        assert final["next_run_at"] is None
        assert (await handle.query(TaskWorkflow.query_state)).status == "CANCELLED"

        # a cancelled task refuses further changes
        again = await api.post(f"/tasks/{task_id}/trigger")
        assert again.status_code == 409
        assert again.headers["content-type"].startswith("application/problem+json")


async def test_cancel_running_job_through_api(stack: Stack) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "long-sleep",
            "job_details": {"type": "handler", "name": "sleep", "args": {"seconds": 120}},
            "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "heartbeat_timeout_seconds": 3,
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        await wait_for_status(api, task_id, {"RUNNING"})
        cancelled = await api.patch("/task/cancel", json={"task_id": task_id, "task_name": "long-sleep"})
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["status"] == "CANCELLED", "the answer waits for the run's end"
        final = await wait_for_status(api, task_id, {"CANCELLED"}, timeout=30)
        assert final["status"] == "CANCELLED"
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        assert [r["status"] for r in runs] == ["CANCELLED"]
        assert runs[0]["finished_at"] is not None


async def test_update_pause_resume_trigger(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        await _update_pause_resume_trigger(api, target)


async def _update_pause_resume_trigger(api: httpx.AsyncClient, target: TargetServer) -> str:
    hour = (datetime.now(UTC).hour + 12) % 24  # its daily fire never comes during the test
    created = await api.post("/task/recurring", json={
        "task_name": "daily", "job_details": {"type": "http", "url": target.url("/daily")},
        "schedule_type": "cron", "cron": f"0 {hour} * * *", "timezone": "UTC",
    })
    task_id: str = created.json()["task_id"]
    assert created.status_code == 201 and (await api.get(f"/tasks/{task_id}")).json()["status"] == "PENDING"
    first_next = datetime.fromisoformat(created.json()["next_run_at"])
    assert (first_next.hour, first_next.minute) == (hour, 0)

    updated = await api.post("/task/update", json={"task_id": task_id, "cron": "30 6 * * 1", "task_name": "weekly"})
    assert updated.status_code == 202, updated.text
    body = updated.json()
    assert body["task_name"] == "weekly" and body["schedule"]["cron"] == "30 6 * * 1"
    next_run = datetime.fromisoformat(body["next_run_at"])
    assert next_run.weekday() == 0 and (next_run.hour, next_run.minute) == (6, 30)
    row = (await api.get(f"/tasks/{task_id}")).json()
    assert row["task_name"] == "weekly" and row["next_run_at"] == body["next_run_at"]

    bad = await api.post("/task/update", json={"task_id": task_id, "cron": "not a cron"})
    assert bad.status_code == 422 and "cron" in bad.json()["detail"]
    assert (await api.get(f"/tasks/{task_id}")).json()["schedule"]["cron"] == "30 6 * * 1"

    paused = await api.post(f"/tasks/{task_id}/pause", json={"reason": "maintenance"})
    assert paused.status_code == 202 and paused.json()["status"] == "PAUSED"
    assert paused.json()["next_run_at"] is None
    assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PAUSED"

    resumed = await api.post(f"/tasks/{task_id}/resume")
    assert resumed.status_code == 202 and resumed.json()["status"] == "PENDING"
    assert resumed.json()["next_run_at"] == body["next_run_at"]

    triggered = await api.post(f"/tasks/{task_id}/trigger")
    assert triggered.status_code == 202
    await target.wait_for(1)
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        if runs and runs[0]["status"] == "COMPLETED":
            break
        assert asyncio.get_running_loop().time() < deadline, runs
        await asyncio.sleep(0.2)
    assert runs[0]["trigger"] == "manual" and ":manual-" in runs[0]["id"]
    # The jobs worker marks the run done at once; the task row follows from its workflow.
    while True:
        after = await wait_for_status(api, task_id, {"PENDING"})
        if after["run_count"] or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert after["next_run_at"] == body["next_run_at"] and after["run_count"] == 1
    return task_id


async def test_list_newest_first_with_cursor_and_filters(stack: Stack) -> None:
    async with stack.client("t2") as api:
        ids = []
        for n in range(5):
            created = await api.post("/task/recurring", json={
                "task_name": f"list-{n % 2}", "job_details": {"type": "handler", "name": "noop"},
                "schedule_type": "interval", "interval_seconds": 86400,
            })
            ids.append(created.json()["task_id"])
        page1 = (await api.get("/tasks/?limit=2")).json()
        assert [t["task_id"] for t in page1["items"]] == ids[::-1][:2]
        page2 = (await api.get("/tasks", params={"limit": 2, "cursor": page1["next_cursor"]})).json()
        page3 = (await api.get("/tasks", params={"limit": 2, "cursor": page2["next_cursor"]})).json()
        seen = [t["task_id"] for p in (page1, page2, page3) for t in p["items"]]
        assert seen == ids[::-1] and page3["next_cursor"] is None
        named = (await api.get("/tasks", params={"name": "list-1"})).json()["items"]
        assert sorted(t["task_id"] for t in named) == sorted([ids[1], ids[3]])
        pending = (await api.get("/tasks", params={"status": "PENDING"})).json()["items"]
        assert len(pending) == 5
        assert (await api.get("/tasks", params={"status": "NOPE"})).status_code == 422
        assert (await api.get("/tasks", params={"cursor": "garbage!"})).status_code == 422
        assert (await api.get("/tasks", params={"limit": 0})).status_code == 422


async def test_health_and_metrics(stack: Stack) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    async with stack.client() as owner:
        created = await owner.post("/task/create", json={
            "task_name": "metered", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
        })
        await wait_for_status(owner, created.json()["task_id"], {"COMPLETED"})
    async with httpx.AsyncClient(base_url=stack.base_url) as api:
        health = await api.get("/checkHealth/")
        assert health.status_code == 200, health.text
        assert health.json()["checks"]["database"] == "up"
        assert health.json()["checks"]["workers"].startswith("up")
        backlog = health.json()["checks"]["backlog"]
        assert set(backlog) == {"workflow", "activity", "jobs"}
        assert all(b["age_seconds"] >= 0 and b["count"] >= 0 for b in backlog.values())
        metrics = await api.get("/metrics")
        assert metrics.status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
        assert "scheduler_http_requests" in families
        counted = {(s.labels["route"], s.labels["method"], s.labels["status"])
                   for s in families["scheduler_http_requests"].samples if s.name.endswith("_total")}
        assert ("/task/create", "POST", "201") in counted  # by route template, not raw path
        assert ("/tasks/{task_id}", "GET", "200") in counted
        assert "scheduler_tasks" in families
        executions = {(s.labels["status"], s.labels["reason"]) for s in families["scheduler_executions"].samples}
        assert ("COMPLETED", "") in executions
        docs = await api.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        spec = (await api.get("/openapi.json")).json()
        for path in ("/task/create", "/task/recurring", "/task/cancel", "/task/update",
                     "/tasks/{task_id}", "/tasks", "/checkHealth", "/metrics",
                     "/tasks/{task_id}/executions", "/tasks/{task_id}/pause",
                     "/tasks/{task_id}/resume", "/tasks/{task_id}/trigger"):
            assert path in spec["paths"], path
        create = spec["paths"]["/task/create"]["post"]["requestBody"]["content"]["application/json"]
        assert len(create["examples"]) >= 3
