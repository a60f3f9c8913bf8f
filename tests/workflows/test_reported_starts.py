"""A run is running once its jobs worker says so: runs sent ahead to no jobs worker (and a
fixed_delay schedule that goes on after one), a cancel just before a dispatched instant, and a
run asked for beside a waiting one (real dev server)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from activities.handlers import HandlerContext
from activities.options import RunOptions
from scheduling.policy import CLAIM_AFTER, UNTAKEN_AFTER
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import TaskStatus, workflow_id
from tests.workflows.helpers import TaskHandle, executions, handler_job, spec, task_state, until
from worker.build import ActivitySet, build_activities, build_jobs_worker, build_workflow_worker
from workflows.starter import start_task_workflow
from workflows.state import TaskState
from workflows.task import TaskWorkflow


class Counting:
    """A handler that records each run's start and how many ran at once."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.started: list[str] = []
        self.started_at: list[float] = []
        self.going = 0
        self.most = 0

    async def __call__(self, ctx: HandlerContext) -> None:
        self.started.append(ctx.execution_id)
        self.started_at.append(asyncio.get_running_loop().time())
        self.going += 1
        self.most = max(self.most, self.going)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.going -= 1


@asynccontextmanager
async def split_workers(env: WorkflowEnvironment, engine: Engine, job: Counting, *, lead: float
                        ) -> AsyncIterator[tuple[str, asyncio.Event, asyncio.Event]]:
    """A workflow worker dispatching ``lead`` seconds ahead, and a jobs worker that runs from
    ``up.set()`` until ``down.set()``."""
    queue = f"tq-{uuid.uuid4()}"
    up, down = asyncio.Event(), asyncio.Event()
    async with httpx.AsyncClient() as http:
        activities = build_activities(engine=engine, http=http, client=env.client,
                                      extra_handlers={"count": job},
                                      run_options=RunOptions(lead_seconds=lead))
        workflows = build_workflow_worker(env.client, task_queue=queue, activities=activities)

        async def jobs_worker() -> None:
            await up.wait()
            async with build_jobs_worker(env.client, task_queue=queue, activities=activities):
                await down.wait()

        running = asyncio.create_task(jobs_worker())
        async with workflows:
            try:
                yield queue, up, down
            finally:
                down.set()
                up.set()
                await running


async def until_dispatched(handle: TaskHandle) -> None:
    async def dispatched() -> bool:
        return bool((await task_state(handle)).running)

    await until(dispatched)


def cacheless_workflows_worker(env: WorkflowEnvironment, queue: str, activities: ActivitySet) -> Worker:
    """A workflow worker without a cache, so without a sticky queue: the next workflow worker
    takes the workflow at once."""
    return build_workflow_worker(env.client, task_queue=queue, activities=activities,
                                 max_cached_workflows=0)


async def start_ahead(env: WorkflowEnvironment, queue: str, task: TaskSpec) -> TaskHandle:
    task_id = uuid.uuid4().hex
    await start_task_workflow(env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
                              spec=task, created_at=await env.get_current_time())
    return env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))


