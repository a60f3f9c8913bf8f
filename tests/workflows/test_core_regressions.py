"""Scenarios that once lost, doubled or misrecorded a run, each against a real test server.

Dispatched-ahead scenarios run on the dev server (a lead needs a real clock); the rest on the
time-skipping server."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import Engine, event
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.handlers import HandlerContext
from activities.options import RunOptions
from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import TaskStatus, workflow_id
from store.tasks import read_task
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import (
    Blocker,
    Failing,
    TaskHandle,
    executions,
    handler_job,
    pass_time_without_worker,
    running_task,
    spec,
    start_task,
    statuses,
    stoppable_worker,
    task_state,
    until,
)
from worker.build import ActivitySet, build_activities, build_jobs_worker, build_workflow_worker
from workflows.starter import start_task_workflow
from workflows.state import TaskState, TaskWorkflowInput
from workflows.task import TaskWorkflow


class Sleeping:
    """A handler that takes ``seconds`` of real time, heartbeating; records each run."""

    def __init__(self, seconds: float, *, slow_runs: int | None = None) -> None:
        self.seconds = seconds
        self.slow_runs = slow_runs  # only the first ones take time, when set
        self.runs: list[str] = []

    async def __call__(self, ctx: HandlerContext) -> None:
        self.runs.append(ctx.execution_id)
        if self.slow_runs is not None and len(self.runs) > self.slow_runs:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        while loop.time() < deadline:
            ctx.heartbeat()
            await asyncio.sleep(0.05)


async def _start_ahead(env: WorkflowEnvironment, queue: str, task: TaskSpec) -> str:
    task_id = uuid.uuid4().hex
    await start_task_workflow(env.client, task_queue=queue, task_id=task_id, tenant_id="t1",
                              spec=task, created_at=await env.get_current_time())
    return task_id


async def _dispatched(env: WorkflowEnvironment, task_id: str) -> TaskState:
    handle = env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))

    async def out() -> bool:
        return bool((await handle.query(TaskWorkflow.query_state)).running)

    await until(out)
    return await handle.query(TaskWorkflow.query_state)


@asynccontextmanager
async def _workflows_only(env: WorkflowEnvironment, engine: Engine, *, lead: float
                          ) -> AsyncIterator[tuple[Worker, ActivitySet]]:
    """A workflow worker with no jobs worker: dispatched runs wait on the server, unstarted."""
    async with httpx.AsyncClient() as http:
        activities = build_activities(engine=engine, http=http, client=env.client,
                                      run_options=RunOptions(lead_seconds=lead))
        worker = build_workflow_worker(env.client, task_queue=f"tq-{uuid.uuid4()}",
                                       activities=activities)
        async with worker:
            yield worker, activities


async def _started_then_down(env: WorkflowEnvironment, engine: Engine, task: TaskSpec,
                             down: timedelta) -> tuple[TaskHandle, str]:
    """Start ``task`` on a worker of a fresh queue, stop the worker, and let ``down`` pass
    without one (from before the first fire): the task's handle and queue."""
    async with stoppable_worker(env, engine, f"tq-{uuid.uuid4()}") as worker:
        handle = await start_task(env, worker.task_queue, task)
        first = (await task_state(handle)).next_fire_at
    assert first is not None
    await pass_time_without_worker(env, handle, down, first_wake=first)
    return handle, worker.task_queue


