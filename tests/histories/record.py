"""Record workflow histories for the replay tests: `python -m tests.histories.record [names]`.

Run it when a released TaskWorkflow version changes behaviour on purpose: it writes one JSON
history per scenario next to this file, `<scenario>-<STAMP>.json`. Keep the files of released
versions: every recorded history must keep replaying (see docs/upgrades.md).

`fixed_delay_untaken-*.json` is not made here: it needs a jobs worker that comes up late on a
real dev server. It is the history of the scenario of
`tests/workflows/test_reported_starts.py` (`max_runs` 2), saved with `fetch_history().to_json()`.
`rows_carried-*.json` likewise needs a dev server and PostgreSQL: it is the first workflow run
that continued as new with rows unwritten in `tests/faults/test_database_down_at_continue_as_new.py`.
`untaken_paused-*.json` is the scenario of `tests/workflows/test_reported_starts.py` whose
paused run no jobs worker took (with `max_runs` 2), saved the same way.
`asked_while_paused-*.json` is its scenario where a run is asked for during the pause, and
`given_back_after_resume-*.json` the one where the schedule changes during the pause and a
stopping jobs worker gives the run back after the resume, both saved the same way.
Two release-9 histories keep release 10's gates honest: `failed_at_cancel-*-release9.json` is
`failed_at_cancel` run on the code of release 9 (it ends auto-paused, so without its check), and
`long_name-*-release9.json` a task named and renamed with 100 emoji (over 1 KiB as `TaskName`),
run with `activities.options.RELEASE` set to 9. `lost_completion-*-release10.json` keeps release
11's: the scenario run with `RELEASE` set to 10 (its run ends failed).

Each scenario gets a fresh time-skipping server. A run dispatched ahead waits for its instant
on the worker's (real) clock, and the server's clock is ahead of it by every skip so far: so
the scenarios with a lead keep their instants a few real seconds after the server started.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.handlers import Handler, HandlerContext
from activities.options import RunOptions
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import ResumeMissed, workflow_id
from store.calendars import add_calendar
from store.engine import make_engine, migrate
from store.models import Calendar
from tests.conftest import new_worker, start_time_skipping
from tests.workflows.helpers import (
    Blocker,
    Failing,
    FailsOnCancel,
    Flaky,
    SlowFirst,
    TaskHandle,
    handler_job,
    locked_for_writes,
    pass_time_without_worker,
    spec,
    start_task,
    stoppable_worker,
    task_state,
    until,
)
from tests.workflows.test_lost_completion import Counting, LoseFirstCompletion
from workflows.events import Origin, SpecChange
from workflows.starter import start_task_workflow
from workflows.state import BackfillItem, BackfillRequest, ReplayRequest, TaskState
from workflows.task import TaskWorkflow

HERE = Path(__file__).parent
STAMP = "20261207-release11"  # the release in the run options and start input (activities/options.py)
MINUTE = timedelta(minutes=1)

Scenario = Callable[[WorkflowEnvironment, Engine], Awaitable[TaskHandle]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(run: Scenario) -> Scenario:
    """Register a scenario under its function's name; it returns its task's ended workflow."""
    SCENARIOS[run.__name__] = run
    return run


async def start_ahead(env: WorkflowEnvironment, queue: str, task: TaskSpec) -> TaskHandle:
    """Start a task as the API does (its worker's options say how far ahead it dispatches)."""
    task_id = uuid.uuid4().hex
    await start_task_workflow(env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
                              spec=task, created_at=await env.get_current_time())
    return env.client.get_workflow_handle(workflow_id(task_id), result_type=TaskState)


async def until_in_flight(handle: TaskHandle, flying: bool = True) -> None:
    """Wait until a run is in flight (or none is), polling on the real clock."""
    async def reached() -> bool:
        return bool((await task_state(handle)).running) is flying
    await until(reached)


async def to_the_end(env: WorkflowEnvironment, engine: Engine, task: TaskSpec, *, lead: float = 0,
                     handlers: dict[str, Handler] | None = None, history_limit: int = 10_000
                     ) -> TaskHandle:
    """Run a task on a worker of its own until it ends."""
    options = RunOptions(lead_seconds=lead, history_limit=history_limit)
    async with new_worker(env.client, engine, handlers=handlers, run_options=options) as worker:
        if lead:
            handle = await start_ahead(env, worker.task_queue, task)
        else:
            handle = await start_task(env, worker.task_queue, task)
        await handle.result()
    return handle


@scenario
async def once(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    run_at = await env.get_current_time() + 5 * MINUTE
    return await to_the_end(env, engine, spec(schedule_type="once", run_at=run_at))


@scenario
async def calendars(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    """Fires every other day: the first shifted a day, the second SKIPPED calendar."""
    now = await env.get_current_time()
    first = now.replace(hour=12, minute=0, second=0, microsecond=0) + timedelta(days=1)
    skip = add_calendar(engine, Calendar(id=uuid.uuid4().hex, tenant_id="t1", name="skip",
                                         dates=[(first + timedelta(days=2)).date().isoformat()]))
    shift = add_calendar(engine, Calendar(id=uuid.uuid4().hex, tenant_id="t1", name="shift",
                                          dates=[first.date().isoformat()]))
    task = spec(schedule_type="interval", interval_seconds=2 * 86400, start_date=first,
                max_runs=2, exclude_calendars=[{"calendar_id": skip.id},
                                               {"calendar_id": shift.id, "shift": True}])
    return await to_the_end(env, engine, task)


@scenario
async def dates_schedule(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    now = await env.get_current_time()
    task = spec(schedule_type="dates", dates=[now + 5 * MINUTE, now + 90 * MINUTE, now + 2 * MINUTE])
    return await to_the_end(env, engine, task)


@scenario
async def interval_dispatched_ahead(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    task = spec(schedule_type="interval", interval_seconds=3, max_runs=2)
    return await to_the_end(env, engine, task, lead=2)


@scenario
async def sent_ahead_alone(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    """Each run sent ahead in a workflow task of its own (its instant beyond the lead)."""
    start = await env.get_current_time() + timedelta(seconds=6)
    task = spec(schedule_type="interval", interval_seconds=5, start_date=start, max_runs=2)
    return await to_the_end(env, engine, task, lead=2)


@scenario
async def catchup(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Down from +10 to +130 minutes: +30, +60, +90, +120 are missed; three are caught up (the
    # cap), the oldest is skipped; +150 runs on time and is the fifth and last run.
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=1800, missed_run_policy="catchup",
                max_catchup_runs=3, max_runs=4)
    async with stoppable_worker(env, engine, queue):
        handle = await start_task(env, queue, task)
        await env.sleep(10 * MINUTE)
        before = await task_state(handle)
    assert before.next_fire_at is not None
    await pass_time_without_worker(env, handle, timedelta(hours=2), first_wake=before.next_fire_at)
    async with new_worker(env.client, engine, task_queue=queue):
        state = await handle.result()
    assert (state.success_count, state.skipped_count) == (4, 1), state
    return handle


def every_second(policy: str, max_runs: int) -> TaskSpec:
    """An every-second task whose job is the "slow" handler."""
    return spec(schedule_type="interval", interval_seconds=1, overlap_policy=policy,
                max_runs=max_runs, job_details=handler_job("slow"), heartbeat_timeout_seconds=1)


@scenario
async def continue_as_new_in_flight(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The first job lasts 2.5 s, allow: the history passes its limit while runs are going; the
    # workflow drains them, then continues as new with the fires left.
    handle = await to_the_end(env, engine, every_second("allow", 5), history_limit=40,
                              handlers={"slow": SlowFirst(2.5)})
    # Record the first run of the chain: its history ends in the continue-as-new.
    first = env.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id,
                                           result_type=TaskState)
    events = [e.event_type async for e in first.fetch_history_events()]
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    return first


@scenario
async def retimed_while_draining(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # As continue_as_new_in_flight, with the first job long enough for the drain to hold fires;
    # a retime then keeps them (release 8), and the next workflow run starts them.
    slow = SlowFirst(6)
    options = RunOptions(history_limit=40)
    async with new_worker(env.client, engine, handlers={"slow": slow}, run_options=options) as worker:
        handle = await start_task(env, worker.task_queue, every_second("allow", 12))

        async def holding() -> bool:
            return any(run.held for run in (await task_state(handle)).queue)

        await until(holding)
        await handle.execute_update(TaskWorkflow.update_task, TaskChanges(interval_seconds=2))
        await handle.result()
    first = env.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id,
                                           result_type=TaskState)
    events = [e.event_type async for e in first.fetch_history_events()]
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    return first


@scenario
async def buffer_one(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    return await to_the_end(env, engine, every_second("buffer_one", 3),
                            handlers={"slow": SlowFirst(2.5)})


@scenario
async def cancel_running(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    return await to_the_end(env, engine, every_second("cancel_running", 2),
                            handlers={"slow": SlowFirst(0, until_cancelled=True)})


@scenario
async def fixed_delay(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    task = spec(schedule_type="interval", interval_seconds=600, interval_mode="fixed_delay",
                max_runs=2, job_details=handler_job("sleep", seconds=0.2))
    return await to_the_end(env, engine, task)


async def paused_ahead(env: WorkflowEnvironment, engine: Engine, *, locked: bool) -> TaskHandle:
    """A run dispatched in the first workflow task (the lead is longer than the wait), paused
    10 s before its instant (``locked``: while its row write waits on a locked database):
    withdrawn, its fire given back; after the resume it runs (on time)."""
    async with new_worker(env.client, engine, run_options=RunOptions(lead_seconds=20)) as worker:
        run_at = await env.get_current_time() + timedelta(seconds=10)
        handle = await start_ahead(env, worker.task_queue, spec(schedule_type="once", run_at=run_at))
        await until_in_flight(handle)
        with locked_for_writes(engine) if locked else contextlib.nullcontext():
            await handle.execute_update(TaskWorkflow.pause_update, "hold")
            await until_in_flight(handle, flying=False)
        await env.sleep(timedelta(seconds=30))
        await handle.signal(TaskWorkflow.resume_signal)
        state = await handle.result()
    assert state.success_count == 1, state
    return handle


@scenario
async def withdrawn_by_pause(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    return await paused_ahead(env, engine, locked=False)


@scenario
async def withdrawn_while_writing(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The run's cancel goes out first (its workflow task ends on a 1 ms timer), then the write.
    return await paused_ahead(env, engine, locked=True)


@scenario
async def herd_beat(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Created as the 101st of a herd (10 a second): dispatched at once, 8 s before its instant,
    # 6 s more than the 2 s lead, so it beats every 6 s near it. Paused about 5 s before it,
    # the run is not withdrawn (it would be at the usual beat) and runs, which ends the task.
    async with new_worker(env.client, engine,
                          run_options=RunOptions(lead_seconds=2, herd_rate=10)) as worker:
        task_id = uuid.uuid4().hex
        await start_task_workflow(
            env.client, task_queue=worker.task_queue, task_id=task_id, tenant_id="t1",
            spec=spec(schedule_type="once", run_at=await env.get_current_time() + timedelta(seconds=8)),
            created_at=await env.get_current_time(), crowd=100)
        handle = env.client.get_workflow_handle(workflow_id(task_id), result_type=TaskState)
        await until_in_flight(handle)
        await asyncio.sleep(2.5)  # the server's clock moves with the real one while it waits
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        state = await handle.result()
    assert state.success_count == 1 and state.skipped_count == 0, state
    return handle


@scenario
async def pause_resume(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Paused from +10 to +130 minutes: the four fires inside are skipped as paused.
    async with new_worker(env.client, engine) as worker:
        task = spec(schedule_type="interval", interval_seconds=1800, max_runs=1)
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(10 * MINUTE)
        await handle.signal(TaskWorkflow.pause_signal, "maintenance")
        await env.sleep(timedelta(hours=2))
        await handle.execute_update(TaskWorkflow.resume_update)
        state = await handle.result()
    assert (state.success_count, state.skipped_count) == (1, 4), state
    return handle


@scenario
async def paused_during_run(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Paused by a plain signal while its first run is going: the task shows PAUSED, the run
    # ends COMPLETED, and after the resume the second run ends the task.
    job = SlowFirst(2.0)
    async with new_worker(env.client, engine, handlers={"slow": job}) as worker:
        task = spec(schedule_type="interval", interval_seconds=60, max_runs=2,
                    job_details=handler_job("slow"))
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(MINUTE + timedelta(seconds=1))
        await handle.signal(TaskWorkflow.pause_signal, "maintenance")
        paused = await handle.query(TaskWorkflow.query_state)
        await asyncio.sleep(3)  # the run going ends while the task is paused
        await handle.execute_update(TaskWorkflow.resume_update)
        state = await handle.result()
    assert paused.status == "PAUSED" and paused.running, paused
    assert state.success_count == 2 and len(job.calls) == 2, state
    return handle


@scenario
async def update_during_lead(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The fire at +10 s is dispatched at once (lead 20 s); the interval then changes: that run
    # is withdrawn (SKIPPED rescheduled) and the new grid's first fire runs.
    async with new_worker(env.client, engine, run_options=RunOptions(lead_seconds=20)) as worker:
        task = spec(schedule_type="interval", interval_seconds=10)
        handle = await start_ahead(env, worker.task_queue, task)
        await until_in_flight(handle)
        await handle.execute_update(TaskWorkflow.update_task,
                                    TaskChanges(interval_seconds=5, max_runs=1))
        state = await handle.result()
    assert (state.success_count, state.skipped_count) == (1, 1), state
    return handle


@scenario
async def herd_lead(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Created as the 21st of a herd: its two runs are dispatched 2 s further ahead than the
    # 2 s lead (10 a second); then a retime leaves the herd, and the last run has the usual lead.
    options = RunOptions(lead_seconds=2, herd_rate=10)
    async with new_worker(env.client, engine, run_options=options) as worker:
        task_id = uuid.uuid4().hex
        await start_task_workflow(env.client, task_queue=worker.task_queue, task_id=task_id,
                                  tenant_id="t1", spec=spec(schedule_type="interval",
                                                            interval_seconds=10, max_runs=3),
                                  created_at=await env.get_current_time(), crowd=20)
        handle = env.client.get_workflow_handle(workflow_id(task_id), result_type=TaskState)

        async def ran_twice() -> bool:
            return (await task_state(handle)).success_count == 2
        await until(ran_twice)
        await handle.execute_update(TaskWorkflow.update_task, TaskChanges(interval_seconds=5))
        state = await handle.result()
    assert state.success_count == 3 and state.crowd == 0, state
    return handle


@scenario
async def herd_retimed(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Created alone, then moved into a herd the API counted 20 strong: its run is dispatched
    # 2 s further ahead than the 2 s lead (10 a second).
    options = RunOptions(lead_seconds=2, herd_rate=10)
    async with new_worker(env.client, engine, run_options=options) as worker:
        now = await env.get_current_time()
        handle = await start_task(env, worker.task_queue,
                                  spec(schedule_type="once", run_at=now + 10 * MINUTE))
        moved_to = (now + MINUTE).replace(microsecond=0)
        await handle.execute_update(TaskWorkflow.change_task, SpecChange(
            changes=TaskChanges(run_at=moved_to), crowd=20, crowd_at=moved_to))
        state = await handle.result()
    assert state.success_count == 1 and state.crowd == 20, state
    return handle


@dataclass
class Refused:
    """A tenant's second run, refused while its first holds the tenant's one job slot (of two)."""

    slow: SlowFirst  # the handler both runs call; the first call takes 3 s of real time
    holder: TaskHandle  # the first run's task
    handle: TaskHandle  # the second run's task, due a second after the first


@contextlib.asynccontextmanager
async def second_run_refused(env: WorkflowEnvironment, engine: Engine) -> AsyncIterator[Refused]:
    """Two job slots: a tenant alone may hold one. A run holds it; another run of the tenant
    comes due a second later and is refused while the first holds the slot."""
    slow = SlowFirst(3)
    async with new_worker(env.client, engine, handlers={"slow": slow},
                          max_concurrent_activities=2) as worker:
        now = await env.get_current_time()
        job = handler_job("slow")
        holder = await start_task(env, worker.task_queue, spec(schedule_type="once", run_at=now,
                                                               job_details=job))

        async def holding() -> bool:
            return len(slow.calls) == 1
        await until(holding)
        handle = await start_task(env, worker.task_queue, spec(
            schedule_type="once", run_at=now + timedelta(seconds=1), job_details=job))
        yield Refused(slow, holder, handle)


@scenario
async def tenant_share(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The second run is sent again and runs once the first has ended.
    async with second_run_refused(env, engine) as refused:
        state = await refused.handle.result()
        await refused.holder.result()
    history = await refused.handle.fetch_history()
    busy = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            and e.activity_task_failed_event_attributes.failure.application_failure_info.type
            == "TenantBusy"]
    assert busy and state.success_count == 1 and len(refused.slow.calls) == 2, (state, refused.slow.calls)
    return refused.handle


@scenario
async def retry_refused(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Two job slots: a tenant alone may hold one. The run's first attempt fails; its retry
    # comes while another run of the tenant holds the slot (3 s of real time), is refused and
    # sent again with the attempt it made, and its second attempt succeeds.
    slow, calls = SlowFirst(3), []

    async def fails_once(ctx: HandlerContext) -> None:
        calls.append(ctx.execution_id)
        if len(calls) == 1:
            raise RuntimeError("the first attempt fails")

    async with new_worker(env.client, engine, handlers={"slow": slow, "fails_once": fails_once},
                          max_concurrent_activities=2) as worker:
        now = await env.get_current_time()
        handle = await start_task(env, worker.task_queue, spec(
            schedule_type="once", run_at=now, job_details=handler_job("fails_once"),
            retry_policy={"initial_interval_seconds": 2, "maximum_interval_seconds": 2}))
        holder = await start_task(env, worker.task_queue, spec(
            schedule_type="once", run_at=now + timedelta(seconds=1), job_details=handler_job("slow")))
        state = await handle.result()
        await holder.result()
    history = await handle.fetch_history()
    carried = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and b'"attempts_used":1' in e.activity_task_scheduled_event_attributes.input.payloads[0].data]
    assert carried and state.success_count == 1 and len(calls) == 2, (state, calls)
    return handle


@scenario
async def refused_paused(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The task of the refused run is paused while the run waits to be sent again, which
    # withdraws it (release 7), and resumed: its fire runs once after the resume.
    async with second_run_refused(env, engine) as refused:
        handle = refused.handle

        async def was_refused() -> bool:
            history = await handle.fetch_history()
            return any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED for e in history.events)
        await until(was_refused)
        await handle.signal(TaskWorkflow.pause_signal, "while refused")
        await refused.holder.result()
        await handle.execute_update(TaskWorkflow.resume_update)
        state = await handle.result()
    assert state.success_count == 1 and len(refused.slow.calls) == 2, (state, refused.slow.calls)
    return handle


@scenario
async def trigger(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    async with new_worker(env.client, engine) as worker:
        task = spec(schedule_type="interval", interval_seconds=600, max_runs=1)
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(MINUTE)
        await handle.execute_update(TaskWorkflow.trigger_update)
        await env.sleep(MINUTE)
        await handle.signal(TaskWorkflow.trigger_signal)  # what `temporal workflow signal` sends
        state = await handle.result()
    assert state.success_count == 3, state
    return handle


@scenario
async def cancelled(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Cancelled by a plain signal while its job runs: the job is cancelled through heartbeats.
    blocker = Blocker()
    async with new_worker(env.client, engine, handlers={"block": blocker}) as worker:
        task = spec(schedule_type="interval", interval_seconds=60, job_details=handler_job("block"),
                    heartbeat_timeout_seconds=2)
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(MINUTE + timedelta(seconds=1))
        await asyncio.wait_for(blocker.started.wait(), 30)
        await handle.signal(TaskWorkflow.cancel_signal, "no longer needed")
        state = await handle.result()
    assert state.cancelled_count == 1 and blocker.cancelled.is_set(), state
    return handle


@scenario
async def failed_at_cancel(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The run fails as the task is cancelled, with a breaker of one failure: it trips nothing,
    # and tells the webhook of no auto-pause.
    job = FailsOnCancel()
    async with new_worker(env.client, engine, handlers={"fails": job}) as worker:
        task = spec(schedule_type="interval", interval_seconds=60, job_details=handler_job("fails"),
                    retry_policy={"max_attempts": 1}, max_consecutive_failures=1,
                    auto_resume_after_seconds=300, heartbeat_timeout_seconds=2,
                    notify={"url": "http://127.0.0.1:9/hook", "events": ["auto_paused"]})
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(MINUTE + timedelta(seconds=1))
        await asyncio.wait_for(job.started.wait(), 30)
        await handle.signal(TaskWorkflow.cancel_signal, "no longer needed")
        state = await handle.result()
    assert (state.failure_count, state.status_reason) == (1, "no longer needed"), state
    return handle


@scenario
async def lost_completion(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # The only attempt's end never reaches the server: the run is what its row says.
    lossy = LoseFirstCompletion()
    config = env.client.config()
    client = Client(env.client.service_client, namespace=config["namespace"],
                    data_converter=config["data_converter"], interceptors=[lossy])
    async with new_worker(client, engine, handlers={"count": Counting()}) as worker:
        task = spec(schedule_type="once", run_at=await env.get_current_time(),
                    job_details=handler_job("count"), heartbeat_timeout_seconds=2,
                    retry_policy={"max_attempts": 1})
        handle = await start_task(env, worker.task_queue, task)
        state = await handle.result()
    assert lossy.lost, "no completion was lost"
    assert (state.success_count, state.failure_count) == (1, 0), state
    return handle


@scenario
async def dead_letter(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Every run fails through its two attempts and is dead-lettered; the first is replayed.
    async with new_worker(env.client, engine, handlers={"fail": Failing()}) as worker:
        task = spec(schedule_type="interval", interval_seconds=600, max_runs=2,
                    job_details=handler_job("fail"),
                    retry_policy={"max_attempts": 2, "initial_interval_seconds": 1})
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(11 * MINUTE)
        last = (await task_state(handle)).last_run
        assert last is not None and last.status == "FAILED", last
        await handle.execute_update(TaskWorkflow.replay_update, ReplayRequest(
            execution_id=last.execution_id, scheduled_at=last.scheduled_at))
        state = await handle.result()
    # The replay's failure takes the place of the one it replayed: two failures counted.
    assert state.failure_count == 2 and state.consecutive_failures == 3, state
    return handle


@scenario
async def self_healing(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Two failed runs auto-pause the task; its probe after 5 minutes fails (the cool-down
    # doubles), the next one passes and resumes it; two more runs end it.
    flaky = Flaky()
    async with new_worker(env.client, engine, handlers={"flaky": flaky}) as worker:
        task = spec(schedule_type="interval", interval_seconds=60, max_runs=4,
                    job_details=handler_job("flaky"), retry_policy={"max_attempts": 1},
                    max_consecutive_failures=2, auto_resume_after_seconds=300)
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(2 * MINUTE + timedelta(seconds=5))

        async def probing(cool_down: float) -> bool:
            probe = (await task_state(handle)).probe
            return probe is not None and probe.cool_down_seconds == cool_down
        await until(lambda: probing(300))
        await env.sleep(6 * MINUTE)
        await until(lambda: probing(600))
        flaky.failing = False
        state = await handle.result()
    assert (state.failure_count, state.success_count) == (3, 3), state
    return handle


@scenario
async def resume_policy(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Paused from +10 to +130 minutes and resumed with the missed-run policy: single_catchup
    # runs +120 once, +30, +60 and +90 are missed; +150 ends the task.
    async with new_worker(env.client, engine) as worker:
        task = spec(schedule_type="interval", interval_seconds=1800, max_runs=2,
                    missed_run_policy="single_catchup")
        handle = await start_task(env, worker.task_queue, task)
        await env.sleep(10 * MINUTE)
        await handle.signal(TaskWorkflow.pause_signal, "maintenance")
        await env.sleep(timedelta(hours=2))
        await handle.execute_update(TaskWorkflow.resume_update, ResumeMissed.POLICY)
        state = await handle.result()
    assert (state.success_count, state.skipped_count) == (2, 3), state
    return handle


@scenario
async def task_history(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Every kind of message, from the API (with its key's id) and plain: the events they write.
    async with new_worker(env.client, engine) as worker:
        task = spec(schedule_type="interval", interval_seconds=1800)
        handle = await start_task(env, worker.task_queue, task)
        await handle.execute_update(TaskWorkflow.change_task, SpecChange(
            changes=TaskChanges(interval_seconds=3600), origin=Origin(actor="k1")))
        await handle.signal(TaskWorkflow.pause_signal, "by hand")
        await handle.execute_update(TaskWorkflow.resume_update, args=[None, "k1"])
        await handle.execute_update(TaskWorkflow.trigger_update, "k1")
        await env.sleep(timedelta(minutes=90))
        await handle.execute_update(TaskWorkflow.change_task, SpecChange(
            changes=TaskChanges(interval_seconds=1800), origin=Origin(actor="k1", action="rollback",
                                                                      detail={"version": 1})))
        await handle.signal(TaskWorkflow.cancel_signal, "done")
        state = await handle.result()
    assert (state.spec_version, state.success_count) == (3, 2), state
    return handle


@scenario
async def backfill(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # Three past instants run again (trigger backfill, not counted against max_runs), then
    # the schedule's one run.
    async with new_worker(env.client, engine) as worker:
        task = spec(schedule_type="interval", interval_seconds=600, max_runs=1)
        handle = await start_task(env, worker.task_queue, task)
        now = await env.get_current_time()
        past = [now - k * 10 * MINUTE for k in (3, 2, 1)]
        await handle.execute_update(TaskWorkflow.backfill_update, BackfillRequest(
            mode="missing", start=past[0], end=now, instants=[
                BackfillItem(scheduled_at=at, earlier="backfilled; before: SKIPPED (missed)")
                for at in past]))
        await env.sleep(11 * MINUTE)
        state = await handle.result()
    assert (state.success_count, state.executed) == (4, 1), state
    assert state.backfill is not None and state.backfill.status == "done", state.backfill
    return handle


@scenario
async def unstarted_queued(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # A fire queued behind a slow run, and runs sent then reported started: the row's
    # unstarted_at is written as each changes.
    return await to_the_end(env, engine, every_second("buffer_one", 3),
                            handlers={"slow": SlowFirst(2.5)})


@scenario
async def notified(env: WorkflowEnvironment, engine: Engine) -> TaskHandle:
    # A failed run tells the task's webhook, which nothing answers: the delivery is tried until
    # its time is up, and the task ends once it is given up on.
    async with new_worker(env.client, engine, handlers={"fail": Failing()}) as worker:
        task = spec(schedule_type="once", run_at=await env.get_current_time() + MINUTE,
                    job_details=handler_job("fail"),
                    retry_policy={"max_attempts": 1},
                    notify={"url": "http://127.0.0.1:9/hook", "events": ["failed"]})
        handle = await start_task(env, worker.task_queue, task)
        state = await handle.result()
    assert state.failure_count == 1, state
    return handle


async def record(only: set[str] | None = None) -> list[Path]:
    """Run the scenarios (all, or those named) and write their histories."""
    unknown = (only or set()) - set(SCENARIOS)
    assert not unknown, f"no such scenario: {sorted(unknown)}"
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/r.db")
        migrate(engine)
        for name, run in SCENARIOS.items():
            if only and name not in only:
                continue
            env = await start_time_skipping()
            try:
                handle = await run(env, engine)
                history = await handle.fetch_history()
            finally:
                await env.shutdown()
            path = HERE / f"{name}-{STAMP}.json"
            path.write_text(history.to_json())
            written.append(path)
            print(f"wrote {path}", file=sys.stderr)
        engine.dispose()
    return written


if __name__ == "__main__":
    asyncio.run(record(set(sys.argv[1:]) or None))