async def test_a_run_sent_ahead_to_no_jobs_worker_is_not_running_and_its_fire_is_caught_up(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Counting()
    task = spec(schedule_type="interval", interval_seconds=4, overlap_policy="skip",
                missed_run_policy="single_catchup", job_details=handler_job("count"), max_runs=4)
    async with split_workers(dev_env, sqlite_engine, job, lead=2) as (queue, up, _):
        handle = await start_ahead(dev_env, queue, task)
        # Fires come and go while no jobs worker runs: nothing is running, nothing overlaps.
        await asyncio.sleep(4 + 4 + UNTAKEN_AFTER.total_seconds() + 1)
        waiting = await task_state(handle)
        assert waiting.status is TaskStatus.PENDING  # dispatched to no worker is not running
        up.set()
        final = await asyncio.wait_for(handle.result(), timeout=90)
    rows = executions(sqlite_engine, final.task_id)
    reasons = {(r.status, r.reason) for r in rows}
    assert ("SKIPPED", "overlap") not in reasons, rows
    # The outage's fires were missed: one is caught up, as single_catchup says.
    assert any(r.trigger == "catchup" and r.status == "COMPLETED" for r in rows), rows
    assert len({r.id for r in rows}) == len(rows)
    ran = [r for r in rows if r.status == "COMPLETED"]
    assert sorted(job.started) == sorted(r.id for r in ran)
    assert final.run_count == len(ran)


async def test_a_fixed_delay_run_no_jobs_worker_took_is_skipped_and_the_schedule_goes_on(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # fixed_delay plans its next fire when a run ends. A run no worker took ends unrun, and
    # its fire is SKIPPED missed (policy skip): the delay then counts from that decision.
    job = Counting()
    task = spec(schedule_type="interval", interval_seconds=4, interval_mode="fixed_delay",
                missed_run_policy="skip", job_details=handler_job("count"), max_runs=3)
    async with split_workers(dev_env, sqlite_engine, job, lead=2) as (queue, up, _):
        handle = await start_ahead(dev_env, queue, task)
        task_id = handle.id.removeprefix("task-")

        async def missed() -> bool:  # no jobs worker yet
            return any(r.reason == "missed" for r in executions(sqlite_engine, task_id))

        await until(missed, timeout=4 + UNTAKEN_AFTER.total_seconds() + 20)
        skipped = await task_state(handle)
        assert skipped.status is not TaskStatus.COMPLETED and skipped.next_fire_at is not None
        up.set()
        final = await asyncio.wait_for(handle.result(), timeout=60)
    replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())  # decided the same on replay
    rows = executions(sqlite_engine, final.task_id)
    assert final.status is TaskStatus.COMPLETED and final.run_count == 3
    assert sorted((r.status, r.reason) for r in rows) == [
        ("COMPLETED", None), ("COMPLETED", None), ("COMPLETED", None), ("SKIPPED", "missed")]
    assert sorted(job.started) == sorted(r.id for r in rows if r.status == "COMPLETED")


async def paused_near_its_instant(env: WorkflowEnvironment, queue: str, *, ahead: float,
                                  before: float, **fields: object) -> tuple[TaskHandle, datetime]:
    """An hourly task whose first fire, ``ahead`` seconds away, is sent ahead, then paused
    ``before`` seconds from that instant (too near to withdraw the run): its handle and fire."""
    fire = (datetime.now(UTC) + timedelta(seconds=ahead)).replace(microsecond=0)
    task = spec(schedule_type="interval", interval_seconds=3600, start_date=fire,
                job_details=handler_job("count"), **fields)
    handle = await start_ahead(env, queue, task)
    await until_dispatched(handle)
    await asyncio.sleep(max(0.0, (fire - datetime.now(UTC)).total_seconds() - before))
    await handle.execute_update(TaskWorkflow.pause_update, "maintenance")
    return handle, fire


async def resumed_then_cancelled(handle: TaskHandle) -> TaskState:
    """Resume the task, let a few seconds pass, cancel it: its final state."""
    await handle.execute_update(TaskWorkflow.resume_update)
    await asyncio.sleep(3)
    await handle.execute_update(TaskWorkflow.cancel_update, "done")
    return await handle.result()


async def test_a_run_a_pause_spared_that_no_jobs_worker_took_is_skipped_paused(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Paused too near its instant, the run was spared; no worker took it, and once found
    # untaken during the pause its fire went to the missed-run policy as missed: the catch-up
    # queued then ran as soon as the task was resumed (skip), a fire of the pause run after it.
    job = Counting()
    async with split_workers(dev_env, sqlite_engine, job, lead=4) as (queue, up, _):
        handle, fire = await paused_near_its_instant(dev_env, queue, ahead=7, before=1.5,
                                                     missed_run_policy="single_catchup")
        await asyncio.sleep((fire + UNTAKEN_AFTER - datetime.now(UTC)).total_seconds() + 2)
        paused = await task_state(handle)
        assert paused.status is TaskStatus.PAUSED and not paused.queue, paused.queue
        up.set()
        final = await resumed_then_cancelled(handle)
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.scheduled_at, r.status, r.reason) for r in rows] == [(fire, "SKIPPED", "paused")], rows
    assert job.started == []


async def test_a_run_a_pause_spared_stays_the_pauses_when_a_run_is_asked_for_meanwhile(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # A run asked for while paused withdrew the spared run again, for itself: that withdrawal
    # took the spare over from the pause, and the untaken run went to the missed-run policy,
    # whose catch-up ran at the resume, a fire of the pause run after all.
    job = Counting()
    async with split_workers(dev_env, sqlite_engine, job, lead=4) as (queue, up, _):
        handle, fire = await paused_near_its_instant(dev_env, queue, ahead=7, before=1.5,
                                                     missed_run_policy="single_catchup")
        await handle.execute_update(TaskWorkflow.trigger_update)
        await asyncio.sleep((fire + UNTAKEN_AFTER - datetime.now(UTC)).total_seconds() + 2)
        up.set()
        final = await resumed_then_cancelled(handle)
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.trigger, r.status, r.reason) for r in rows] == [
        ("manual", "COMPLETED", None), ("schedule", "SKIPPED", "paused")], rows
    assert rows[1].scheduled_at == fire and job.started == [rows[0].id]


