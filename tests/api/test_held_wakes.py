"""Held tasks' wakes, paced: at most N a second from the end of the hold, in creation order."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from api.temporal import TemporalGateway
from scheduling.spec import TaskSpec
from store.keys import create_key
from tests.api.conftest import serve_api
from worker.settings import Settings
from workflows.state import workflow_id

SPEC = TaskSpec.model_validate({
    "task_name": "held", "job_details": {"type": "handler", "name": "noop"},
    "schedule_type": "interval", "interval_seconds": 86400,
})


async def _held(env: WorkflowEnvironment, rate: float, count: int) -> list[tuple[datetime, datetime, timedelta]]:
    """Start ``count`` tasks due in a day, one after the other, held 30 s at ``rate`` wakes per
    second: for each, the clock just before and just after its start, and how long the server
    holds its workflow (its execution time minus its start time)."""
    # A queue no worker polls: the workflows are started and left waiting.
    gateway = TemporalGateway(env.client, f"wakes-{uuid.uuid4().hex[:8]}", hold_after_seconds=60,
                              hold_at_most_seconds=30, hold_wakes_per_second=rate)
    held = []
    for _ in range(count):
        task_id = uuid.uuid4().hex
        before = datetime.now(UTC)
        assert await gateway.start_task(task_id=task_id, tenant_id="wakes", spec=SPEC,
                                        created_at=before)
        after = datetime.now(UTC)
        handle = env.client.get_workflow_handle(workflow_id(task_id))
        described = await handle.describe()
        assert described.execution_time is not None
        held.append((before, after, described.execution_time - described.start_time))
        await handle.terminate("test over")
    return held


async def test_the_server_holds_each_wake_a_pace_after_the_last(dev_env: WorkflowEnvironment) -> None:
    held = await _held(dev_env, rate=2.0, count=6)
    slack = timedelta(milliseconds=2)  # the server keeps times to the millisecond
    first_before, first_after, _ = held[0]
    for i, (before, after, backoff) in enumerate(held):
        # Started back to back, well within the pace: the i-th wakes i half-seconds after the
        # first, which wakes when its 30 s hold ends; so each is held a little longer.
        # Its wake lies between the clocks around its start plus its hold, and between those
        # around the first start plus its booking: the two spans must meet.
        booked = timedelta(seconds=30 + i / 2)
        assert before + backoff <= first_after + booked + slack, i
        assert first_before + booked <= after + backoff + slack, i
    assert held[-1][2] > held[0][2] + timedelta(seconds=1)


async def test_without_a_pace_each_task_is_held_the_hold(dev_env: WorkflowEnvironment) -> None:
    held = await _held(dev_env, rate=0.0, count=3)
    assert [backoff for _, _, backoff in held] == [timedelta(seconds=30)] * 3


async def test_metrics_tell_how_far_ahead_wakes_are_booked(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from store.engine import migrate

    migrate(sqlite_engine)
    key = create_key(sqlite_engine, "wakes")[1]
    async with serve_api(dev_env, sqlite_engine, task_queue=f"wakes-{uuid.uuid4().hex[:8]}",
                         hold_at_most_seconds=30, hold_wakes_per_second=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30,
                                     headers={"Authorization": f"Bearer {key}"}) as api:
            async def booked() -> float:
                text = (await api.get("/metrics")).text
                families = {f.name: f for f in text_string_to_metric_families(text)}
                return float(families["scheduler_api_held_wakes_booked_seconds"].samples[0].value)

            assert await booked() == 0.0
            body = {**SPEC.model_dump(mode="json", exclude_none=True), "task_name": "paced"}
            answers = await asyncio.gather(*[api.post("/task/create", json=body) for _ in range(4)])
            assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
            # Four wakes a second apart from 30 s on: the last booked ends at 34 s.
            assert 25 < await booked() <= 34


def test_the_pace_cannot_be_negative() -> None:
    assert Settings().hold_wakes_per_second == 10
    with pytest.raises(ValidationError, match="hold_wakes_per_second"):
        Settings(hold_wakes_per_second=-1)