async def test_continue_as_new_with_runs_in_flight_keeps_the_history_bounded_and_loses_no_run(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # On the dev server, as tests/workflows/test_queue_order.py says why.
    job = Sleeping(1.3)  # longer than the interval: a run is always in flight
    task = spec(schedule_type="interval", interval_seconds=1, overlap_policy="allow",
                job_details=handler_job("slow"), max_runs=8)
    async with (
        new_worker(dev_env.client, sqlite_engine, handlers={"slow": job},
                   run_options=RunOptions(history_limit=60)) as worker,
        running_task(dev_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.continued_as_new >= 1
    rows = executions(sqlite_engine, final.task_id)
    ran = [r for r in rows if r.status == "COMPLETED"]
    assert len(ran) == 8 and len(set(job.runs)) == 8 == len(job.runs)
    assert all(r.status in ("COMPLETED", "SKIPPED") for r in rows)


async def test_fixed_delay_with_a_run_dispatched_ahead_goes_on_after_it(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=2, interval_mode="fixed_delay", max_runs=3)
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(lead_seconds=1.5)) as worker:
        task_id = await _start_ahead(dev_env, worker.task_queue, task)
        final = await dev_env.client.get_workflow_handle_for(
            TaskWorkflow.run, workflow_id(task_id)).result()
    assert final.status is TaskStatus.COMPLETED
    assert statuses(executions(sqlite_engine, task_id)) == ["COMPLETED"] * 3


async def test_a_schedule_change_during_the_lead_keeps_the_last_run_of_max_runs(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=12, max_runs=1)
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(lead_seconds=10)) as worker:
        task_id = await _start_ahead(dev_env, worker.task_queue, task)
        await _dispatched(dev_env, task_id)  # its only run waits on the jobs worker
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        await handle.execute_update(TaskWorkflow.update_task, TaskChanges(interval_seconds=5))
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.success_count == 1
    rows = executions(sqlite_engine, task_id)
    assert sorted(statuses(rows)) == ["COMPLETED", "SKIPPED"]
    assert [r.reason for r in rows if r.status == "SKIPPED"] == ["rescheduled"]


async def test_a_paused_and_resumed_one_time_task_whose_run_no_worker_started_still_runs(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await dev_env.get_current_time()
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=15))
    async with _workflows_only(dev_env, sqlite_engine, lead=12) as (workflows, activities):
        task_id = await _start_ahead(dev_env, workflows.task_queue, task)
        await _dispatched(dev_env, task_id)
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        paused = await handle.execute_update(TaskWorkflow.pause_update, "deploy")

        async def withdrawn() -> bool:
            return not (await handle.query(TaskWorkflow.query_state)).running

        await until(withdrawn)
        assert paused.status is TaskStatus.PAUSED
        await handle.execute_update(TaskWorkflow.resume_update)
        async with build_jobs_worker(dev_env.client, task_queue=workflows.task_queue,
                                     activities=activities):
            final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.run_count == 1
    assert statuses(executions(sqlite_engine, task_id)) == ["COMPLETED"]


async def test_a_pause_just_before_the_instant_lets_the_run_finish_unharmed(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await dev_env.get_current_time()
    job = Sleeping(1.0)
    task = spec(schedule_type="interval", interval_seconds=30, start_date=now + timedelta(seconds=6),
                job_details=handler_job("slow"))
    async with new_worker(dev_env.client, sqlite_engine, handlers={"slow": job}, run_options=RunOptions(lead_seconds=5)) as worker:
        task_id = await _start_ahead(dev_env, worker.task_queue, task)
        state = await _dispatched(dev_env, task_id)
        assert state.next_fire_at is not None
        instant = now + timedelta(seconds=6)
        await asyncio.sleep(max(0.0, (instant - await dev_env.get_current_time()).total_seconds() - 1))
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        await handle.signal(TaskWorkflow.pause_signal, "ops")

        async def recorded() -> bool:
            return any(r.status != "RUNNING" for r in executions(sqlite_engine, task_id))

        await until(recorded)
        state = await handle.query(TaskWorkflow.query_state)
        await handle.terminate("test over")
    assert statuses(executions(sqlite_engine, task_id)) == ["COMPLETED"]
    assert state.paused and state.status is TaskStatus.PAUSED


async def test_a_pause_holds_queued_catch_up_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    blocker = Sleeping(2.0)
    task = spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup",
                job_details=handler_job("slow"))
    handle, queue = await _started_then_down(time_env, sqlite_engine, task, timedelta(minutes=5))
    async with new_worker(time_env.client, sqlite_engine, task_queue=queue,
                          handlers={"slow": blocker}, max_cached_workflows=0):
        async def catching_up() -> bool:
            return len(blocker.runs) >= 1

        await until(catching_up)
        await handle.signal(TaskWorkflow.pause_signal, "hold")
        await asyncio.sleep(5)  # the run going finishes; the queued ones must wait
        held = await task_state(handle)
        await handle.terminate("test over")
    assert held.paused and len(blocker.runs) == 1
    assert len([r for r in held.queue if r.trigger == "catchup"]) >= 3


