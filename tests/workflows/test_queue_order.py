"""Under overlap_policy allow, the fires held while a task drains for continue-as-new."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus
from tests.conftest import new_worker
from tests.workflows.helpers import TaskHandle, executions, handler_job, running_task, spec, until
from tests.workflows.test_core_regressions import Sleeping
from workflows.state import TaskState, TaskWorkflowInput
from workflows.task import TaskWorkflow


async def carried_states(env: WorkflowEnvironment, handle: TaskHandle) -> list[TaskState]:
    """The state each workflow run handed to the next one, in order."""
    carried: list[TaskState] = []
    run_id: str | None = handle.first_execution_run_id
    while run_id:
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        last = history.events[-1]
        if last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            break
        attrs = last.workflow_execution_continued_as_new_event_attributes
        state = env.client.data_converter.payload_converter.from_payload(
            attrs.input.payloads[0], TaskWorkflowInput).state
        assert state is not None
        carried.append(state)
        run_id = attrs.new_execution_run_id
    return carried


async def test_allow_fires_held_while_draining_start_oldest_first_and_the_queue_stays_bounded(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # On the dev server: a start report arriving at a fire can strand the time-skipping
    # server (temporalio/sdk-java#3088); a running job holds its clock to real time anyway.
    job = Sleeping(2.5)  # longer than the interval: runs always overlap
    task = spec(schedule_type="interval", interval_seconds=1, overlap_policy="allow",
                job_details=handler_job("slow"), max_runs=24)
    async with (
        new_worker(dev_env.client, sqlite_engine, handlers={"slow": job},
                   run_options=RunOptions(history_limit=60)) as worker,
        running_task(dev_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
        carried = await carried_states(dev_env, handle)
    assert final.status is TaskStatus.COMPLETED and len(carried) >= 3
    for state in carried:
        queued = [run.scheduled_at for run in state.queue]
        assert queued == sorted(queued), "held fires are carried oldest first"
        assert len(queued) <= 4, "the carried queue stays bounded"
    rows = executions(sqlite_engine, final.task_id)
    # Nothing starved: with the workers up, every fire ran on time, none was missed.
    assert [(r.status, r.trigger) for r in rows] == [("COMPLETED", "schedule")] * 24
    assert sorted(job.runs) == [r.id for r in rows]


async def test_a_retime_while_draining_still_runs_the_fires_held_before_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # The fires held by the drain came due under the old schedule and were decided to start;
    # a retime dropped them from the queue as SKIPPED rescheduled.
    job = Sleeping(3)
    task = spec(schedule_type="interval", interval_seconds=1, overlap_policy="allow",
                job_details=handler_job("slow"))
    held: list[datetime] = []
    async with (
        new_worker(dev_env.client, sqlite_engine, handlers={"slow": job},
                   run_options=RunOptions(history_limit=60)) as worker,
        running_task(dev_env, worker.task_queue, task) as handle,
    ):
        async def holding() -> bool:
            state = await handle.query(TaskWorkflow.query_state)
            held[:] = [run.scheduled_at for run in state.queue if run.held]
            return bool(held)

        await until(holding, timeout=90)
        await handle.execute_update(TaskWorkflow.update_task, TaskChanges(interval_seconds=3600))
        task_id = (await handle.query(TaskWorkflow.query_state)).task_id

        def ended() -> dict[datetime, tuple[str, str | None]]:
            return {r.scheduled_at: (r.status, r.reason) for r in executions(sqlite_engine, task_id)
                    if r.scheduled_at in held and r.status != "RUNNING"}

        async def all_ended() -> bool:
            return len(ended()) == len(held)

        await until(all_ended, timeout=60)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
    assert set(ended().values()) == {("COMPLETED", None)}, ended()
