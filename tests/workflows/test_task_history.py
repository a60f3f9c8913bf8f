"""The workflow writes the task's history: every message, with its actor, once."""

from __future__ import annotations

from sqlalchemy import Engine
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from store.events import list_events
from store.tasks import list_executions, read_task
from tests.histories.record import task_history
from workflows.task import TaskWorkflow


async def test_every_message_is_recorded_with_its_actor(time_env: WorkflowEnvironment,
                                                        sqlite_engine: Engine) -> None:
    handle = await task_history(time_env, sqlite_engine)
    task_id = handle.id.removeprefix("task-")
    events, _ = list_events(sqlite_engine, task_id=task_id, tenant_id="t1", limit=50)
    assert [(e.action, e.actor, e.spec_version) for e in reversed(events)] == [
        ("create", "temporal signal", 1), ("update", "k1", 2), ("pause", "temporal signal", 2),
        ("resume", "k1", 2), ("trigger", "k1", 2), ("rollback", "k1", 3),
        ("cancel", "temporal signal", 3),
    ]
    by_action = {e.action: e for e in events}
    assert by_action["rollback"].spec is not None and by_action["rollback"].spec["interval_seconds"] == 1800
    assert by_action["rollback"].detail == {"version": 1}
    assert by_action["pause"].detail == {"reason": "by hand"}
    run_id = handle.result_run_id
    assert sorted(e.id for e in events) == [f"{task_id}:{run_id}:{n:05d}" for n in range(1, 8)]
    row = read_task(sqlite_engine, task_id, "t1")
    assert row is not None and row.spec_version == 3
    runs, _ = list_executions(sqlite_engine, task_id=task_id, limit=10)
    assert {(r.trigger, r.status, r.spec_version) for r in runs} >= {
        ("manual", "COMPLETED", 2), ("schedule", "COMPLETED", 2)}

    # its history replays: the events and their ids are made deterministically
    history: WorkflowHistory = await handle.fetch_history()
    replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history)).replay_failure is None
