"""A hostile tenant's job and webhook URLs through the API and a real worker: malformed hosts
get a 4xx naming the field and change nothing; the scheduler's own ports are refused even in
dev, where loopback targets are allowed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from outbound.egress import EgressPolicy, static_resolver
from store.engine import make_engine, migrate
from store.keys import create_key
from tests.api.conftest import Stack, serve_api
from tests.api.test_e2e import wait_for_status
from tests.conftest import new_worker, settings_of
from tests.target import TargetServer

BAD_URLS = [
    "http://0177.0.0.1/", "http://a..b/", "http://xn--/", "http://0x7f.1/", "http://2130706433/",
    "http://127.1/", "http://[fe80::1%25eth0]/", "http://a:99999/", "http://a:+80/",
    "http://exa%41mple.com/", "http://ＥＸＡＭＰＬＥ.com/", "http://xn--zz-.example/",
    "http://192.0.0.192/latest/", "http://[2002:7f00:1::]/", "http://[2002:a9fe:a9fe::]/",
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "http://[::ffff:10.0.0.1]/",
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fef5]/",  # Teredo, client 10.0.0.10
    "http://" + "a" * 64 + ".example/",
]
LATER = {"schedule_type": "cron", "cron": "0 10 * * *", "timezone": "Europe/Berlin"}


def _job(url: str) -> dict[str, Any]:
    return {"task_name": "hostile", "job_details": {"type": "http", "url": url}, **LATER}


def _webhook(url: str) -> dict[str, Any]:
    return {**_job("https://example.com/hook"), "notify": {"url": url}}


async def _tasks_and_workflows(stack: Stack) -> tuple[int, int]:
    async with stack.client("t2") as api:
        rows = len((await api.get("/tasks", params={"limit": 500})).json()["items"])
    return rows, (await stack.env.client.count_workflows("TenantId = 't2'")).count


@pytest.mark.parametrize("url", BAD_URLS)
async def test_bad_urls_get_a_4xx_naming_the_field_and_create_nothing(stack: Stack, url: str) -> None:
    before = await _tasks_and_workflows(stack)
    async with stack.client("t2") as api:
        for body, field in ((_job(url), "job_details.url"), (_webhook(url), "notify.url")):
            response = await api.post("/task/create", json=body)
            assert 400 <= response.status_code < 500, (field, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert field in response.json()["detail"], response.json()
    assert await _tasks_and_workflows(stack) == before


async def test_bad_urls_in_an_update_change_nothing(stack: Stack) -> None:
    async with stack.client("t2") as api:
        task = (await api.post("/task/create", json=_job("https://example.com/hook"))).json()
        for url in BAD_URLS[:6]:
            for change, field in (({"job_details": {"type": "http", "url": url}}, "job_details.url"),
                                  ({"notify": {"url": url}}, "notify.url")):
                response = await api.post("/task/update", json={"task_id": task["task_id"], **change})
                assert 400 <= response.status_code < 500, response.text
                assert field in response.json()["detail"], response.json()
        after = (await api.get(f"/tasks/{task['task_id']}")).json()
    assert after["job_details"] == task["job_details"] and after.get("notify") == task.get("notify")


@dataclass
class DevStack:
    api: httpx.AsyncClient
    key: str
    api_port: int
    temporal_port: int


@pytest.fixture
async def dev_stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[DevStack]:
    """API and worker as `task-scheduler dev` configures them (loopback allowed, no allowlist
    set). The worker resolves scheduler.rebind.test to loopback; the API's resolver does not
    know the name: a DNS answer that changed after the task was created."""
    engine = make_engine(f"sqlite:///{tmp_path / 'dev.db'}")
    migrate(engine)
    key = create_key(engine, "t1")[1]
    queue = f"dev-{uuid.uuid4()}"
    temporal = dev_env.client.service_client.config.target_host
    async with serve_api(dev_env, engine, env="dev", egress_allow="", temporal_task_queue=queue,
                         temporal_address=temporal) as base_url:
        api_port = int(base_url.rsplit(":", 1)[1])
        settings = settings_of(env="dev", api_port=api_port, temporal_address=temporal)
        assert "127.0.0.0/8" in settings.egress_allow_list  # dev's loopback default
        egress = EgressPolicy.from_list(
            settings.egress_allow_list, own_ports=settings.own_ports,
            resolver=static_resolver({"scheduler.rebind.test": ["127.0.0.1"]}),
        )
        async with new_worker(dev_env.client, engine, task_queue=queue, egress=egress):
            async with httpx.AsyncClient(base_url=base_url, timeout=30,
                                         headers={"Authorization": f"Bearer {key}"}) as api:
                yield DevStack(api, key, api_port, int(temporal.rsplit(":", 1)[1]))
    engine.dispose()


async def test_dev_refuses_the_schedulers_own_ports_at_create(dev_stack: DevStack, target: TargetServer) -> None:
    own = [f"http://127.0.0.1:{dev_stack.api_port}/task/create", f"http://localhost:{dev_stack.api_port}/",
           f"http://127.0.0.1:{dev_stack.temporal_port}/", f"http://[::1]:{dev_stack.temporal_port}/",
           "http://127.0.0.1:8233/"]
    for url in own:
        for body, field in ((_job(url), "job_details.url"), (_webhook(url), "notify.url")):
            response = await dev_stack.api.post("/task/create", json=body)
            assert response.status_code == 422, response.text
            assert field in response.json()["detail"] and "own" in response.json()["detail"]
    # Loopback itself is a target in dev: the refusal is the port's.
    created = await dev_stack.api.post("/task/create", json={
        "task_name": "local", "job_details": {"type": "http", "url": target.url("/local")},
        "schedule_type": "once", "run_at": datetime.now(UTC).isoformat(),
    })
    assert created.status_code == 201, created.text
    await target.wait_for(1, timeout=30)
    listed = (await dev_stack.api.get("/tasks", params={"limit": 50})).json()["items"]
    assert [t["task_name"] for t in listed] == ["local"]


async def test_dev_worker_refuses_a_job_aimed_at_the_api_port(dev_stack: DevStack) -> None:
    # The job would create a task with the tenant's own key, from inside the deployment.
    smuggled = {"task_name": "smuggled", "job_details": {"type": "handler", "name": "noop"}, **LATER}
    created = await dev_stack.api.post("/task/create", json={
        "task_name": "aimed-at-api", "schedule_type": "once",
        "run_at": (datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
        "job_details": {"type": "http", "method": "POST", "body": smuggled,
                        "url": f"http://scheduler.rebind.test:{dev_stack.api_port}/task/create",
                        "headers": {"Authorization": f"Bearer {dev_stack.key}"}},
    })
    assert created.status_code == 201, created.text  # the name did not resolve at creation
    task_id = created.json()["task_id"]
    final = await wait_for_status(dev_stack.api, task_id, {"FAILED", "COMPLETED"})
    assert final["status"] == "FAILED", final
    runs = (await dev_stack.api.get(f"/tasks/{task_id}/executions")).json()["items"]
    assert len(runs) == 1 and runs[0]["attempts"] == 1, runs  # refused, not retried
    assert "refused" in runs[0]["error"] and "own" in runs[0]["error"], runs[0]
    names = [t["task_name"] for t in (await dev_stack.api.get("/tasks")).json()["items"]]
    assert names == ["aimed-at-api"]
