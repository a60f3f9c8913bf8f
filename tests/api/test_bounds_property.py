"""A body at any documented bound is accepted, or refused for another documented reason (a
quota, a field it must agree with); just past the bound it is a 422 naming the field that changes
nothing. The bounds are read from the OpenAPI document: what it says is what the API enforces."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_input_bounds import tenant_state

pytestmark = ON_BOTH_DATABASES

BASE: dict[str, Any] = {"task_name": "edge", "job_details": {"type": "handler", "name": "noop"},
                        "schedule_type": "interval", "interval_seconds": 3600}
ONCE: dict[str, Any] = {**BASE, "schedule_type": "once", "interval_seconds": None,
                        "run_at": (datetime.now(UTC) + timedelta(days=1)).isoformat()}
EARLIEST, LATEST = datetime(2000, 1, 1, tzinfo=UTC), datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
# What pydantic says of a value out of its range, and what the instants' check says.
RANGE_WORDS = ("greater than", "less than", "must be between")


def edges(branch: dict[str, Any]) -> list[tuple[Any, bool]]:
    """(value, past the bound) at each end of a numeric schema."""
    whole = branch["type"] == "integer"
    out: list[tuple[Any, bool]] = []
    if "minimum" in branch:
        low = branch["minimum"]
        out += [(low, False), (low - 1 if whole else math.nextafter(low, -math.inf), True)]
    if "exclusiveMinimum" in branch:
        low = branch["exclusiveMinimum"]
        out += [(low + 1 if whole else math.nextafter(low, math.inf), False), (low, True)]
    high = branch["maximum"]
    return out + [(high, False), (high + 1 if whole else math.nextafter(high, math.inf), True)]


def numbers(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The numeric fields of a component schema and their bounds."""
    found = {}
    for name, prop in schema["properties"].items():
        for branch in prop.get("anyOf", [prop]):
            if branch.get("type") in ("number", "integer"):
                found[name] = branch
    return found


def cases(spec: dict[str, Any], stack: Stack) -> list[tuple[str, dict[str, Any], bool]]:
    """(field, body, past the bound) for every end of every bounded field a create takes."""
    schemas = spec["components"]["schemas"]
    out: list[tuple[str, dict[str, Any], bool]] = []
    for name, branch in numbers(schemas["IntervalTask"]).items():
        out += [(name, {**BASE, name: value}, past) for value, past in edges(branch)]
    for name, branch in numbers(schemas["RetrySpec"]).items():
        # The maximum comes with an initial interval at or below it (never above 3600).
        out += [(name, {**BASE, "retry_policy": {name: value, "maximum_interval_seconds": 86400}
                        if name != "maximum_interval_seconds"
                        else {name: value, "initial_interval_seconds": min(value, 3600)}}, past)
                for value, past in edges(branch)]
    jobs = {"HttpJob": {"type": "http", "url": "http://127.0.0.1:9/hook"},
            "WorkflowJob": {"type": "workflow", "workflow_type": "EchoWorkflow",
                            "task_queue": stack.workflow_queue}}
    for schema, job in jobs.items():
        for name, branch in numbers(schemas[schema]).items():
            out += [(name, {**BASE, "job_details": {**job, name: value}}, past)
                    for value, past in edges(branch)]
    second = timedelta(seconds=1)
    for name, body in (("run_at", {**ONCE, "missed_run_policy": "catchup"}), ("start_date", BASE),
                       ("end_date", BASE)):
        for value, past in ((EARLIEST, False), (LATEST, False), (EARLIEST - second, True),
                            (LATEST + second, True)):
            out.append((name, {**body, name: value.isoformat()}, past))
    return out


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_bodies_at_and_past_every_bound(stack: Stack, data: st.DataObject) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
        field, body, past = data.draw(st.sampled_from(cases(spec, stack)))
        before = await tenant_state(stack, "t1")
        response = await api.post("/task/create", json=body)
        problem = response.json() if response.status_code >= 400 else {}
        assert response.status_code < 500, response.text
        if past:
            assert response.status_code == 422, (field, body, response.text)
            assert field in problem["field"] and any(w in problem["detail"] for w in RANGE_WORDS), problem
            assert await tenant_state(stack, "t1") == before
        elif response.status_code == 201:
            task_id = response.json()["task_id"]
            assert (await api.get(f"/tasks/{task_id}")).status_code == 200
        else:
            assert response.status_code in (403, 409, 422), (field, body, response.text)
            assert not any(w in problem["detail"] for w in RANGE_WORDS), (field, body, problem)


async def test_the_cases_reach_every_bound(stack: Stack) -> None:
    async with stack.client("t1") as api:
        spec = (await api.get("/openapi.json")).json()
    fields = {field for field, _, _ in cases(spec, stack)}
    assert {"catchup_window_seconds", "drift_threshold_seconds", "jitter_seconds", "max_runs",
            "interval_seconds", "execution_timeout_seconds", "timeout_seconds", "max_attempts",
            "run_at", "start_date", "end_date"} <= fields
