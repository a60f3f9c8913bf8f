"""The API's start slots: at most N creates' workflow starts in flight, the rest in arrival order."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from temporalio.testing import WorkflowEnvironment

from api.temporal import TemporalGateway
from scheduling.spec import TaskSpec
from worker.settings import Settings
from workflows.state import workflow_id

SPEC = TaskSpec.model_validate({
    "task_name": "slotted", "job_details": {"type": "handler", "name": "noop"},
    "schedule_type": "interval", "interval_seconds": 3600,
})


async def _start_all(gateway: TemporalGateway, count: int) -> tuple[list[str], int, int]:
    """Start ``count`` tasks at once, in order; the most starts seen in flight and waiting."""
    ids = [uuid.uuid4().hex for _ in range(count)]
    starts = [asyncio.create_task(gateway.start_task(
        task_id=task_id, tenant_id="slots", spec=SPEC, created_at=datetime.now(UTC)))
        for task_id in ids]
    most_in_flight = most_waiting = 0
    while not all(start.done() for start in starts):
        most_in_flight = max(most_in_flight, gateway.starts.in_flight)
        most_waiting = max(most_waiting, gateway.starts.waiting)
        await asyncio.sleep(0)
    assert all(await asyncio.gather(*starts))
    assert (gateway.starts.in_flight, gateway.starts.waiting) == (0, 0)
    return ids, most_in_flight, most_waiting


@pytest.mark.parametrize(("limit", "in_flight", "waiting"), [(2, 2, 10), (0, 12, 0)])
async def test_starts_in_flight_never_pass_the_limit(
    dev_env: WorkflowEnvironment, limit: int, in_flight: int, waiting: int
) -> None:
    # A queue no worker polls: the workflows are started and left waiting.
    gateway = TemporalGateway(dev_env.client, f"slots-{uuid.uuid4().hex[:8]}",
                              max_concurrent_starts=limit)
    ids, most_in_flight, most_waiting = await _start_all(gateway, 12)
    assert (most_in_flight, most_waiting) == (in_flight, waiting)
    for task_id in ids:  # every create's workflow was started
        handle = dev_env.client.get_workflow_handle(workflow_id(task_id))
        await handle.describe()
        await handle.terminate("test over")


async def test_waiting_starts_go_in_arrival_order(dev_env: WorkflowEnvironment) -> None:
    gateway = TemporalGateway(dev_env.client, f"slots-{uuid.uuid4().hex[:8]}",
                              max_concurrent_starts=1)
    ids, most_in_flight, _ = await _start_all(gateway, 6)
    assert most_in_flight == 1
    started = []
    for task_id in ids:
        handle = dev_env.client.get_workflow_handle(workflow_id(task_id))
        started.append((await handle.describe()).start_time)
        await handle.terminate("test over")
    assert started == sorted(started) and len(set(started)) == len(started)


def test_the_limit_cannot_be_negative() -> None:
    assert Settings().api_max_concurrent_starts == 8
    with pytest.raises(ValidationError, match="api_max_concurrent_starts"):
        Settings(api_max_concurrent_starts=-1)