async def test_a_run_spared_by_a_pause_and_a_retime_given_back_after_the_resume_is_not_sent_again(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # The pause kept the run it spared (too near its instant) from the retime that came next;
    # the resume then cleared the pause's claim, and nobody's was left: a jobs worker stopping
    # before the instant gave the run back, and it was sent again to run the old schedule's fire.
    job = Counting()
    async with split_workers(dev_env, sqlite_engine, job, lead=5) as (queue, up, down):
        up.set()
        handle, fire = await paused_near_its_instant(dev_env, queue, ahead=8, before=2.5)
        changes = TaskChanges.model_validate({"start_date": fire + timedelta(minutes=30)})
        await handle.execute_update(TaskWorkflow.update_task, changes)
        await handle.execute_update(TaskWorkflow.resume_update)
        down.set()  # the jobs worker stops and gives the waiting run back
        assert datetime.now(UTC) < fire, "too slow: the run's instant passed before the stop"
        async with httpx.AsyncClient() as http:  # another jobs worker, to run it if sent again
            activities = build_activities(engine=sqlite_engine, http=http, client=dev_env.client,
                                          extra_handlers={"count": job})
            for _ in range(100):  # once the stopped one has let go of the queue
                try:
                    again = build_jobs_worker(dev_env.client, task_queue=queue, activities=activities)
                    break
                except RuntimeError:
                    await asyncio.sleep(0.1)
            async with again:
                await asyncio.sleep(max(0.0, (fire - datetime.now(UTC)).total_seconds()) + 4)
        await handle.execute_update(TaskWorkflow.cancel_update, "done")
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.scheduled_at, r.status, r.reason) for r in rows] == [(fire, "SKIPPED", "rescheduled")], rows
    assert job.started == []


