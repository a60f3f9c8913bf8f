"""Fault 1: a worker is killed -9 in the middle of long jobs; another worker retries them after
the heartbeat timeout, and each run has its effect once."""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.testing import WorkflowEnvironment

from tests.faults.conftest import Stack, log_events
from tests.faults.driver import Api, http_job, later, once_task, sleep_job
from tests.faults.invariants import audit, plans, settle
from tests.target import TargetServer

HEARTBEAT = 3
LEAD = 15  # "waiting" is held from LEAD s before its instant: time to start B and kill A


@pytest.fixture
def stack_settings() -> dict[str, str]:
    """A longer dispatch lead than the faults stack's: the kill must come before the instant."""
    return {"dispatch_lead_seconds": str(LEAD)}


async def _job_started(env: WorkflowEnvironment, task_id: str, timeout: float = 30) -> None:
    """Wait until the task's job activity is held by a worker (started, maybe waiting)."""
    handle = env.client.get_workflow_handle(f"task-{task_id}")
    deadline = time.monotonic() + timeout
    while True:
        described = await handle.describe()
        pending = described.raw_description.pending_activities
        if any(a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for a in pending):
            return
        assert time.monotonic() < deadline, f"task {task_id}: its job was never picked up"
        await asyncio.sleep(0.2)


async def test_worker_killed_mid_job_is_retried_on_another_worker(
    stack: Stack, target: TargetServer, dev_env: WorkflowEnvironment
) -> None:
    fleet = stack.fleet
    fleet.start_worker("worker-a", log_level="INFO")
    api = Api([await fleet.start_api("api")], stack.key)
    try:
        await stack.wait_log("worker-a", "worker.started")
        long = 15
        bodies = {
            "sleeper": once_task("sleeper", sleep_job(long), later(2)),
            "slow-http": once_task("slow-http", http_job(target.url(f"/slow/{long}"), timeout=60), later(2)),
            # Dispatched ahead of its instant: its job waits on the worker when the worker dies.
            "waiting": once_task("waiting", http_job(target.url("/waiting")), later(LEAD + 5)),
        }
        for body in bodies.values():
            body["heartbeat_timeout_seconds"] = HEARTBEAT
        ids = {name: (await api.create(body))["task_id"] for name, body in bodies.items()}

        # Worker A holds every job: the two long ones running, the third waiting for its instant.
        for name in ("sleeper", "slow-http", "waiting"):
            await _job_started(dev_env, ids[name])
        await target.wait_for(1)
        fleet.start_worker("worker-b", log_level="INFO")
        await stack.wait_log("worker-b", "worker.started")
        await asyncio.sleep(1)  # B polls both task queues
        assert not log_events(fleet.logs / "worker-b.log", "job.start")
        killed_at = time.monotonic()
        fleet.kill("worker-a")

        await settle(stack.engine, ids.values(), timeout=long + 45)
        elapsed = time.monotonic() - killed_at
    finally:
        await api.close()

    report = audit(stack.engine, target.received, ids.values(), planned=plans(stack.engine, ids.values()))
    report.assert_holds()
    for name, task_id in ids.items():
        (run,) = report.of_task(task_id)
        assert run.status == "COMPLETED" and run.attempts == 2, (name, run.status, run.attempts, run.error)
        assert report.task_rows[task_id].status == "COMPLETED"
        # The second attempt ran on worker B, after A's heartbeats stopped.
        on_b = log_events(fleet.logs / "worker-b.log", "job.start", execution_id=run.id, attempt=2)
        assert on_b, f"{name}: attempt 2 did not run on worker B"
    # Two requests under one key for the killed HTTP run: a retry, not a second run.
    keys = target.requests_by_key()
    assert keys[report.of_task(ids["slow-http"])[0].id] == 2
    assert keys[report.of_task(ids["waiting"])[0].id] == 1
    # The retry came after the heartbeat timeout, and well before the jobs' own length twice.
    assert HEARTBEAT < elapsed < 2 * long + 20
