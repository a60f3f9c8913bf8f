"""Continue-as-new carries the whole state: counts, schedule anchor, next fire, spec, pause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from activities.options import RunOptions
from api.idempotency import request_id
from api.temporal import TemporalGateway
from scheduling.status import TaskStatus
from store.tasks import read_task
from tests.conftest import new_worker
from tests.workflows.helpers import executions, running_task, spec, start_task, statuses, task_state
from workflows.state import KEPT_UPDATE_IDS, TaskState, keyed, update_id
from workflows.task import TaskWorkflow


async def test_continue_as_new_preserves_counts_schedule_and_spec(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=600, max_runs=8, task_name="nightly")
    async with new_worker(time_env.client, sqlite_engine, run_options=RunOptions(history_limit=30)) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=45))
        midway = await task_state(handle)
        state = await handle.result()

    assert midway.continued_as_new > 0 and midway.run_count == 4
    assert midway.next_fire_at == midway.created_at + timedelta(minutes=50)
    assert state.continued_as_new > midway.continued_as_new
    assert state.status is TaskStatus.COMPLETED
    assert (state.run_count, state.success_count) == (8, 8)
    assert state.spec == task and state.created_at == midway.created_at
    rows = executions(sqlite_engine, state.task_id)
    # still on the grid anchored at creation, across every new run of the workflow
    assert [r.scheduled_at for r in rows] == [
        state.created_at + timedelta(minutes=10 * k) for k in range(1, 9)
    ]
    assert statuses(rows) == ["COMPLETED"] * 8
    row = read_task(sqlite_engine, state.task_id, "t1")
    assert row is not None and (row.status, row.run_count, row.success_count) == ("COMPLETED", 8, 8)


async def test_continue_as_new_keeps_a_task_paused(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=600)
    async with (
        new_worker(time_env.client, sqlite_engine, run_options=RunOptions(history_limit=30)) as worker,
        running_task(time_env, worker.task_queue, task) as handle,
    ):
        await time_env.sleep(timedelta(minutes=25))
        await handle.execute_update(TaskWorkflow.pause_update, "hold")
        generations = (await task_state(handle)).continued_as_new
        # each pause/resume pair wakes the workflow and grows its history
        for _ in range(6):
            await handle.execute_update(TaskWorkflow.resume_update)
            await handle.execute_update(TaskWorkflow.pause_update, "hold")
        await time_env.sleep(timedelta(hours=1))
        state = await task_state(handle)

    assert state.continued_as_new > generations
    assert state.paused and state.status is TaskStatus.PAUSED and state.status_reason == "hold"
    assert state.run_count == 2
    assert statuses(executions(sqlite_engine, state.task_id)) == ["COMPLETED", "COMPLETED"]


async def test_a_changed_history_limit_reaches_a_running_task_at_its_next_continue_as_new(
    time_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    task = spec(schedule_type="interval", interval_seconds=600, max_runs=30)
    options = RunOptions(history_limit=30)
    async with new_worker(time_env.client, sqlite_engine, run_options=options) as worker:
        handle = await start_task(time_env, worker.task_queue, task)
        await time_env.sleep(timedelta(minutes=45))
        before = await task_state(handle)
        options.history_limit = 10_000  # the worker's setting changes (as after a restart)
        state = await handle.result()

    # The workflow run going on keeps the limit it was given (and one that began while the
    # limit changed may have been given the old one too): it continues as new once more, the
    # run after it takes the new limit and goes to the end, where the old one would have
    # continued as new every few fires.
    assert before.continued_as_new > 0 and before.run_count < 10 and state.run_count == 30
    assert before.continued_as_new + 1 <= state.continued_as_new <= before.continued_as_new + 2


async def test_a_keyed_request_retried_after_a_continue_as_new_acts_once(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    # Temporal drops a repeated update id only within one workflow run: a trigger retried
    # under its Idempotency-Key (its first answer lost) after the task continued as new would
    # run the job again but for the ids the state carries. On the real server: it skips no
    # time, and it once hung on the time-skipping server, whose updates are less complete.
    task = spec(schedule_type="interval", interval_seconds=3600, task_name="hourly")
    async with new_worker(dev_env.client, sqlite_engine, run_options=RunOptions(history_limit=30)) as worker:
        handle = await start_task(dev_env, worker.task_queue, task)
        gateway = TemporalGateway(dev_env.client, worker.task_queue)
        task_id = (await task_state(handle)).task_id
        first = await gateway.trigger(task_id, "k1", request_id="aaaa1111")
        assert first.manual_runs == 1
        paused = await gateway.pause(task_id, "maintenance", "k1", request_id="bbbb2222")
        assert paused.paused
        await gateway.resume(task_id, actor="k1")
        others = 0
        while (await task_state(handle)).continued_as_new == 0:
            await gateway.trigger(task_id, "k2")  # fresh ids: each acts
            others += 1
            assert others < 30, "no continue-as-new"
        again = await gateway.trigger(task_id, "k1", request_id="aaaa1111")
        assert again.manual_runs == 1 + others
        assert not (await gateway.pause(task_id, "maintenance", "k1", request_id="bbbb2222")).paused
        state = await task_state(handle)
        assert (state.manual_runs, state.paused) == (1 + others, False)
        await handle.terminate("test over")
    manual = [r for r in executions(sqlite_engine, task_id) if r.trigger == "manual"]
    assert len(manual) == 1 + others


def test_the_kept_update_ids_are_the_keyed_and_latest() -> None:
    state = TaskState(task_id="t", tenant_id="t1", spec=spec(schedule_type="once", run_at=datetime.now(UTC)),
                      created_at=datetime.now(UTC), anchor=datetime.now(UTC))
    assert keyed(update_id("trigger_update", request_id("t1", "a-key-with-dashes")))
    assert not state.repeated_update(update_id("trigger_update", None))  # a fresh id
    assert state.applied_updates == []
    keyed_ids = [update_id("trigger_update", f"{n:032x}") for n in range(KEPT_UPDATE_IDS + 1)]
    assert not any(state.repeated_update(k) for k in keyed_ids)
    assert state.repeated_update(keyed_ids[-1]) and not state.repeated_update(keyed_ids[0])
    assert len(state.applied_updates) == KEPT_UPDATE_IDS