async def test_cancel_just_before_a_dispatched_instant_starts_no_run(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Counting()
    async with split_workers(dev_env, sqlite_engine, job, lead=6) as (queue, up, _):
        up.set()
        now = await dev_env.get_current_time()
        task = spec(schedule_type="once", run_at=now + timedelta(seconds=8),
                    job_details=handler_job("count"))
        handle = await start_ahead(dev_env, queue, task)

        async def dispatched() -> bool:
            return bool((await task_state(handle)).running)

        await until(dispatched)
        # Inside the withdrawal margin, under a second before the instant.
        await asyncio.sleep(max(0.0, (now + timedelta(seconds=7.3) - await dev_env.get_current_time())
                                .total_seconds()))
        answer = await handle.execute_update(TaskWorkflow.cancel_update, "stop")
        answered = asyncio.get_running_loop().time()
        final = await asyncio.wait_for(handle.result(), timeout=30)
        await asyncio.sleep(2)  # past the instant
    # No run starts once the cancel has answered; one that started before is in the answer.
    assert all(at < answered for at in job.started_at)
    assert answer.status is TaskStatus.CANCELLED and answer.running == []
    assert answer.started_before_cancel == job.started
    assert final.status is TaskStatus.CANCELLED and final.run_count == len(job.started)
    [row] = executions(sqlite_engine, final.task_id)
    if job.started:
        assert row.status in ("COMPLETED", "CANCELLED")
    else:
        assert (row.status, row.reason) == ("SKIPPED", "cancelled")


async def test_a_trigger_before_a_dispatched_instant_meets_the_overlap_policy(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Counting(seconds=14)
    async with split_workers(dev_env, sqlite_engine, job, lead=8) as (queue, up, _):
        up.set()
        now = await dev_env.get_current_time()
        task = spec(schedule_type="once", run_at=now + timedelta(seconds=10),
                    job_details=handler_job("count"), overlap_policy="skip")
        handle = await start_ahead(dev_env, queue, task)

        async def dispatched() -> bool:
            return bool((await task_state(handle)).running)

        await until(dispatched)
        await handle.execute_update(TaskWorkflow.trigger_update)  # ~8 s before the instant
        final = await asyncio.wait_for(handle.result(), timeout=60)
    assert job.most == 1, "the manual run and the scheduled one ran side by side"
    rows = executions(sqlite_engine, final.task_id)
    by_trigger = {r.trigger: (r.status, r.reason) for r in rows}
    assert by_trigger["manual"] == ("COMPLETED", None)
    assert by_trigger["schedule"] == ("SKIPPED", "overlap")


async def test_a_late_run_whose_workflow_answers_its_claim_late_runs_as_scheduled_once(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    """A run reaches its jobs worker more than CLAIM_AFTER late, while its workflow worker is
    down: the claim waits for the answer (past the old 3 s refusal) and the run starts once,
    as the schedule's run, not as a catch-up."""
    job = Counting()
    queue = f"tq-{uuid.uuid4()}"

    async with httpx.AsyncClient() as http:
        activities = build_activities(engine=sqlite_engine, http=http, client=dev_env.client,
                                      extra_handlers={"count": job},
                                      run_options=RunOptions(lead_seconds=5))
        now = await dev_env.get_current_time()
        instant = now + timedelta(seconds=7)
        task = spec(schedule_type="once", run_at=instant, job_details=handler_job("count"),
                    missed_run_policy="single_catchup")
        async with cacheless_workflows_worker(dev_env, queue, activities):
            handle = await start_ahead(dev_env, queue, task)
            await until_dispatched(handle)  # sent 5 s ahead, to no jobs worker yet
        await sleep_until(dev_env, instant + CLAIM_AFTER + timedelta(seconds=1))
        async with build_jobs_worker(dev_env.client, task_queue=queue, activities=activities):
            # The jobs worker takes the run 5 s late and asks; nobody answers for 5 s (its
            # patience: 5 s of lead + 15 s of slack - 10 s of margin).
            await sleep_until(dev_env, instant + CLAIM_AFTER + timedelta(seconds=6))
            assert job.started == []
            async with cacheless_workflows_worker(dev_env, queue, activities):
                final = await asyncio.wait_for(handle.result(), timeout=60)
    [row] = executions(sqlite_engine, final.task_id)
    assert (row.status, row.trigger) == ("COMPLETED", "schedule"), row
    assert job.started == [row.id]
    assert final.run_count == 1


async def sleep_until(env: WorkflowEnvironment, moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - await env.get_current_time()).total_seconds()))


async def test_a_start_report_and_a_pause_in_one_workflow_task_are_taken_in_history_order(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    """While the workflow worker is down, a run starts (its report is a signal) and a pause
    comes: the worker that comes back gets both in one workflow task. The server orders the
    pause after the report, the workflow takes them in that order live, and so on replay.
    (The time-skipping test server hands the update over ahead of the signal it records
    before it, which no replay can follow: such races belong on the dev server.)"""
    job = Counting(seconds=4)
    queue = f"tq-{uuid.uuid4()}"

    async with httpx.AsyncClient() as http:
        activities = build_activities(engine=sqlite_engine, http=http, client=dev_env.client,
                                      extra_handlers={"count": job},
                                      run_options=RunOptions(lead_seconds=3))
        instant = await dev_env.get_current_time() + timedelta(seconds=5)
        task = spec(schedule_type="once", run_at=instant, job_details=handler_job("count"))
        async with build_jobs_worker(dev_env.client, task_queue=queue, activities=activities):
            async with cacheless_workflows_worker(dev_env, queue, activities):
                handle = await start_ahead(dev_env, queue, task)
                await until_dispatched(handle)  # sent 3 s ahead; its jobs worker waits for it

            async def reported() -> bool:
                return any(e.workflow_execution_signaled_event_attributes.signal_name == "run_started"
                           for e in (await handle.fetch_history()).events)

            await until(reported)
            pausing = asyncio.create_task(handle.execute_update(
                TaskWorkflow.pause_update, args=["maintenance", "k1"]))
            await asyncio.sleep(1)  # the update is admitted, waiting for a workflow worker
            assert job.started and not pausing.done()
            async with cacheless_workflows_worker(dev_env, queue, activities):
                paused = await asyncio.wait_for(pausing, timeout=30)
                assert paused.status is TaskStatus.PAUSED

                async def recorded() -> bool:
                    return [r.status for r in executions(sqlite_engine, paused.task_id)] == ["COMPLETED"]

                await until(recorded)
                history = await handle.fetch_history()
    events = list(history.events)
    signal = next(e.event_id for e in events
                  if e.workflow_execution_signaled_event_attributes.signal_name == "run_started")
    accepted = next(e for e in events if e.HasField("workflow_execution_update_accepted_event_attributes"))
    between = [e.event_type for e in events if signal < e.event_id < accepted.event_id]
    # One workflow task took both: scheduled, started and completed, nothing else between.
    assert between == [EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
                       EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
                       EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED], between
    assert accepted.workflow_execution_update_accepted_event_attributes.accepted_request_sequencing_event_id >= signal
    replayer = Replayer(workflows=[TaskWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
    [row] = executions(sqlite_engine, paused.task_id)
    assert job.started == [row.id] and row.trigger == "schedule"