async def test_skipped_fires_do_not_use_up_max_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Sleeping(2.5)
    task = spec(schedule_type="interval", interval_seconds=1, max_runs=3,
                job_details=handler_job("slow"))
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"slow": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert [r.status for r in rows if r.status != "SKIPPED"] == ["COMPLETED"] * 3
    assert {r.reason for r in rows if r.status == "SKIPPED"} == {"overlap"}
    assert final.success_count == 3 == final.executed


async def test_more_than_a_thousand_missed_fires_single_catchup_runs_one(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=1, missed_run_policy="single_catchup")
    handle, queue = await _started_then_down(time_env, sqlite_engine, task, timedelta(seconds=1300))
    async with new_worker(time_env.client, sqlite_engine, task_queue=queue,
                          max_cached_workflows=0):
        async def decided() -> bool:
            try:
                state = await task_state(handle)
            except RPCError as exc:
                # Without a cache each query replays the whole history; on a loaded machine,
                # while the worker decides the 1,300 fires, one can miss its deadline (the
                # client reports it as DEADLINE_EXCEEDED, or CANCELLED "Timeout expired").
                if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                    return False
                raise
            return state.skipped_count >= 1290 and state.success_count >= 1

        await until(decided, timeout=90)
        state = await task_state(handle)
        await handle.terminate("test over")
    rows = executions(sqlite_engine, state.task_id)
    # The newest fire was on time and ran: no stale fire runs besides it, in any pass.
    assert len([r for r in rows if r.trigger == "catchup"]) == 0
    first_run = min(r.scheduled_at for r in rows if r.status == "COMPLETED")
    assert {r.reason for r in rows if r.status == "SKIPPED" and r.scheduled_at < first_run} == {"missed"}
    # Later fires meet a run still going (the clock skips on while it runs) or run.
    assert {r.reason for r in rows if r.status == "SKIPPED" and r.scheduled_at > first_run} <= {"overlap"}
    assert len({r.scheduled_at for r in rows}) == len(rows)


async def test_two_triggers_in_one_workflow_task_are_two_runs(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=3600)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await asyncio.gather(handle.signal(TaskWorkflow.trigger_signal),
                             handle.signal(TaskWorkflow.trigger_signal))

        async def both() -> bool:
            return (await task_state(handle)).success_count == 2

        await until(both)
        state = await task_state(handle)
    rows = executions(sqlite_engine, state.task_id)
    assert statuses(rows) == ["COMPLETED", "COMPLETED"] and rows[0].id != rows[1].id


async def test_a_one_time_task_rescheduled_during_its_lead_counts_its_run(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await dev_env.get_current_time()
    task = spec(schedule_type="once", run_at=now + timedelta(seconds=14))
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(lead_seconds=10)) as worker:
        task_id = await _start_ahead(dev_env, worker.task_queue, task)
        await _dispatched(dev_env, task_id)
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        await handle.execute_update(TaskWorkflow.update_task,
                                    TaskChanges(run_at=now + timedelta(seconds=16)))
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.run_count == 1
    rows = executions(sqlite_engine, task_id)
    assert [(r.status, r.reason) for r in rows] == [("SKIPPED", "rescheduled"), ("COMPLETED", None)]


async def test_jitter_larger_than_the_interval_runs_every_fire_in_order(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=2, jitter_seconds=30, max_runs=10)
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert statuses(rows) == ["COMPLETED"] * 10
    starts = [r.started_at for r in rows]
    assert all(a is not None and b is not None and a < b for a, b in zip(starts, starts[1:], strict=False))


