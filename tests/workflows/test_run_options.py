"""A task workflow run takes its lead from the worker that runs it, not from its input."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from scheduling.spec import TaskChanges
from scheduling.status import TaskStatus, workflow_id
from tests.conftest import new_worker
from tests.workflows.helpers import sent_jobs, spec, start_task
from workflows import attributes
from workflows.events import SpecChange
from workflows.state import TaskWorkflowInput
from workflows.task import TaskWorkflow


async def _leads(env: WorkflowEnvironment, task_id: str) -> list[float]:
    """How long before its instant each run_job of the task's workflow was scheduled."""
    leads = []
    for job, sent in await sent_jobs(env, task_id):
        assert job.instant is not None
        leads.append((job.instant - sent).total_seconds())
    return leads


async def test_a_workflow_started_with_a_lead_in_its_input_takes_its_workers_lead(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # As older starters froze it: no lead. The worker's says 3 s.
    now = await dev_env.get_current_time()
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=5))
    task_id = uuid.uuid4().hex
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(lead_seconds=3)) as worker:
        handle = await dev_env.client.start_workflow(
            TaskWorkflow.run,
            TaskWorkflowInput(task_id=task_id, tenant_id="t1", spec=task, created_at=now,
                              lead_seconds=0.0, max_lead_seconds=60.0, history_limit=10_000),
            id=workflow_id(task_id), task_queue=worker.task_queue,
            search_attributes=attributes.initial(
                task_id=task_id, tenant_id="t1", name=task.task_name,
                schedule_type=task.schedule_type.value, next_run_at=task.run_at),
        )
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED
    [lead] = await _leads(dev_env, task_id)
    assert 2.0 <= lead <= 3.5, lead


async def test_the_runs_of_a_task_created_into_a_herd_are_dispatched_ahead_by_its_place_in_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Base lead 2 s, 10 runs a second dispatched ahead of a herd, at most 6 s ahead: 20 tasks
    # before it add 2 s, 1,000 reach the longest lead. The herd meets again at the interval's
    # second run, 9 s later: it goes as far ahead.
    now = await dev_env.get_current_time()
    options = RunOptions(lead_seconds=2, max_lead_seconds=6, herd_rate=10)
    first = now + timedelta(seconds=9)
    tasks = {crowd: uuid.uuid4().hex for crowd in (0, 20, 1000)}
    async with new_worker(dev_env.client, sqlite_engine, run_options=options) as worker:
        handles = []
        for crowd, task_id in tasks.items():
            task = spec(schedule_type="interval", interval_seconds=9, start_date=first, max_runs=2)
            handles.append(await dev_env.client.start_workflow(
                TaskWorkflow.run,
                TaskWorkflowInput(task_id=task_id, tenant_id="t1", spec=task, created_at=now,
                                  crowd=crowd),
                id=workflow_id(task_id), task_queue=worker.task_queue,
                search_attributes=attributes.initial(
                    task_id=task_id, tenant_id="t1", name=task.task_name,
                    schedule_type=task.schedule_type.value, next_run_at=first),
            ))
        for handle in handles:
            assert (await handle.result()).status is TaskStatus.COMPLETED
    leads = {crowd: await _leads(dev_env, task_id) for crowd, task_id in tasks.items()}
    # A timer counts from its workflow task's time: on a loaded machine, where the worker ran
    # that task late, it fires (and the run goes) that much earlier (0.62 s seen in a full run).
    for crowd, expected in {0: 2.0, 20: 4.0, 1000: 6.0}.items():
        assert len(leads[crowd]) == 2, leads
        for lead in leads[crowd]:
            assert expected - 1.0 <= lead <= expected + 1.0, leads


async def test_a_task_retimed_out_of_its_herd_keeps_the_usual_lead(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Created as the 21st of a herd at +30 s (2 s further ahead), then moved to +8 s: its run
    # there goes the usual 2 s ahead.
    now = await dev_env.get_current_time()
    task_id = uuid.uuid4().hex
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=30))
    options = RunOptions(lead_seconds=2, max_lead_seconds=6, herd_rate=10)
    async with new_worker(dev_env.client, sqlite_engine, run_options=options) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, task_id=task_id, crowd=20)
        await handle.execute_update(TaskWorkflow.update_task,
                                    TaskChanges(run_at=now + timedelta(seconds=8)))
        assert (await handle.result()).status is TaskStatus.COMPLETED
    [lead] = await _leads(dev_env, task_id)
    assert 1.0 <= lead <= 2.5, lead


@pytest.mark.parametrize(("counted_at", "expected"), [(0.0, 4.0), (1.0, 2.0)])
async def test_a_task_retimed_into_a_herd_goes_ahead_by_the_count_sent_for_its_new_second(
    counted_at: float, expected: float, dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Created alone at +30 s, moved to +8 s with 20 tasks counted there: 2 s further ahead.
    # A count taken for another second than where the change puts its run is not its herd's.
    now = await dev_env.get_current_time()
    task_id = uuid.uuid4().hex
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=30))
    moved_to = (now + timedelta(seconds=8)).replace(microsecond=0)
    options = RunOptions(lead_seconds=2, max_lead_seconds=6, herd_rate=10)
    async with new_worker(dev_env.client, sqlite_engine, run_options=options) as worker:
        handle = await start_task(dev_env, worker.task_queue, task, task_id=task_id)
        await handle.execute_update(TaskWorkflow.change_task, SpecChange(
            changes=TaskChanges(run_at=moved_to), crowd=20,
            crowd_at=moved_to + timedelta(seconds=counted_at)))
        assert (await handle.result()).status is TaskStatus.COMPLETED
    [lead] = await _leads(dev_env, task_id)
    assert expected - 1.0 <= lead <= expected + 0.5, lead
