"""Missed-run policies after a worker outage, and overlap policies with a slow job."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.policy import aimed_instant
from scheduling.status import TaskStatus, Trigger
from tests.conftest import new_worker
from tests.workflows.helpers import (
    SlowFirst,
    executions,
    handler_job,
    pass_time_without_worker,
    spec,
    start_task,
    stoppable_worker,
    task_state,
)

MINUTES = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            "catchup",
            [("COMPLETED", "catchup", None)] * 4,
        ),
        (
            "single_catchup",
            [("SKIPPED", "schedule", "missed")] * 3 + [("COMPLETED", "catchup", None)],
        ),
        (
            "skip",
            [("SKIPPED", "schedule", "missed")] * 4,
        ),
    ],
)
async def test_missed_runs_after_two_hours_of_downtime(
    time_env: WorkflowEnvironment,
    sqlite_engine: Engine,
    policy: str,
    expected: list[tuple[str, str, str | None]],
) -> None:
    queue = f"tq-{uuid.uuid4()}"
    task = spec(schedule_type="interval", interval_seconds=1800, missed_run_policy=policy)
    async with stoppable_worker(time_env, sqlite_engine, queue):
        handle = await start_task(time_env, queue, task)
        await time_env.sleep(10 * MINUTES)
        before = await task_state(handle)
    try:
        # the worker is down from +10 to +130 minutes: the fires at +30, +60, +90, +120 are missed
        assert before.next_fire_at is not None
        await pass_time_without_worker(time_env, handle, timedelta(hours=2), first_wake=before.next_fire_at)
        async with new_worker(time_env.client, sqlite_engine, task_queue=queue):
            await time_env.sleep(MINUTES)
            after = await task_state(handle)
    finally:
        await handle.terminate("test over")

    created = before.created_at
    rows = executions(sqlite_engine, before.task_id)
    assert [r.scheduled_at - created for r in rows] == [30 * k * MINUTES for k in (1, 2, 3, 4)]
    assert [(r.status, r.trigger, r.reason) for r in rows] == expected
    ran = [r for r in rows if r.status == "COMPLETED"]
    # each catch-up run is its own execution, run in order after the worker came back
    assert all(r.started_at is not None and r.started_at >= created + 130 * MINUTES for r in ran)
    assert [r.started_at for r in ran] == sorted(r.started_at for r in ran if r.started_at)
    # and the schedule goes on from where it is, not from where it was
    assert after.next_fire_at == created + 150 * MINUTES
    assert after.status is TaskStatus.PENDING and after.run_count == len(ran)


async def overlap_run(
    env: WorkflowEnvironment,
    engine: Engine,
    policy: str,
    handler: SlowFirst,
    max_runs: int,
    **extra: object,
) -> list[tuple[str, str | None]]:
    """Run an every-second task whose first job is slow; each execution's (status, reason)."""
    task = spec(
        schedule_type="interval",
        interval_seconds=1,
        overlap_policy=policy,
        max_runs=max_runs,
        job_details=handler_job("slow"),
        heartbeat_timeout_seconds=1,
        **extra,
    )
    async with new_worker(env.client, engine, handlers={"slow": handler}) as worker:
        handle = await start_task(env, worker.task_queue, task)
        state = await handle.result()
    assert state.status is TaskStatus.COMPLETED
    rows = executions(engine, state.task_id)
    assert [r.scheduled_at - state.created_at for r in rows] == [
        timedelta(seconds=k) for k in range(1, len(rows) + 1)
    ]
    return [(r.status, r.reason) for r in rows]


async def test_overlap_skip_records_the_fires_that_came_while_running(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # fires every second; the first job lasts 2.5 s, so the fires at 2 s and 3 s find it running
    rows = await overlap_run(time_env, sqlite_engine, "skip", SlowFirst(2.5), max_runs=2)
    assert rows == [
        ("COMPLETED", None),
        ("SKIPPED", "overlap"),
        ("SKIPPED", "overlap"),
        ("COMPLETED", None),
    ]


async def test_overlap_buffer_one_keeps_the_newest_waiting_fire(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    rows = await overlap_run(time_env, sqlite_engine, "buffer_one", SlowFirst(2.5), max_runs=3)
    assert rows == [
        ("COMPLETED", None),
        ("SKIPPED", "overlap"),  # replaced by the newer fire at 3 s
        ("COMPLETED", None),  # ran once the first job was done
        ("COMPLETED", None),
    ]


async def test_overlap_allow_runs_concurrently(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    handler = SlowFirst(2.5)
    rows = await overlap_run(time_env, sqlite_engine, "allow", handler, max_runs=3)
    assert rows == [("COMPLETED", None)] * 3
    assert len(handler.calls) == 3


async def test_overlap_cancel_running_cancels_the_old_run_for_the_new_one(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    handler = SlowFirst(0, until_cancelled=True)
    rows = await overlap_run(time_env, sqlite_engine, "cancel_running", handler, max_runs=2)
    assert rows == [("CANCELLED", None), ("COMPLETED", None)]
    assert handler.cancelled == handler.calls[:1]


async def test_a_one_time_task_in_the_past_that_asks_for_catch_up_runs_at_once(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = await time_env.get_current_time()
    run_at = now - timedelta(hours=2)
    task = spec(schedule_type="once", run_at=run_at, missed_run_policy="single_catchup")
    async with new_worker(time_env.client, sqlite_engine) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()

    assert state.status is TaskStatus.COMPLETED
    [run] = executions(sqlite_engine, state.task_id)
    assert (run.scheduled_at, run.status, run.trigger) == (run_at, "COMPLETED", "catchup")
    assert run.started_at is not None and run.started_at - state.created_at < timedelta(seconds=1)


async def test_a_skipped_fire_of_a_jittered_task_records_the_instant_it_aimed_at(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # The overdue check finds a fire decided by its row's instant (a jittered one, here).
    task = spec(schedule_type="interval", interval_seconds=1, jitter_seconds=0.4,
                overlap_policy="skip", max_runs=2, job_details=handler_job("slow"),
                heartbeat_timeout_seconds=1)
    async with new_worker(time_env.client, sqlite_engine, handlers={"slow": SlowFirst(2.5)}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        state = await handle.result()
    rows = executions(sqlite_engine, state.task_id)
    assert "SKIPPED" in {r.status for r in rows}
    for row in rows:
        aimed = aimed_instant(task, state.task_id, row.scheduled_at, Trigger.SCHEDULE)
        assert row.instant is not None and row.instant.astimezone(UTC) == aimed, row
        assert row.instant != row.scheduled_at  # jittered
