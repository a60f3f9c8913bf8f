"""The self-healing breaker through the real workers: an auto-paused task probes after its
cool-down, a failing probe doubles it, a passing one resumes the task; a user's resume or
cancel ends the cool-down. And what a resume does with the fires of the pause."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.spec import TaskChanges, TaskSpec
from scheduling.status import ResumeMissed, TaskStatus, Trigger, execution_id
from store.events import list_events
from store.models import Task
from store.tasks import read_task
from tests.conftest import new_worker
from tests.target import TargetServer
from tests.workflows.helpers import (
    FailsOnCancel,
    Flaky,
    TaskHandle,
    executions,
    handler_job,
    running_task,
    spec,
    start_task,
    task_state,
)
from workflows.state import TaskState
from workflows.task import TaskWorkflow

MINUTE = timedelta(minutes=1)
EVENTS = ["auto_paused", "probe_failed", "auto_resumed"]


async def until(handle: TaskHandle, check: Callable[[TaskState], bool], timeout: float = 30) -> TaskState:
    """The task's state once ``check`` holds (polled in real time: the clock does not move)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = await task_state(handle)
        if check(state):
            return state
        assert asyncio.get_running_loop().time() < deadline, f"not reached: {state}"
        await asyncio.sleep(0.1)


def healing(target: TargetServer) -> TaskSpec:
    return spec(schedule_type="interval", interval_seconds=60, job_details=handler_job("flaky"),
                retry_policy={"max_attempts": 1}, max_consecutive_failures=2,
                auto_resume_after_seconds=300,
                notify={"url": target.url("/notify"), "events": EVENTS})


