"""Authentication and tenant isolation."""

from __future__ import annotations

import httpx

from store.keys import create_key, revoke_key
from tests.api.conftest import Stack

BODY = {"task_name": "mine", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "interval", "interval_seconds": 3600}


async def test_no_key_and_wrong_key_are_401(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url) as anonymous:
        for method, path in (("GET", "/tasks"), ("POST", "/task/create"), ("GET", "/tasks/abc")):
            response = await anonymous.request(method, path, json=BODY)
            assert response.status_code == 401, (path, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
        wrong = await anonymous.get("/tasks", headers={"Authorization": "Bearer not-a-key"})
        assert wrong.status_code == 401
        basic = await anonymous.get("/tasks", headers={"Authorization": "Basic dXNlcjpwYXNz"})
        assert basic.status_code == 401


async def test_revoked_key_is_refused_at_once(stack: Stack) -> None:
    row, key = create_key(stack.engine, "t9")
    async with httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        assert (await api.get("/tasks")).status_code == 200
        assert revoke_key(stack.engine, row.id)
        assert (await api.get("/tasks")).status_code == 401


async def test_revoked_key_cannot_create_on_the_next_request(stack: Stack) -> None:
    row, key = create_key(stack.engine, "t10")
    async with httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        assert (await api.post("/task/create", json=BODY)).status_code == 201
        assert revoke_key(stack.engine, row.id)
        refused = await api.post("/task/recurring", json=BODY)
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert (await api.get("/tasks")).status_code == 401


async def test_other_tenants_task_is_404_everywhere(stack: Stack) -> None:
    async with stack.client("t1") as owner, stack.client("t2") as other, stack.client("admin") as admin:
        task = (await owner.post("/task/create", json=BODY)).json()
        task_id = task["task_id"]
        for method, path, body in (
            ("GET", f"/tasks/{task_id}", None),
            ("GET", f"/tasks/{task_id}/executions", None),
            ("POST", f"/tasks/{task_id}/pause", None),
            ("POST", f"/tasks/{task_id}/resume", None),
            ("POST", f"/tasks/{task_id}/trigger", None),
            ("PATCH", "/task/cancel", {"task_id": task_id}),
            ("POST", "/task/update", {"task_id": task_id, "interval_seconds": 60}),
        ):
            response = await other.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
        listed = (await other.get("/tasks", params={"limit": 500, "all_tenants": True})).json()["items"]
        assert task_id not in {t["task_id"] for t in listed}
        everyone = (await admin.get("/tasks", params={"limit": 500, "all_tenants": True})).json()["items"]
        assert task_id in {t["task_id"] for t in everyone}
        unchanged = (await owner.get(f"/tasks/{task_id}")).json()
        assert unchanged["status"] == "PENDING" and unchanged["schedule"]["interval_seconds"] == 3600
