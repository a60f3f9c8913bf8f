"""The task row carries the own instant of the oldest run neither started nor decided: a fire
waiting in the queue behind a run that is going, until a worker reports it started."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.handlers import HandlerContext
from activities.options import RunOptions
from outbound.egress import EgressPolicy, guarded_client
from store.overdue import overdue_runs
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import executions, handler_job, running_task, spec, until
from worker.build import build_activities, build_workflow_worker


class Gate:
    """A handler whose first call waits until the test opens the gate; the others return."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls += 1
        if self.calls == 1:
            while not self.open.is_set():
                ctx.heartbeat()
                await asyncio.sleep(0.1)


async def test_a_queued_fire_is_on_the_row_until_its_run_starts(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    gate = Gate()
    async with new_worker(dev_env.client, sqlite_engine, handlers={"gate": gate}) as worker:
        now = await dev_env.get_current_time()
        first = (now + timedelta(seconds=2)).replace(microsecond=0)
        task = spec(schedule_type="interval", interval_seconds=2, start_date=first,
                    overlap_policy="buffer_one", job_details=handler_job("gate"),
                    heartbeat_timeout_seconds=5)
        async with running_task(dev_env, worker.task_queue, task) as handle:
            task_id = handle.id.removeprefix("task-")
            second = first + timedelta(seconds=2)

            async def queued() -> bool:
                row = read_task(sqlite_engine, task_id, "t1")
                return row is not None and row.unstarted_at == second

            await until(queued)  # the first run is going, the second fire waits in the queue
            row = read_task(sqlite_engine, task_id, "t1")
            assert row is not None and row.next_run_at is not None and row.next_run_at > second
            gate.open.set()

            async def started() -> bool:
                rows = [r for r in executions(sqlite_engine, task_id) if r.scheduled_at == second]
                return bool(rows and rows[0].started_at)

            await until(started)

            async def moved() -> bool:
                row = read_task(sqlite_engine, task_id, "t1")
                return row is not None and row.unstarted_at != second

            await until(moved)


async def test_a_run_sent_ahead_alone_writes_no_row_and_stays_watched(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # The run is sent 3 s ahead, in a workflow task of its own, and no jobs worker takes it.
    # The row already shows its instant as the next run, so the send writes nothing, and the
    # overdue check (the sooner of next_run_at and unstarted_at) watches that instant.
    client, queue = dev_env.client, f"sent-{uuid.uuid4()}"
    async with guarded_client(EgressPolicy.from_list(["127.0.0.1"])) as http:
        activities = build_activities(engine=sqlite_engine, http=http, client=client,
                                      run_options=RunOptions(lead_seconds=3))
        async with build_workflow_worker(client, task_queue=queue, activities=activities):
            instant = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
            task = spec(schedule_type="interval", interval_seconds=600, start_date=instant)
            async with running_task(dev_env, queue, task) as handle:
                task_id = handle.id.removeprefix("task-")

                async def written() -> bool:
                    row = read_task(sqlite_engine, task_id, "t1")
                    return row is not None and row.updated_at != row.created_at
                await until(written)
                before = read_task(sqlite_engine, task_id, "t1")

                async def sent() -> bool:
                    history = await handle.fetch_history()
                    return any(e.HasField("activity_task_scheduled_event_attributes")
                               for e in history.events)
                await until(sent)
                assert datetime.now(UTC) < instant, "the test ran too slowly"
                await asyncio.sleep(0.5)  # a write at the send would have landed by now
                after = read_task(sqlite_engine, task_id, "t1")
                [alarm] = overdue_runs(sqlite_engine, instant + timedelta(seconds=5), 2.0, 1.0)
    assert before is not None and after is not None
    assert after.state_version == before.state_version
    assert (after.next_run_at, after.unstarted_at) == (instant, None)
    assert (alarm.task_id, alarm.run_at) == (task_id, instant)
