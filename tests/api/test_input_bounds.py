"""Text PostgreSQL cannot store and values past their bounds get a 422 naming the field, on SQLite
and PostgreSQL alike, and change nothing: no workflow, no row."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

FUTURE = (datetime.now(UTC) + timedelta(days=1)).isoformat()
HTTP: dict[str, Any] = {"type": "http", "url": "http://127.0.0.1:9/hook"}
ONCE: dict[str, Any] = {"task_name": "bounds", "job_details": {"type": "handler", "name": "noop"},
                        "schedule_type": "once", "run_at": FUTURE}
RECURRING: dict[str, Any] = {**ONCE, "schedule_type": "interval", "interval_seconds": 3600, "run_at": None}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


BAD_CREATES: list[tuple[str, dict[str, Any], str]] = [
    ("NUL in task_name", {**ONCE, "task_name": "a\x00b"}, "task_name"),
    ("NUL in url", {**ONCE, "job_details": {**HTTP, "url": "http://127.0.0.1:9/\x00"}}, "job_details.url"),
    ("NUL in header value", {**ONCE, "job_details": {**HTTP, "headers": {"X-A": "a\x00"}}}, "job_details.headers"),
    ("NUL in header name", {**ONCE, "job_details": {**HTTP, "headers": {"X-\x00": "a"}}}, "job_details.headers"),
    ("NUL in body", {**ONCE, "job_details": {**HTTP, "body": {"k": ["v\x00"]}}}, "job_details.body"),
    ("NUL in body key", {**ONCE, "job_details": {**HTTP, "body": {"k\x00": 1}}}, "job_details.body"),
    ("NUL in handler args", {**ONCE, "job_details": {"type": "handler", "name": "noop", "args": {"a": "\x00"}}},
     "job_details.args"),
    ("NUL in workflow args", {**ONCE, "job_details": {"type": "workflow", "workflow_type": "EchoWorkflow",
                                                      "args": ["\x00"]}}, "job_details.args"),
    ("NUL in cron", {**RECURRING, "schedule_type": "cron", "interval_seconds": None, "cron": "0 10 * * *\x00"},
     "cron"),
    ("NUL in timezone", {**RECURRING, "timezone": "UTC\x00"}, "timezone"),
    ("NUL in notify url", {**ONCE, "notify": {"url": "http://127.0.0.1:9/\x00"}}, "notify.url"),
    ("run_at in 9999 with jitter", {**ONCE, "run_at": "9999-12-31T23:59:59Z", "jitter_seconds": 3600}, "run_at"),
    ("run_at in year 1 at +14:00", {**ONCE, "run_at": "0001-01-01T00:00:00+14:00",
                                    "missed_run_policy": "catchup"}, "run_at"),
    ("start_date in year 1", {**RECURRING, "start_date": "0001-01-01T00:00:00Z"}, "start_date"),
    ("end_date in 9999", {**RECURRING, "end_date": "9999-12-31T23:59:59-14:00"}, "end_date"),
    ("catchup window 1e300", {**RECURRING, "catchup_window_seconds": 1e300}, "catchup_window_seconds"),
    ("drift threshold 1e300", {**RECURRING, "drift_threshold_seconds": 1e300}, "drift_threshold_seconds"),
    ("max_runs 1e30", {**RECURRING, "max_runs": 10**30}, "max_runs"),
    ("workflow timeout 1e300", {**ONCE, "job_details": {"type": "workflow", "workflow_type": "EchoWorkflow",
                                                        "execution_timeout_seconds": 1e300}},
     "job_details.execution_timeout_seconds"),
    ("body nested 400 deep", {**ONCE, "job_details": {**HTTP, "body": nested(400)}}, "job_details.body"),
    ("body nested 900 deep", {**ONCE, "job_details": {**HTTP, "body": nested(900)}}, "job_details.body"),
    ("args nested 40 deep", {**ONCE, "job_details": {"type": "handler", "name": "noop", "args": nested(40)}},
     "job_details.args"),
    ("CR LF in header value", {**ONCE, "job_details": {**HTTP, "headers": {"X-A": "a\r\nX-Evil: 1"}}},
     "job_details.headers"),
    ("space in header name", {**ONCE, "job_details": {**HTTP, "headers": {"X A": "a"}}}, "job_details.headers"),
    ("non-ASCII header value", {**ONCE, "job_details": {**HTTP, "headers": {"X-A": "é"}}}, "job_details.headers"),
]


async def tenant_state(stack: Stack, tenant: str = "t2") -> tuple[int, int]:
    """The tenant's task rows (as the API lists them) and its workflows."""
    async with stack.client(tenant) as api:
        rows = len((await api.get("/tasks", params={"limit": 500})).json()["items"])
    workflows = await stack.env.client.count_workflows(f"TenantId = '{tenant}'")
    return rows, workflows.count


