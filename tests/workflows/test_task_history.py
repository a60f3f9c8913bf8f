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


async def test_a_continue_as_new_records_no_restart(dev_env: WorkflowEnvironment,
                                                    sqlite_engine: Engine) -> None:
    """The actor that created the task names the create only: the runs it continues as are
    the same task, not a restart."""
    import uuid

    from activities.options import RunOptions
    from tests.conftest import new_worker
    from tests.workflows.helpers import spec, task_state, until
    from workflows.starter import start_task_workflow

    task_id = uuid.uuid4().hex
    # On the dev server: the time-skipping server can strand the run a continue-as-new starts
    # (a query never answered; temporalio/sdk-java#3088).
    async with new_worker(dev_env.client, sqlite_engine,
                          run_options=RunOptions(history_limit=80)) as worker:
        assert await start_task_workflow(
            dev_env.client, task_queue=worker.task_queue, task_id=task_id, tenant_id="t1",
            spec=spec(schedule_type="interval", interval_seconds=3600),
            created_at=await dev_env.get_current_time(), actor="k1")
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, f"task-{task_id}")
        triggers = 0
        try:
            while not (await task_state(handle)).continued_as_new:  # manual runs grow the history
                assert triggers < 40, "no continue-as-new"
                await handle.execute_update(TaskWorkflow.trigger_update, "k1")
                triggers += 1
            await handle.execute_update(TaskWorkflow.trigger_update, "k1")  # the next run writes
            triggers += 1

            async def written() -> bool:  # the trigger's event, written with any of that run's
                events, _ = list_events(sqlite_engine, task_id=task_id, tenant_id="t1", limit=50)
                return sum(e.action == "trigger" for e in events) == triggers
            await until(written)
        finally:
            await handle.terminate("test over")
    events, _ = list_events(sqlite_engine, task_id=task_id, tenant_id="t1", limit=50)
    actions = [e.action for e in reversed(events)]
    assert actions[0] == "create" and "restart" not in actions, actions