async def test_a_bounds_only_update_withdraws_a_run_past_the_new_end_date(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await dev_env.get_current_time()
    task = spec(schedule_type="interval", interval_seconds=14)
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(lead_seconds=10)) as worker:
        task_id = await _start_ahead(dev_env, worker.task_queue, task)
        await _dispatched(dev_env, task_id)
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        await handle.execute_update(TaskWorkflow.update_task,
                                    TaskChanges(end_date=now + timedelta(seconds=10)))
        final = await handle.result()
    assert final.status is TaskStatus.COMPLETED and final.run_count == 0
    assert [r for r in executions(sqlite_engine, task_id) if r.status == "COMPLETED"] == []


async def test_the_run_count_is_the_runs_that_ended(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Sleeping(1.5)
    task = spec(schedule_type="interval", interval_seconds=1, max_runs=4, job_details=handler_job("slow"))
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"slow": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert final.run_count == len([r for r in rows if r.status != "SKIPPED"]) == 4
    assert final.skipped_count == len([r for r in rows if r.status == "SKIPPED"])


class FailsFirst:
    """A handler that fails the first attempts of chosen runs: ``{ordinal: failing attempts}``,
    runs numbered from 1 in the order they first call; counts every call per run."""

    def __init__(self, failures: dict[int, int]) -> None:
        self.failures = failures
        self.calls: Counter[str] = Counter()

    async def __call__(self, ctx: HandlerContext) -> None:
        self.calls[ctx.execution_id] += 1
        ordinal = list(self.calls).index(ctx.execution_id) + 1
        if self.calls[ctx.execution_id] <= self.failures.get(ordinal, 0):
            raise RuntimeError(f"attempt {self.calls[ctx.execution_id]} of run {ordinal} fails")


async def test_a_retrying_run_skips_the_fires_due_meanwhile_under_overlap_skip(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = FailsFirst({1: 2})  # the first run retries twice, 100 s apart: three fires come due
    task = spec(schedule_type="interval", interval_seconds=60, overlap_policy="skip", max_runs=2,
                job_details=handler_job("flaky"),
                retry_policy={"max_attempts": 3, "initial_interval_seconds": 100.0,
                              "backoff_coefficient": 1.0})
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"flaky": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.status, r.reason) for r in rows] == (
        [("COMPLETED", None)] + [("SKIPPED", "overlap")] * 3 + [("COMPLETED", None)])
    assert [r.attempts for r in rows if r.status == "COMPLETED"] == [3, 1]
    assert list(job.calls.values()) == [3, 1]


