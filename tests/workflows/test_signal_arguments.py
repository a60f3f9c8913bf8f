"""Signals sent by hand (``temporal workflow signal``) with arguments of the wrong kind: the
task reads them defensively and keeps answering, firing and obeying the next good signal;
the updates refuse the same arguments and change nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.conftest import new_worker
from tests.workflows.helpers import executions, running_task, spec
from tests.workflows.test_self_healing import until
from workflows.task import TaskWorkflow

MINUTE = timedelta(minutes=1)


async def test_signals_with_bad_arguments_leave_the_task_working(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        # Arguments that do not decode drop the signal (the SDK logs it); one that decodes
        # but names no choice (an unknown ``missed``) is read as skip.
        await handle.signal("resume", "Policy")  # not paused: nothing to do, nothing raised
        await handle.signal("trigger", 3)
        await handle.signal("pause", args=[{"why": 1}, ["someone"]])
        await handle.signal("trigger")
        ran = await until(handle, lambda s: s.success_count >= 1)
        assert not ran.paused
        await handle.signal("pause", "good")
        assert (await until(handle, lambda s: s.paused)).status_reason == "good"
        await handle.signal("resume", args=[7, {"key": 1}])
        await handle.signal("resume", "Policy")
        await until(handle, lambda s: not s.paused)
        await time_env.sleep(2 * MINUTE + timedelta(seconds=5))
        fired = await until(handle, lambda s: s.success_count >= 3)
        await handle.signal("cancel", args=[5, 6])
        await handle.signal("pause", "again")
        assert not (await until(handle, lambda s: s.paused)).cancel_requested
        await handle.signal("cancel", "done")
        await handle.result()
    rows = executions(sqlite_engine, fired.task_id)
    assert [r.trigger for r in rows].count("manual") == 1
    assert [r.trigger for r in rows if r.status == "COMPLETED"][:1] == ["manual"]


async def test_updates_refuse_bad_arguments_and_change_nothing(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        for name, args in [("resume_task", ["Policy"]), ("resume_task", [None, 5]),
                           ("pause_task", [5]), ("cancel_task", [None, ["x"]]),
                           ("trigger_task", [3])]:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(name, args=args)
            assert refused.value.cause.__class__.__name__ == "ApplicationError"
        state = await until(handle, lambda s: s.paused)
        assert state.status_reason == "hold" and not state.cancel_requested and not state.queue
        resumed = await handle.execute_update(TaskWorkflow.resume_update, "policy")
        assert not resumed.paused