def assert_refused(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["field"].startswith(field) and field in problem["detail"], problem


@pytest.mark.parametrize(("case", "body", "field"), BAD_CREATES, ids=[c[0] for c in BAD_CREATES])
async def test_a_create_past_any_bound_is_a_422_and_changes_nothing(
    stack: Stack, case: str, body: dict[str, Any], field: str
) -> None:
    before = await tenant_state(stack)
    async with stack.client("t2") as api:
        for path in ("/task/create", "/task/recurring"):
            if path == "/task/recurring" and body["schedule_type"] == "once":
                continue
            assert_refused(await api.post(path, json=body), field)
    assert await tenant_state(stack) == before


@pytest.mark.parametrize("raw", [
    b'{"k": NaN}', b'{"k": [Infinity]}', b'"\\ud800"', b'{"\\udfff": 1}',
], ids=["NaN", "Infinity", "lone surrogate", "lone surrogate key"])
async def test_a_body_json_cannot_store_is_a_422(stack: Stack, raw: bytes) -> None:
    before = await tenant_state(stack)
    content = json.dumps({**ONCE, "job_details": {**HTTP, "body": "RAW"}}).encode().replace(b'"RAW"', raw)
    async with stack.client("t2") as api:
        response = await api.post("/task/create", content=content, headers={"Content-Type": "application/json"})
    assert_refused(response, "job_details.body")
    assert await tenant_state(stack) == before


async def test_a_surrogate_in_a_text_field_is_a_422(stack: Stack) -> None:
    content = json.dumps(ONCE).replace('"bounds"', '"a\\ud800"').encode()
    async with stack.client("t2") as api:
        response = await api.post("/task/create", content=content, headers={"Content-Type": "application/json"})
    assert_refused(response, "task_name")


async def test_a_create_that_answered_201_has_its_row(stack: Stack) -> None:
    async with stack.client("t2") as api:
        created = await api.post("/task/create", json={**ONCE, "task_name": "ünïcode ✓ \t tab"})
        assert created.status_code == 201, created.text
        task = created.json()
        assert (await api.get(f"/tasks/{task['task_id']}")).json()["task_name"] == "ünïcode ✓ \t tab"
        listed = (await api.get("/tasks", params={"name": "ünïcode ✓ \t tab"})).json()["items"]
        assert task["task_id"] in [t["task_id"] for t in listed]


BAD_UPDATES: list[tuple[dict[str, Any], str]] = [
    ({"task_name": "x\x00"}, "task_name"),
    ({"run_at": "9999-12-31T23:59:59Z"}, "run_at"),
    ({"run_at": "0001-01-01T00:00:00+14:00"}, "run_at"),
    ({"catchup_window_seconds": 1e300}, "catchup_window_seconds"),
    ({"drift_threshold_seconds": 1e300}, "drift_threshold_seconds"),
    ({"job_details": {**HTTP, "headers": {"X-A": "a\nb"}}}, "job_details.headers"),
    ({"job_details": {**HTTP, "body": nested(500)}}, "job_details.body"),
]


async def test_an_update_past_any_bound_is_a_422_and_changes_nothing(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = (await api.post("/task/create", json=ONCE)).json()
        for change, field in BAD_UPDATES:
            assert_refused(await api.post("/task/update", json={"task_id": task["task_id"], **change}), field)
        assert_refused(await api.post("/task/update", json={"task_id": "a\x00", "task_name": "b"}), "task_id")
        assert_refused(await api.patch("/task/cancel", json={"task_id": task["task_id"], "reason": "\x00"}),
                       "reason")
        assert_refused(await api.patch("/task/cancel", json={"task_id": task["task_id"], "task_name": "\x00"}),
                       "task_name")
        assert_refused(await api.post(f"/tasks/{task['task_id']}/pause", json={"reason": "\x00"}), "reason")
        after = (await api.get(f"/tasks/{task['task_id']}")).json()
    assert after["status"] == "PENDING"
    assert after["schedule"] == task["schedule"] and after["job_details"] == task["job_details"]


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", "/tasks/a%00b", "task_id"),
    ("GET", "/tasks?name=a%00b", "name"),
    ("GET", "/tasks/a%00b/executions", "task_id"),
    ("POST", "/tasks/a%00b/pause", "task_id"),
    ("POST", "/tasks/a%00b/resume", "task_id"),
    ("POST", "/tasks/a%00b/trigger", "task_id"),
    ("POST", "/dead-letters/a%00b/replay", "execution_id"),
    ("DELETE", "/dead-letters/a%00b", "execution_id"),
    ("GET", "/tasks?a%00=1", "a\x00"),
])
async def test_a_nul_in_a_path_or_query_parameter_is_a_422(stack: Stack, method: str, path: str, field: str) -> None:
    async with stack.client("t1") as api:
        assert_refused(await api.request(method, path), field)


def request_schemas(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The component schemas a request body refers to, directly or through others."""
    schemas, seen = spec["components"]["schemas"], {}
    todo = [json.dumps(op.get("requestBody", {})) for path in spec["paths"].values() for op in path.values()]
    while todo:
        for name in set(part.split('"')[0] for part in todo.pop().split("#/components/schemas/")[1:]):
            if name not in seen:
                seen[name] = schemas[name]
                todo.append(json.dumps(schemas[name]))
    return seen


async def test_every_number_and_instant_a_request_takes_documents_its_bounds(stack: Stack) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
    checked = 0
    for name, schema in request_schemas(spec).items():
        for field, prop in schema.get("properties", {}).items():
            for branch in prop.get("anyOf", [prop]):
                if branch.get("type") in ("number", "integer"):
                    checked += 1
                    assert "maximum" in branch, (name, field, branch)
                    assert "minimum" in branch or "exclusiveMinimum" in branch, (name, field, branch)
                if branch.get("format") == "date-time":
                    checked += 1
                    assert "2000-01-01T00:00:00Z and 2999-12-31T23:59:59Z" in prop["description"], (name, field)
    params = [p for path in spec["paths"].values() for op in path.values() for p in op.get("parameters", [])]
    for param in params:
        for branch in param["schema"].get("anyOf", [param["schema"]]):
            if branch.get("type") == "integer":
                assert "maximum" in branch and "minimum" in branch, param
            if branch.get("type") == "string" and "enum" not in branch and param["in"] != "header":
                assert "pattern" in branch, param
    assert checked > 30
