"""Logs: one JSON event per state change with the run's identity, and no secrets or bodies."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from config.logging import configure_logging
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import spec, start_task

SECRET = "Bearer sk-live-0123456789"
BODY_SECRET = "hunter2-password"


async def test_state_changes_are_logged_as_json_without_secrets(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "INFO")
    now = await time_env.get_current_time()
    try:
        async with new_worker(time_env.client, sqlite_engine) as worker:
            handle = await start_task(time_env, worker.task_queue, spec(
                schedule_type="once", run_at=now + timedelta(minutes=1),
                job_details={"type": "http", "url": target.url("/status/503"),
                             "headers": {"Authorization": SECRET}, "body": {"password": BODY_SECRET}},
                retry_policy={"max_attempts": 2, "initial_interval_seconds": 1},
            ))
            await handle.result()
            # A handler that returns at once ends before the event loop gets back to the
            # start's bookkeeping: the log must still read start, then outcome.
            quick = await start_task(time_env, worker.task_queue, spec(
                schedule_type="once", run_at=now + timedelta(minutes=2),
                job_details={"type": "handler", "name": "noop"},
            ))
            await quick.result()
    finally:
        configure_logging("console", "INFO")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    events = [json.loads(line) for line in lines]
    task_id = handle.id.removeprefix("task-")
    mine = [e for e in events if e.get("task_id") == task_id]
    by_name = {}
    for event in mine:
        by_name.setdefault(event["event"], []).append(event)
    assert {"task.state", "execution.state", "job.start", "job.failed"} <= set(by_name)
    for event in by_name["execution.state"] + by_name["job.start"]:
        assert event["execution_id"].startswith(f"{task_id}:")
        assert event["tenant"] == "t1" and event["workflow_id"] == handle.id
        assert "attempt" in event and "timestamp" in event and "level" in event
    assert {e["attempt"] for e in by_name["job.failed"]} == {1, 2}
    for attempt in (1, 2):
        order = [e["event"] for e in mine if e.get("attempt") == attempt and e["event"].startswith("job.")]
        assert order == ["job.start", "job.failed"], order
    quick_id = quick.id.removeprefix("task-")
    quick_jobs = [e["event"] for e in events if e.get("task_id") == quick_id and e["event"].startswith("job.")]
    assert quick_jobs == ["job.start", "job.completed"], quick_jobs
    assert [e["status"] for e in by_name["execution.state"]][-1] == "FAILED"
    assert {e["status"] for e in by_name["task.state"]} >= {"PENDING", "FAILED"}
    everything = "\n".join(lines)
    assert "/status/503" not in everything  # URLs are logged without their path
    assert SECRET not in everything and "sk-live" not in everything
    assert BODY_SECRET not in everything
    # the target did get the header: it was sent, just never logged
    assert target.received[0].headers["Authorization"] == SECRET
