"""A replay of an ended task's dead letter carries the request's id, as a replay of a running
task does: a retry of it acts once. The real gateway, workflow and worker on the dev server."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from api.temporal import TemporalGateway
from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, spec, start_task, until
from workflows.state import TaskState


class FailsThenHolds:
    """Fails its first call (the run is dead-lettered); later calls wait to be released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("target down")
        while not self.release.is_set():
            ctx.heartbeat()
            await asyncio.sleep(0.1)


async def test_replay_of_ended_task_carries_request_id(dev_env: WorkflowEnvironment,
                                                      any_engine: Engine) -> None:
    handler = FailsThenHolds()
    now = await dev_env.get_current_time()
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=1), job_details=handler_job("flaky"),
                retry_policy={"max_attempts": 1})
    async with new_worker(dev_env.client, any_engine, handlers={"flaky": handler}) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        ended = await handle.result()
        assert ended.status is TaskStatus.FAILED
        row = read_task(any_engine, ended.task_id, "t1")
        assert row is not None and row.status == TaskStatus.FAILED
        [dead] = executions(any_engine, ended.task_id)
        assert dead.dead_letter == "open"
        gateway = TemporalGateway(dev_env.client, worker.task_queue)

        await gateway.replay_ended(row, dead.id, dead.scheduled_at, request_id="req-1", executed=1)
        await until(lambda: asyncio.sleep(0, handler.calls == 2))  # the replay is running
        # The same request again (a client's retry under its Idempotency-Key; the task row
        # still says FAILED): it reaches the same update of the same workflow run.
        await gateway.replay_ended(row, dead.id, dead.scheduled_at, request_id="req-1", executed=1)
        handler.release.set()
        latest = dev_env.client.get_workflow_handle(handle.id, result_type=TaskState)
        assert (await latest.result()).status is TaskStatus.COMPLETED
        history = await latest.fetch_history()
    assert handler.calls == 2, "the retried replay ran the dead letter a second time"
    # The request's id is the replay update's id, where a replay of a running task shows it.
    accepted = [e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id
                for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")]
    assert accepted == ["replay_update-req-1"]
    [replayed] = executions(any_engine, ended.task_id)
    # The same run again: its row keeps its trigger, and the task counts it once.
    assert (replayed.id, replayed.status, replayed.trigger) == (dead.id, "COMPLETED", "schedule")
    final = read_task(any_engine, ended.task_id, "t1")
    assert final is not None and (final.run_count, final.success_count, final.failure_count) == (1, 1, 0)
