"""The OpenAPI document says what the API accepts, in the shape a generated client needs."""

from __future__ import annotations

import re
from typing import Any

from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

ONCE = {"task_name": "contract", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "once", "run_at": "2030-01-01T09:00:00Z"}


def body_schema(spec: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    schema: dict[str, Any] = spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return schema


async def test_create_bodies_are_unions_by_schedule_type(stack: Stack) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
    create, recurring = body_schema(spec, "/task/create"), body_schema(spec, "/task/recurring")
    assert create["discriminator"]["propertyName"] == "schedule_type"
    assert sorted(create["discriminator"]["mapping"]) == ["cron", "dates", "interval", "once"]
    assert sorted(recurring["discriminator"]["mapping"]) == ["cron", "interval"]
    schemas = spec["components"]["schemas"]
    assert schemas["OnceTask"]["required"] == ["task_name", "job_details", "schedule_type", "run_at"]
    # Another kind's field may only be null (as a client with one flat model sends it).
    assert schemas["OnceTask"]["properties"]["cron"]["type"] == "null"
    assert "cron" in schemas["CronTask"]["required"]
    assert schemas["CronTask"]["properties"]["run_at"]["type"] == "null"
    assert "interval_seconds" in schemas["IntervalTask"]["required"]
    assert schemas["HandlerJob"]["properties"]["name"]["enum"] == ["log", "noop", "sleep"]


async def test_update_offers_null_only_where_it_clears_a_field(stack: Stack) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
    fields = spec["components"]["schemas"]["TaskUpdate"]["properties"]
    assert fields["priority"] == {"$ref": "#/components/schemas/Priority"}
    assert fields["jitter_seconds"]["type"] == "number" and fields["jitter_seconds"]["maximum"] == 3600
    assert {"type": "null"} in fields["notify"]["anyOf"]  # null removes the notification
    assert {"type": "null"} in fields["end_date"]["anyOf"]


async def test_cancel_documents_every_status_it_answers(stack: Stack) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
        malformed = await api.patch("/task/cancel", content=b"\xff", headers={"Content-Type": "application/json"})
    documented = spec["paths"]["/task/cancel"]["patch"]["responses"]
    assert malformed.status_code == 422 and "422" in documented
    assert "400" not in documented


async def test_cursors_page_through_and_match_their_documented_pattern(stack: Stack) -> None:
    async with stack.client("t2") as api:
        spec = (await api.get("/openapi.json")).json()
        cursor_param = next(p for p in spec["paths"]["/tasks"]["get"]["parameters"] if p["name"] == "cursor")
        pattern = re.compile(cursor_param["schema"]["anyOf"][0]["pattern"])
        names = {f"page-{i}" for i in range(3)}
        for name in names:
            assert (await api.post("/task/create", json={**ONCE, "task_name": name})).status_code == 201
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": 1, **({"cursor": cursor} if cursor else {})}
            page = (await api.get("/tasks", params=params)).json()
            seen += [task["task_name"] for task in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert pattern.fullmatch(cursor), cursor
        assert names <= set(seen) and len(seen) == len(set(seen))
        garbage = await api.get("/tasks", params={"cursor": "not a cursor"})
    assert garbage.status_code == 422 and garbage.json()["field"] == "cursor"