async def row_until(engine: Engine, task_id: str, check: Callable[[Task], bool]) -> Task:
    """The task's row once ``check`` holds (the workflow writes it behind its messages)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        row = read_task(engine, task_id, "t1")
        if row is not None and check(row):
            return row
        assert asyncio.get_running_loop().time() < deadline, f"not reached: {row}"
        await asyncio.sleep(0.1)


async def test_auto_paused_task_probes_doubles_the_cool_down_and_resumes(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    flaky = Flaky()
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"flaky": flaky}) as worker,
        running_task(time_env, worker.task_queue, healing(target)) as handle,
    ):
        await time_env.sleep(2 * MINUTE + timedelta(seconds=5))  # two runs fail: auto-paused
        paused = await until(handle, lambda s: s.paused and s.probe is not None)
        assert paused.probe is not None and paused.probe.cool_down_seconds == 300
        first_probe = paused.probe.at
        await row_until(sqlite_engine, paused.task_id,
                        lambda r: r.status == "PAUSED" and r.next_probe_at == first_probe)
        assert "probe run at" in (paused.status_reason or "")

        await time_env.sleep(first_probe - await time_env.get_current_time() + timedelta(seconds=5))
        again = await until(handle, lambda s: s.probe is not None and s.probe.at != first_probe)
        assert again.paused and again.status is TaskStatus.PAUSED
        assert again.probe is not None and again.probe.cool_down_seconds == 600
        assert flaky.calls == 3

        flaky.failing = False
        await time_env.sleep(again.probe.at - await time_env.get_current_time() + timedelta(seconds=5))
        resumed = await until(handle, lambda s: not s.paused)
        assert resumed.probe is None and resumed.consecutive_failures == 0
        await time_env.sleep(2 * MINUTE)  # the schedule runs again
        await until(handle, lambda s: s.success_count >= 2)
        await row_until(sqlite_engine, resumed.task_id,
                        lambda r: r.next_probe_at is None and r.status_reason is None)

    rows = executions(sqlite_engine, resumed.task_id)
    ran = [(r.trigger, r.status) for r in rows if r.status != "SKIPPED"]
    assert ran[:4] == [("schedule", "FAILED"), ("schedule", "FAILED"), ("probe", "FAILED"),
                       ("probe", "COMPLETED")]
    assert ("schedule", "COMPLETED") in ran[4:]
    assert {r.reason for r in rows if r.status == "SKIPPED"} == {"paused"}  # the cool-down's fires
    probes = [r for r in rows if r.trigger == "probe"]
    assert probes[0].id == execution_id(resumed.task_id, first_probe, Trigger.PROBE)
    assert [p.dead_letter for p in probes] == [None, None]  # the breaker tries again instead
    await target.wait_for(3)
    notes = [r.json() for r in target.received if r.path == "/notify"]
    assert [n["event"] for n in notes] == ["auto_paused", "probe_failed", "auto_resumed"]
    assert "cool-down 600 s" in notes[1]["detail"]


async def test_a_user_resume_or_cancel_ends_the_cool_down(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    flaky = Flaky()
    async with new_worker(time_env.client, sqlite_engine, handlers={"flaky": flaky}) as worker:
        async with running_task(time_env, worker.task_queue, healing(target)) as handle:
            await time_env.sleep(2 * MINUTE + timedelta(seconds=5))
            await until(handle, lambda s: s.probe is not None)
            resumed = await handle.execute_update(TaskWorkflow.resume_update)
            assert not resumed.paused and resumed.probe is None
            await handle.execute_update(TaskWorkflow.pause_update, "by hand")
            await time_env.sleep(10 * MINUTE)  # a user's pause is no breaker's: no probe
            assert (await task_state(handle)).probe is None
            calls = flaky.calls
        async with running_task(time_env, worker.task_queue, healing(target)) as handle:
            await time_env.sleep(2 * MINUTE + timedelta(seconds=5))
            await until(handle, lambda s: s.probe is not None)
            cancelled = await handle.execute_update(TaskWorkflow.cancel_update, "enough")
            assert cancelled.probe is None
            await handle.result()
    assert calls == 2  # no probe ran in the first task
    probes = [r for r in executions(sqlite_engine, cancelled.task_id) if r.trigger == "probe"]
    assert probes == []


async def _paused_ten_minutes(time_env: WorkflowEnvironment, handle: TaskHandle) -> None:
    await time_env.sleep(timedelta(seconds=30))
    await handle.execute_update(TaskWorkflow.pause_update, "hold")
    await time_env.sleep(10 * MINUTE)


async def test_resume_skip_records_the_pause_fires_skipped_paused(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup")
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await _paused_ten_minutes(time_env, handle)
        await handle.execute_update(TaskWorkflow.resume_update, ResumeMissed.SKIP)
        state = await until(handle, lambda s: s.skipped_count >= 10)
    rows = executions(sqlite_engine, state.task_id)
    assert [(r.status, r.reason) for r in rows][:10] == [("SKIPPED", "paused")] * 10


async def test_resume_policy_lets_the_missed_run_policy_catch_up(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60, missed_run_policy="catchup")
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await _paused_ten_minutes(time_env, handle)
        await handle.execute_update(TaskWorkflow.resume_update, ResumeMissed.POLICY)
        state = await until(handle, lambda s: s.success_count >= 10)
    rows = executions(sqlite_engine, state.task_id)
    assert [r.reason for r in rows if r.status == "SKIPPED"] == []
    assert [r.status for r in rows[:10]] == ["COMPLETED"] * 10
    assert [r.trigger for r in rows[:9]] == ["catchup"] * 9


async def test_a_plain_resume_signal_keeps_working(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=60, missed_run_policy="single_catchup")
    async with (
        new_worker(time_env.client, sqlite_engine) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await _paused_ten_minutes(time_env, handle)
        await handle.signal("resume")  # no argument, as `temporal workflow signal` sends it
        state = await until(handle, lambda s: not s.paused and s.skipped_count >= 10)
        await handle.signal("pause", "again")
        await until(handle, lambda s: s.paused)
        await time_env.sleep(10 * MINUTE)
        await handle.signal("resume", "policy")
        state = await until(handle, lambda s: not s.paused and s.success_count >= 1)
    rows = executions(sqlite_engine, state.task_id)
    assert [r.reason for r in rows[:10]] == ["paused"] * 10
    assert "missed" in [r.reason for r in rows[10:]]


async def test_a_user_pause_or_self_healing_off_ends_the_cool_down(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    flaky = Flaky()
    async with new_worker(time_env.client, sqlite_engine, handlers={"flaky": flaky}) as worker:
        async with running_task(time_env, worker.task_queue, healing(target)) as handle:
            await time_env.sleep(2 * MINUTE + timedelta(seconds=5))  # auto-paused
            await until(handle, lambda s: s.probe is not None)
            off = await handle.execute_update(TaskWorkflow.update_task,
                                              TaskChanges(auto_resume_after_seconds=None))
            assert off.paused and off.probe is None and "probe" not in (off.status_reason or "")
            await handle.execute_update(TaskWorkflow.pause_update, args=["by hand", "k1"])
            await time_env.sleep(10 * MINUTE)
            state = await until(handle, lambda s: s.paused)
            # Paused already and no probe to end: the pause changes nothing.
            assert state.probe is None and state.status_reason == off.status_reason
            first = state.task_id
        async with running_task(time_env, worker.task_queue, healing(target)) as handle:
            await time_env.sleep(2 * MINUTE + timedelta(seconds=5))
            await until(handle, lambda s: s.probe is not None)
            paused = await handle.execute_update(TaskWorkflow.pause_update, args=["mine", "k1"])
            assert paused.paused and paused.probe is None and paused.status_reason == "mine"
            await time_env.sleep(10 * MINUTE)
            assert (await task_state(handle)).probe is None
            await row_until(sqlite_engine, paused.task_id,
                            lambda r: r.next_probe_at is None and r.status_reason == "mine")
    assert flaky.calls == 4  # two failed runs per task, and no probe
    for task_id in (first, paused.task_id):
        assert [r for r in executions(sqlite_engine, task_id) if r.trigger == "probe"] == []
    events, _ = list_events(sqlite_engine, task_id=paused.task_id, tenant_id="t1", limit=50)
    assert [(e.action, e.actor, e.detail) for e in events if e.action == "pause"][:1] == [
        ("pause", "k1", {"reason": "mine"})]


async def test_a_new_cool_down_moves_the_planned_probe(
    time_env: WorkflowEnvironment, sqlite_engine: Engine, target: TargetServer
) -> None:
    async with (
        new_worker(time_env.client, sqlite_engine, handlers={"flaky": Flaky()}) as worker,
        running_task(time_env, worker.task_queue, healing(target)) as handle,
    ):
        await time_env.sleep(2 * MINUTE + timedelta(seconds=5))
        paused = await until(handle, lambda s: s.probe is not None)
        assert paused.probe is not None
        moved = await handle.execute_update(TaskWorkflow.update_task,
                                            TaskChanges(auto_resume_after_seconds=120))
        assert moved.probe is not None and moved.probe.cool_down_seconds == 120
        assert moved.probe.at == paused.probe.at - timedelta(seconds=180)
        assert (moved.status_reason or "").endswith("(cool-down 120 s)")
        assert (moved.status_reason or "").count("probe run at") == 1


async def test_a_run_that_fails_as_its_task_is_cancelled_trips_no_breaker(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    job = FailsOnCancel()
    task = spec(schedule_type="interval", interval_seconds=60, job_details=handler_job("fails"),
                retry_policy={"max_attempts": 1}, max_consecutive_failures=1,
                auto_resume_after_seconds=300, heartbeat_timeout_seconds=2)
    async with new_worker(time_env.client, sqlite_engine, handlers={"fails": job}) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(seconds=61))
        await asyncio.wait_for(job.started.wait(), 30)
        await handle.signal(TaskWorkflow.cancel_signal, "no longer needed")
        final = await handle.result()
    events, _ = list_events(sqlite_engine, task_id=final.task_id, tenant_id="t1", limit=50)
    assert (final.status, final.status_reason, final.failure_count, final.probe) == (
        TaskStatus.CANCELLED, "no longer needed", 1, None)
    assert [e.action for e in reversed(events)] == ["create", "cancel"]