async def test_a_retry_runs_again_only_its_own_run(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = FailsFirst({2: 1})
    task = spec(schedule_type="interval", interval_seconds=60, overlap_policy="allow", max_runs=3,
                job_details=handler_job("flaky"),
                retry_policy={"max_attempts": 3, "initial_interval_seconds": 10.0})
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"flaky": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    assert statuses(rows) == ["COMPLETED"] * 3
    assert [job.calls[r.id] for r in rows] == [1, 2, 1] == [r.attempts for r in rows]


async def test_continue_as_new_does_not_wait_for_a_webhook_delivery(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    # Every run fails and tells a webhook that takes 5 s to answer: a delivery is always
    # pending when the short history asks the task to continue as new.
    task = spec(schedule_type="interval", interval_seconds=2, max_runs=5,
                job_details=handler_job("failing"), retry_policy={"max_attempts": 1},
                notify={"url": target.url("/slow/5"), "events": ["failed"]})
    async with (
        new_worker(dev_env.client, sqlite_engine, handlers={"failing": Failing()},
                   run_options=RunOptions(history_limit=40)) as worker,
        running_task(dev_env, worker.task_queue, task) as handle,
    ):
        final = await handle.result()
        first_run = dev_env.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
        history = await first_run.fetch_history()
    last = history.events[-1]
    assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    carried = dev_env.client.data_converter.payload_converter.from_payload(
        last.workflow_execution_continued_as_new_event_attributes.input.payloads[0],
        TaskWorkflowInput)
    assert carried.state is not None and carried.state.notifications, "it continued with a delivery pending"
    assert final.status is TaskStatus.COMPLETED and final.continued_as_new >= 1
    rows = executions(sqlite_engine, final.task_id)
    assert [(r.status, r.trigger) for r in rows] == [("FAILED", "schedule")] * 5
    told = {r.json()["execution_id"] for r in target.received}
    assert told == {r.id for r in rows}, "every failure was told, across the continue-as-new"


async def test_every_task_row_write_is_the_workflows_versioned_write(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    written: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if re.match(r"\s*(INSERT INTO|UPDATE) task\b", statement, re.IGNORECASE):
            written.append(statement)

    event.listen(sqlite_engine, "before_cursor_execute", seen)
    job = Sleeping(1.0)
    task = spec(schedule_type="interval", interval_seconds=3600, job_details=handler_job("slow"))
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"slow": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await handle.signal(TaskWorkflow.trigger_signal)

        async def done() -> bool:
            return (await task_state(handle)).success_count == 1

        await until(done)
        state = await task_state(handle)
    assert job.runs and written, "the run ran and the task row was written"
    # The jobs worker's run wrote none of them: each is the workflow's upsert, which changes
    # the row only for a version at least the row's own.
    versioned = re.compile(r"ON CONFLICT.*DO UPDATE.*WHERE.*excluded\.state_version >= task\.state_version",
                           re.IGNORECASE | re.DOTALL)
    assert all(versioned.search(statement) for statement in written), written
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and row.status == "PENDING" and row.last_run_status == "COMPLETED"


async def test_a_pause_signal_during_a_run_is_saved_in_the_task_row(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = Blocker()
    task = spec(schedule_type="interval", interval_seconds=3600, job_details=handler_job("block"))
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"block": job}) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await handle.signal(TaskWorkflow.trigger_signal)
        await asyncio.wait_for(job.started.wait(), 30)
        await handle.signal(TaskWorkflow.pause_signal, "ops")
        task_id = (await task_state(handle)).task_id

        async def saved() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "PAUSED"

        await until(saved)
        state = await task_state(handle)
        # The pause stops new runs; the run going on is left to finish.
        assert not job.cancelled.is_set() and state.running
    assert state.paused and state.status is TaskStatus.PAUSED


async def test_under_catchup_fires_due_while_catching_up_run_oldest_first_and_none_overlaps(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Fires missed while no worker ran; their catch-up runs take 1.5 s each, and the fires
    # that come due meanwhile wait behind them. Only the newest due fire can be on time: one
    # that waited while a newer came due is missed, and catch-up runs it in its turn. Every
    # fire runs, oldest first, and none is skipped as overlapping a catch-up. On the dev
    # server: the time-skipping server strands a workflow whose task cancels a timer that
    # fired meanwhile (temporalio/sdk-java#3088), which a start report arriving at a fire does.
    job = Sleeping(1.5, slow_runs=4)
    task = spec(schedule_type="interval", interval_seconds=2, missed_run_policy="catchup",
                job_details=handler_job("slow"), max_runs=10)
    async with stoppable_worker(dev_env, sqlite_engine, f"tq-{uuid.uuid4()}") as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        queue = worker.task_queue
    await asyncio.sleep(11)
    async with new_worker(dev_env.client, sqlite_engine, task_queue=queue,
                          handlers={"slow": job}, max_cached_workflows=0):
        final = await handle.result()
    rows = executions(sqlite_engine, final.task_id)
    ran = [r for r in rows if r.status == "COMPLETED"]
    for row in rows:
        if row.status != "COMPLETED":
            # Only a fire that came due while the run before it was going meets the overlap
            # policy (a run started from the queue just before it).
            before = max((r for r in ran if r.scheduled_at < row.scheduled_at),
                         key=lambda r: r.scheduled_at)
            assert (row.status, row.reason) == ("SKIPPED", "overlap"), row
            assert before.finished_at is not None and before.finished_at > row.scheduled_at, row
    caught_up = [r for r in rows if r.trigger == "catchup"]
    assert len(caught_up) >= 5 and rows[: len(caught_up)] == caught_up
    starts = [r.started_at for r in ran]
    assert all(s is not None for s in starts) and starts == sorted(starts), "oldest first"
    assert all(r.trigger == "schedule" for r in rows[len(caught_up):])
