"""Previews of a task count its runs in flight against max_runs as its workflow does: the
upcoming fires, a change's fires while a run waits sent ahead, and a resume's catch-ups list
no fire the workflow never runs."""

from __future__ import annotations

import asyncio

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from api.preview import Previews, on_resume_now
from scheduling import policy
from scheduling.spec import TaskChanges
from scheduling.status import ResumeMissed
from tests.conftest import new_worker
from tests.workflows.helpers import Blocker, executions, handler_job, spec, start_task, task_state
from workflows.task import TaskWorkflow


async def test_upcoming_fires_leave_out_what_a_run_in_flight_takes_of_max_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Blocker()
    task = spec(schedule_type="interval", interval_seconds=3600, max_runs=2,
                overlap_policy="allow", job_details=handler_job("block"))
    async with new_worker(time_env.client, sqlite_engine, handlers={"block": job}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(3601)
        await asyncio.wait_for(job.started.wait(), 60)
        state = await task_state(handle)
        listed = [fire.scheduled_at for fire in Previews._fires(state, 10)]
        job.open.set()
        final = await handle.result()
    ran = [row.scheduled_at for row in executions(sqlite_engine, final.task_id)]
    assert len(ran) == 2 and listed == ran[1:], (listed, ran)


async def test_a_bounds_change_lists_the_fire_of_the_run_it_takes_back(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # The run of the first fire waits sent ahead; a change of max_runs withdraws it, and its
    # fire goes back to run.
    task = spec(schedule_type="interval", interval_seconds=3600)
    async with new_worker(time_env.client, sqlite_engine,
                          run_options=RunOptions(lead_seconds=10, max_lead_seconds=10)) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(3600 - 9)
        state = await task_state(handle)
        assert state.waiting, state
        changes = TaskChanges(max_runs=2)
        new_spec = changes.apply_to(state.spec)
        change = policy.change_schedule(state.position(), policy.Flight(), new_spec,
                                        await time_env.get_current_time())
        after = [fire.scheduled_at for fire in Previews._after_change(state, new_spec, change, 10)]
        await handle.execute_update(TaskWorkflow.update_task, changes)
        final = await handle.result()
    ran = [row.scheduled_at for row in executions(sqlite_engine, final.task_id) if row.status == "COMPLETED"]
    assert after == ran, (after, ran)


async def test_a_resume_preview_counts_the_run_going_against_max_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Blocker()
    task = spec(schedule_type="interval", interval_seconds=2, max_runs=2,
                missed_run_policy="catchup", job_details=handler_job("block"))
    async with new_worker(time_env.client, sqlite_engine, handlers={"block": job}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(2.2)
        await asyncio.wait_for(job.started.wait(), 30)
        await handle.execute_update(TaskWorkflow.pause_update, "ops")
        await asyncio.sleep(6.5)  # the job runs on: three fires come due in the pause
        state = await task_state(handle)
        shown = on_resume_now(state, await time_env.get_current_time()).policy
        await handle.execute_update(TaskWorkflow.resume_update, ResumeMissed.POLICY)
        await asyncio.sleep(0.5)
        job.open.set()
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    previewed = {fire.scheduled_at for fire in shown.fires if fire.runs}
    ran_after_the_first = {row.scheduled_at for row in rows[1:] if row.status == "COMPLETED"}
    assert len(rows[0:1]) == 1 and previewed == ran_after_the_first, (previewed, rows)
