"""A pause that withdraws a run waiting for its instant reaches the run before the instant
even while the task database is slow: the row the pause writes does not hold back the
withdrawal (real dev server, real workers, and another connection holding the lock of the
SQLite file, or of every PostgreSQL table).

A workflow task that runs a local activity completes only when the activity does, or when
its heartbeat comes, 80 % of the workflow task's 10 s timeout later. Its commands, the
withdrawal's cancel among them, reach the server only then. So the pause's own write waits
until the cancel is sent; and while an earlier write is in flight, a run is withdrawn only if
it is far enough from its instant for a cancel held that long (8 s more). A write into a
database that hangs gives up sooner (activities/bookkeeping.py, ``WRITE_STALLED_AFTER``) and
retries on a timer, but one queued behind slow commits that do end holds the task that long.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from activities.options import RunOptions
from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus
from store.models import TaskExecution
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import (
    Blocker,
    TaskHandle,
    executions,
    handler_job,
    locked_for_writes,
    spec,
    start_task,
    task_state,
    until,
)
from workflows.state import TaskState
from workflows.task import TaskWorkflow


@dataclass
class _Waiting:
    """A task whose first run was sent ahead and waits for its instant; its job blocks."""

    env: WorkflowEnvironment
    job: Blocker
    instant: datetime
    handle: TaskHandle

    async def before(self, seconds: float) -> None:
        """Sleep until ``seconds`` before the instant."""
        now = await self.env.get_current_time()
        await asyncio.sleep((self.instant - now).total_seconds() - seconds)

    async def end(self, engine: Engine) -> tuple[TaskState, list[TaskExecution], bool]:
        """Its state, then cancelled: its rows, and whether its history replays on the current
        code (what it decided while a write was in flight, it decides the same on replay)."""
        state = await task_state(self.handle)
        await self.handle.execute_update(TaskWorkflow.cancel_update, "done")
        # The run ends once its rows are written: after a hang, a write that gave up retries
        # on its timer.
        await self.handle.result()
        replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
        replay = await replayer.replay_workflow(await self.handle.fetch_history(),
                                                raise_on_replay_failure=False)
        rows = executions(engine, self.handle.id.removeprefix("task-"))
        return state, rows, replay.replay_failure is None


@asynccontextmanager
async def _waiting_run(env: WorkflowEnvironment, engine: Engine, *, ahead: float,
                       lead: float) -> AsyncIterator[_Waiting]:
    job = Blocker()
    instant = await env.get_current_time() + timedelta(seconds=ahead)
    task = spec(schedule_type="interval", interval_seconds=600, start_date=instant,
                job_details=handler_job("block"))
    async with new_worker(env.client, engine, handlers={"block": job},
                          run_options=RunOptions(lead_seconds=lead)) as worker:
        handle = await start_task(env, worker.task_queue, task)

        async def sent() -> bool:
            return bool((await task_state(handle)).running)

        await until(sent, timeout=15)
        yield _Waiting(env, job, instant, handle)


async def test_a_pause_withdraws_a_waiting_run_in_time_while_its_row_write_hangs(
    dev_env: WorkflowEnvironment, any_engine: Engine
) -> None:
    # Sent 10 s ahead, it beats every 2 s near its instant. Paused 7 s before, outside its 3 s
    # margin: withdrawn.
    async with _waiting_run(dev_env, any_engine, ahead=18, lead=10) as run:
        await run.before(7)
        with locked_for_writes(any_engine) as release:
            paused = await run.handle.execute_update(TaskWorkflow.pause_update, "pause")
            await run.before(-4)
            started_while_locked = run.job.started.is_set()
            release.set()
        task_id = run.handle.id.removeprefix("task-")

        async def caught_up() -> bool:
            row = read_task(any_engine, task_id, None)
            return row is not None and row.status == TaskStatus.PAUSED

        await until(caught_up)  # the pause's row, written once the database is back
        after, rows, replays = await run.end(any_engine)
    assert replays
    assert not started_while_locked and not run.job.started.is_set()
    assert paused.status is TaskStatus.PAUSED
    assert after.run_count == 0 and after.running == []
    assert [(r.status, r.reason) for r in rows] == [("SKIPPED", "paused")]  # as the pause closed


async def test_a_pause_while_an_earlier_write_hangs_withdraws_a_run_only_with_room_for_the_hold(
    dev_env: WorkflowEnvironment, any_engine: Engine
) -> None:
    # Sent 20 s ahead, it beats every 2 s near its instant. A rename 15 s before the instant
    # writes its row into the locked database, and the write stays in flight (giving up and
    # retrying) until the lock goes. The pause, sent 10 s before, has no room for a cancel
    # held by a write (8 s) and the run's last beats: withdrawn, the run could hear of it
    # after it started and be killed. It is left to run whole, or withdrawn only where a
    # workflow task came sooner than planned.
    async with _waiting_run(dev_env, any_engine, ahead=30, lead=20) as run:
        await run.before(15)
        with locked_for_writes(any_engine) as release:
            renamed = asyncio.create_task(run.handle.execute_update(
                TaskWorkflow.update_task, TaskChanges(task_name="renamed")))
            await run.before(10)
            paused = asyncio.create_task(run.handle.execute_update(TaskWorkflow.pause_update, "pause"))
            await run.before(-5)
            release.set()
        await asyncio.wait_for(asyncio.gather(renamed, paused), timeout=30)
        run.job.open.set()
        task_id = run.handle.id.removeprefix("task-")

        async def ended() -> bool:
            return (bool(executions(any_engine, task_id))
                    and not (await task_state(run.handle)).running)

        await until(ended)
        after, rows, replays = await run.end(any_engine)
    assert replays
    assert paused.result().status is TaskStatus.PAUSED
    assert not run.job.cancelled.is_set()  # never started and then killed
    if run.job.started.is_set():
        assert after.run_count == 1 and [r.status for r in rows] == ["COMPLETED"]
    else:  # withdrawn in time (a workflow task that came sooner than planned)
        assert after.run_count == 0 and [(r.status, r.reason) for r in rows] == [("SKIPPED", "paused")]
