"""The gateway: idempotent creates, quotas, rate limits and the error format."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from store.keys import create_key
from store.quotas import set_quota
from store.tasks import list_tasks
from tests.api.conftest import Stack, serve_api

BODY: dict[str, Any] = {"task_name": "idem", "job_details": {"type": "handler", "name": "noop"},
                        "schedule_type": "interval", "interval_seconds": 3600}


def _tenant_client(stack: Stack, tenant: str, base_url: str | None = None) -> httpx.AsyncClient:
    _, key = create_key(stack.engine, tenant)
    return httpx.AsyncClient(base_url=base_url or stack.base_url, timeout=60,
                             headers={"Authorization": f"Bearer {key}"})


async def test_same_key_same_body_same_task_other_body_422(stack: Stack) -> None:
    tenant = f"idem-{uuid.uuid4().hex[:6]}"
    async with _tenant_client(stack, tenant) as api:
        first = await api.post("/task/create", json=BODY, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == 201, first.text
        again = await api.post("/task/create", json=BODY, headers={"Idempotency-Key": "k-1"})
        assert again.status_code == 200 and again.json()["task_id"] == first.json()["task_id"]
        other = await api.post("/task/create", json={**BODY, "task_name": "different"},
                               headers={"Idempotency-Key": "k-1"})
        assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key", other.text
        recurring = await api.post("/task/recurring", json=BODY, headers={"Idempotency-Key": "k-1"})
        assert recurring.status_code == 422  # another endpoint is another request
        fresh = await api.post("/task/create", json=BODY, headers={"Idempotency-Key": "k-2"})
        assert fresh.status_code == 201 and fresh.json()["task_id"] != first.json()["task_id"]
    rows, _ = list_tasks(stack.engine, tenant_id=tenant, limit=10)
    assert len(rows) == 2


async def test_fifty_parallel_identical_creates_make_one_task(stack: Stack) -> None:
    tenant = f"burst-{uuid.uuid4().hex[:6]}"
    async with _tenant_client(stack, tenant) as api:
        responses = await asyncio.gather(*(
            api.post("/task/create", json=BODY, headers={"Idempotency-Key": "same"}) for _ in range(50)
        ))
    assert sorted({r.status_code for r in responses}) in ([200, 201], [201])
    assert sum(r.status_code == 201 for r in responses) == 1, [r.text for r in responses if r.status_code >= 300]
    assert len({r.json()["task_id"] for r in responses}) == 1
    rows, _ = list_tasks(stack.engine, tenant_id=tenant, limit=10)
    assert len(rows) == 1
    workflows = await stack.env.client.count_workflows(f"TenantId = '{tenant}'")
    assert workflows.count == 1


async def test_quotas_refuse_with_the_limit_named(stack: Stack) -> None:
    tenant = f"quota-{uuid.uuid4().hex[:6]}"
    set_quota(stack.engine, tenant, max_active_tasks=2, min_interval_seconds=120,
              max_body_bytes=600, max_header_bytes=40)
    async with _tenant_client(stack, tenant) as api:
        short = await api.post("/task/create", json={**BODY, "interval_seconds": 30})
        assert short.status_code == 422 and "min_interval_seconds=120" in short.json()["detail"]
        every_minute = await api.post("/task/create", json={**BODY, "schedule_type": "cron",
                                                            "interval_seconds": None, "cron": "* * * * *"})
        assert every_minute.status_code == 422 and "60s apart" in every_minute.json()["detail"]
        seconds = await api.post("/task/create", json={**BODY, "schedule_type": "cron", "interval_seconds": None,
                                                       "cron": "0 */5 * * * *"})
        assert seconds.status_code == 422 and "allow_seconds_cron=false" in seconds.json()["detail"]
        headers = await api.post("/task/create", json={**BODY, "job_details": {
            "type": "http", "url": "https://example.com/x", "headers": {"X-Long": "v" * 64}}})
        assert headers.status_code == 422 and "max_header_bytes=40" in headers.json()["detail"]
        big = await api.post("/task/create", json={**BODY, "task_name": "n" * 190,
                                                   "job_details": {"type": "handler", "name": "log", "args": {"pad": "x" * 500}}})
        assert big.status_code == 413 and "max_body_bytes=600" in big.json()["detail"]
        assert (await api.post("/task/create", json=BODY)).status_code == 201
        assert (await api.post("/task/create", json=BODY)).status_code == 201
        third = await api.post("/task/create", json=BODY)
        assert third.status_code == 403 and "max_active_tasks=2" in third.json()["detail"]
    rows, _ = list_tasks(stack.engine, tenant_id=tenant, limit=10)
    assert len(rows) == 2


async def test_updates_are_held_to_the_quota_too(stack: Stack) -> None:
    tenant = f"quota-up-{uuid.uuid4().hex[:6]}"
    set_quota(stack.engine, tenant, min_interval_seconds=120, max_body_bytes=600, max_header_bytes=40)
    async with _tenant_client(stack, tenant) as api:
        created = await api.post("/task/create", json=BODY)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]

        async def update(**change: Any) -> httpx.Response:
            return await api.post("/task/update", json={"task_id": task_id, **change})

        short = await update(interval_seconds=30)
        assert short.status_code == 422 and "min_interval_seconds=120" in short.json()["detail"]
        every_minute = await update(schedule_type="cron", cron="* * * * *")
        assert every_minute.status_code == 422 and "60s apart" in every_minute.json()["detail"]
        seconds = await update(schedule_type="cron", cron="0 */5 * * * *")
        assert seconds.status_code == 422 and "allow_seconds_cron=false" in seconds.json()["detail"]
        headers = await update(job_details={"type": "http", "url": "https://example.com/x",
                                            "headers": {"X-Long": "v" * 64}})
        assert headers.status_code == 422 and "max_header_bytes=40" in headers.json()["detail"]
        big = await update(job_details={"type": "handler", "name": "log", "args": {"pad": "x" * 600}})
        assert big.status_code == 413 and "max_body_bytes=600" in big.json()["detail"]
        unchanged = (await api.get(f"/tasks/{task_id}")).json()
        assert unchanged["schedule"]["interval_seconds"] == 3600, unchanged
        assert unchanged["job_details"]["name"] == "noop", unchanged

        slower = await update(interval_seconds=7200)
        assert slower.status_code == 202, slower.text
        # A quota tightened later refuses new schedules, not changes that leave the schedule be.
        set_quota(stack.engine, tenant, min_interval_seconds=10_000)
        renamed = await update(task_name="renamed")
        assert renamed.status_code == 202, renamed.text
        task = renamed.json()  # the workflow's state after the change
        assert task["task_name"] == "renamed" and task["schedule"]["interval_seconds"] == 7200, task
        ends = await update(end_date="2099-01-01T00:00:00Z")  # bounds only: the gaps stay
        assert ends.status_code == 202, ends.text
        assert (await update(interval_seconds=9000)).status_code == 422


async def test_an_admin_update_is_held_to_the_quota_of_the_task_s_tenant(stack: Stack) -> None:
    tenant = f"quota-own-{uuid.uuid4().hex[:6]}"
    set_quota(stack.engine, tenant, allow_seconds_cron=True, min_interval_seconds=120)
    _, admin_key = create_key(stack.engine, f"ops-{uuid.uuid4().hex[:6]}", admin=True)
    async with _tenant_client(stack, tenant) as api:
        task_id = (await api.post("/task/create", json=BODY)).json()["task_id"]
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=60,
                                 headers={"Authorization": f"Bearer {admin_key}"}) as admin:
        fast = await admin.post("/task/update", json={"task_id": task_id, "interval_seconds": 60})
        assert fast.status_code == 422 and "min_interval_seconds=120" in fast.json()["detail"]
        # The owner may have seconds in its crons; the admin's own tenant may not.
        seconds = await admin.post("/task/update", json={
            "task_id": task_id, "schedule_type": "cron", "cron": "0 */5 * * * *"})
        assert seconds.status_code == 202, seconds.text
        assert seconds.json()["schedule"]["cron"] == "0 */5 * * * *"


async def test_rate_limit_answers_429_with_retry_after(stack: Stack) -> None:
    tenant = f"rate-{uuid.uuid4().hex[:6]}"
    async with serve_api(stack.env, stack.engine, temporal_task_queue=stack.task_queue,
                         rate_limit_writes="3/minute", rate_limit_reads="5/minute") as url:
        async with _tenant_client(stack, tenant, url) as api:
            statuses = [(await api.post("/task/create", json=BODY)).status_code for _ in range(4)]
            assert statuses == [201, 201, 201, 429]
            limited = await api.post("/task/create", json=BODY)
            assert limited.status_code == 429
            assert 1 <= int(limited.headers["Retry-After"]) <= 60
            assert limited.headers["content-type"].startswith("application/problem+json")
            reads = [(await api.get("/tasks")).status_code for _ in range(6)]
            assert reads == [200] * 5 + [429]
    rows, _ = list_tasks(stack.engine, tenant_id=tenant, limit=10)
    assert len(rows) == 3


async def test_the_ui_pages_count_against_the_tenants_read_limit(stack: Stack) -> None:
    # A page reads the tenant's rows as the API does: it cannot read past the limit the API keeps.
    tenant = f"ui-rate-{uuid.uuid4().hex[:6]}"
    _, key = create_key(stack.engine, tenant)
    async with serve_api(stack.env, stack.engine, temporal_task_queue=stack.task_queue,
                         rate_limit_reads="4/minute") as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as browser:
            browser.cookies.set("ts_ui_key", key, path="/ui")
            pages = [await browser.get("/ui") for _ in range(3)]
            api = [(await browser.get("/tasks", headers={"Authorization": f"Bearer {key}"})).status_code
                   for _ in range(2)]
    assert [p.status_code for p in pages] == [200, 200, 200] and api == [200, 429]
    async with serve_api(stack.env, stack.engine, temporal_task_queue=stack.task_queue,
                         rate_limit_reads="1/minute") as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as browser:
            browser.cookies.set("ts_ui_key", key, path="/ui")
            assert (await browser.get("/ui")).status_code == 200
            refused = await browser.get("/ui/tasks/no-such-task")
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["content-type"].startswith("text/html") and "read limit" in refused.text


async def test_error_format_for_protocol_errors(stack: Stack) -> None:
    async with stack.client() as api:
        unknown = await api.get("/no/such/route")
        assert unknown.status_code == 404
        wrong_method = await api.delete("/task/create")
        assert wrong_method.status_code == 405
        form = await api.post("/task/create", content=b"task_name=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415
        huge = await api.post("/task/create", content=b'{"task_name": "' + b"x" * (2 * 1024 * 1024) + b'"}',
                              headers={"Content-Type": "application/json"})
        assert huge.status_code == 413
    for response in (unknown, wrong_method, form, huge):
        assert response.headers["content-type"].startswith("application/problem+json"), response
        problem = response.json()
        assert problem["type"].startswith("https://") and problem["status"] == response.status_code
        assert "Traceback" not in response.text


async def test_a_body_sent_without_its_length_is_bounded_like_any_other(stack: Stack) -> None:
    async def chunks() -> Any:
        yield b'{"task_name": "'
        for _ in range(64):
            yield b"x" * 32 * 1024
        yield b'"}'

    async with stack.client() as api:
        huge = await api.post("/task/preview", content=chunks(), headers={"Content-Type": "application/json"})
        assert huge.status_code == 413, huge.text
        assert "exceeds the limit" in huge.json()["detail"]

        async def small() -> Any:
            yield b'{"task_name": "chunked", "job_details": {"type": "handler", "name": "noop"}, '
            yield b'"schedule_type": "interval", "interval_seconds": 3600}'

        fine = await api.post("/task/preview", content=small(), headers={"Content-Type": "application/json"})
        assert fine.status_code == 200, fine.text


async def test_header_values_that_are_not_utf8_are_no_server_error(stack: Stack) -> None:
    body = {"task_name": "h", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600}
    async with stack.client() as api:
        odd = await api.post("/task/preview", json=body, headers={"X-Anything": b"\xff"})
        assert odd.status_code == 200, odd.text
        keyed = await api.post("/task/preview", json=body, headers={"Idempotency-Key": b"caf\xe9"})
        assert keyed.status_code < 500, keyed.text
