"""The reconciler repairs rows without workflows and workflows without rows."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, update
from sqlmodel import col
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from scheduling.status import workflow_id
from store.events import list_events
from store.models import ExecutionRecord, Task, TaskSnapshot
from store.tasks import list_executions, read_task, save_snapshot
from store.upcoming import tasks_due_in_second
from tests.conftest import new_worker
from tests.store.writes import workflow_rows
from tests.workflows.helpers import spec, start_task, until
from worker.reconcile import Reconciler
from workflows.task import TaskWorkflow


async def test_row_without_workflow_is_restarted_and_runs(dev_env: WorkflowEnvironment, sqlite_engine: Engine) -> None:
    now = datetime.now(UTC)
    task_spec = spec(schedule_type="once", run_at=now + timedelta(seconds=2))
    task_id = uuid.uuid4().hex
    # The row exists, the workflow does not (its start was lost).
    save_snapshot(sqlite_engine, TaskSnapshot(
        task_id=task_id, tenant_id="t1", name=task_spec.task_name, schedule_type="once",
        spec=task_spec.model_dump(mode="json"), status="PENDING", next_run_at=task_spec.run_at,
        created_at=now - timedelta(minutes=5), updated_at=now - timedelta(minutes=5),
    ))
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        report = await reconciler.reconcile_once()
        assert task_id in report.restarted

        async def done() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "COMPLETED"

        await until(done)
        runs, _ = list_executions(sqlite_engine, task_id=task_id, limit=5)
        assert [r.status for r in runs] == ["COMPLETED"]
        again = await reconciler.reconcile_once()  # idempotent: nothing left to repair
        assert task_id not in again.restarted and task_id not in again.marked
    events, _ = list_events(sqlite_engine, task_id=task_id, tenant_id="t1", limit=10)
    assert [(e.action, e.actor) for e in events] == [("restart", "reconciler")]


async def test_a_restarted_task_joins_the_herd_due_in_its_next_runs_second(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = datetime.now(UTC)
    herd = (now + timedelta(hours=2)).replace(microsecond=0)
    created = now - timedelta(minutes=5)
    ids = [uuid.uuid4().hex for _ in range(3)]
    for n, task_id in enumerate(ids):  # three rows due in one second, their workflows lost
        task_spec = spec(schedule_type="once", run_at=herd + timedelta(milliseconds=300 * n))
        save_snapshot(sqlite_engine, TaskSnapshot(
            task_id=task_id, tenant_id=f"t{n}", name=task_spec.task_name, schedule_type="once",
            spec=task_spec.model_dump(mode="json"), status="PENDING", next_run_at=task_spec.run_at,
            created_at=created, updated_at=created,
        ))
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        report = await reconciler.reconcile_once()
        assert set(ids) <= set(report.restarted)
        for task_id in ids:
            handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
            # Each counts the others due in that second (not itself), as a create would.
            assert (await handle.query(TaskWorkflow.query_state)).crowd == 2
            await handle.terminate("test over")


async def test_terminated_workflow_marks_row_and_lost_row_is_rewritten(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        terminated = await start_task(dev_env, worker.task_queue, spec(schedule_type="interval", interval_seconds=3600))
        orphan = await start_task(dev_env, worker.task_queue, spec(schedule_type="interval", interval_seconds=7200, task_name="orphan"))
        ids = [h.id.removeprefix("task-") for h in (terminated, orphan)]

        async def rows_written() -> bool:
            return all(read_task(sqlite_engine, i, "t1") is not None for i in ids)

        await until(rows_written)
        due = read_task(sqlite_engine, ids[0], "t1")
        assert due is not None and due.next_run_at is not None
        await terminated.terminate("operator cleanup")
        assert (await terminated.describe()).status is WorkflowExecutionStatus.TERMINATED
        with sqlite_engine.begin() as connection:  # the orphan's row is lost (e.g. a DB restore)
            connection.execute(delete(Task).where(Task.id == ids[1]))
        # the rows must look older than the grace period for the reconciler to touch them
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        await asyncio.sleep(1.1)
        report = await reconciler.reconcile_once()
    assert ids[0] in report.marked
    marked = read_task(sqlite_engine, ids[0], "t1")
    assert marked is not None and marked.status == "CANCELLED" and "terminated" in (marked.status_reason or "")
    # It will not run: it shows no next run, and a herd due then does not count it.
    assert marked.next_run_at is None and tasks_due_in_second(sqlite_engine, due.next_run_at) == 0
    events, _ = list_events(sqlite_engine, task_id=ids[0], tenant_id="t1", limit=10)
    assert [(e.action, e.actor) for e in events] == [("marked", "reconciler"), ("create", "temporal signal")]
    assert events[0].detail == {"status": "CANCELLED", "reason": "workflow terminated in Temporal"}
    assert ids[1] in report.rows_written
    rewritten = read_task(sqlite_engine, ids[1], "t1")
    assert rewritten is not None and rewritten.name == "orphan" and rewritten.status == "PENDING"
    assert rewritten.next_run_at is not None


async def test_passes_after_the_first_list_only_workflows_closed_since(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        handles = [
            await start_task(dev_env, worker.task_queue, spec(schedule_type="interval", interval_seconds=3600))
            for _ in range(3)
        ]
        ids = [h.id.removeprefix("task-") for h in handles]

        async def rows_written() -> bool:
            return all(read_task(sqlite_engine, i, "t1") is not None for i in ids)

        await until(rows_written)
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        first = await reconciler.reconcile_once()
        assert first.full and not (first.restarted or first.marked or first.rows_written)

        await handles[0].terminate("operator cleanup")
        passes = []

        async def repaired() -> bool:
            passes.append(await reconciler.reconcile_once())
            return ids[0] in passes[-1].marked

        await until(repaired)
        # The pass that repaired it read one workflow from visibility, not the three running.
        assert not any(p.full for p in passes)
        assert passes[-1].listed == 1
        marked = read_task(sqlite_engine, ids[0], "t1")
        assert marked is not None and marked.status == "CANCELLED"
        again = await reconciler.reconcile_once()  # still listed, but its row is no longer active
        assert not again.full and again.listed == 1 and not again.marked
        assert [read_task(sqlite_engine, i, "t1").status for i in ids[1:]] == ["PENDING", "PENDING"]  # type: ignore[union-attr]

        every_pass_full = Reconciler(sqlite_engine, dev_env.client, worker.task_queue,
                                     grace=timedelta(0), full_every=timedelta(0))
        await every_pass_full.reconcile_once()
        later = await every_pass_full.reconcile_once()
        assert later.full and later.listed == 3  # the two running, and the one closed since




async def test_a_restarted_paused_task_stays_paused_and_counts_only_its_scheduled_runs(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = datetime.now(UTC)
    created = now - timedelta(minutes=5)
    task_spec = spec(schedule_type="interval", interval_seconds=1, max_runs=3)
    task_id = uuid.uuid4().hex
    save_snapshot(sqlite_engine, TaskSnapshot(
        task_id=task_id, tenant_id="t1", name=task_spec.task_name, schedule_type="interval",
        spec=task_spec.model_dump(mode="json"), status="PAUSED", status_reason="maintenance",
        created_at=created, updated_at=created, success_count=5, run_count=5,
    ))
    # Two runs of the schedule and three manual ones ran before the workflow was lost.
    for n, trigger in enumerate(["schedule", "manual", "schedule", "manual", "manual"]):
        at = created + timedelta(seconds=n)
        run_id = f"{task_id}:{'manual-' if trigger == 'manual' else ''}{at.isoformat()}"
        workflow_rows(sqlite_engine, ExecutionRecord(
            id=run_id, task_id=task_id, tenant_id="t1", scheduled_at=at, trigger=trigger,
            status="COMPLETED", started_at=at, finished_at=at))
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        assert task_id in (await reconciler.reconcile_once()).restarted
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        state = await handle.query(TaskWorkflow.query_state)
        assert state.paused and state.status == "PAUSED" and state.status_reason == "maintenance"
        assert state.executed == 2
        await handle.execute_update(TaskWorkflow.resume_update)
        final = await handle.result()
    assert final.status == "COMPLETED"
    runs, _ = list_executions(sqlite_engine, task_id=task_id, limit=20)
    ran = [r for r in runs if r.trigger == "schedule" and r.status == "COMPLETED"]
    assert len(ran) == 3  # max_runs: one more scheduled run, the manual ones not counted


async def test_a_terminate_while_no_reconciler_ran_is_caught_for_a_task_of_any_age(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        handle = await start_task(dev_env, worker.task_queue, spec(schedule_type="interval", interval_seconds=3600))
        task_id = handle.id.removeprefix("task-")

        async def row_written() -> bool:
            return read_task(sqlite_engine, task_id, "t1") is not None

        await until(row_written)
        with sqlite_engine.begin() as connection:  # created two days ago: outside the window
            connection.execute(update(Task).where(col(Task.id) == task_id).values(
                created_at=datetime.now(UTC) - timedelta(days=2)))
        await handle.terminate("operator cleanup")  # while no reconciler runs

        async def listed_closed() -> bool:
            query = f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Terminated'"
            return (await dev_env.client.count_workflows(query)).count == 1

        await until(listed_closed)
        # The worker comes back: its reconciler's first pass catches it (before, only passes
        # after the first looked at closes, and only at those since a minute before it).
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        first = await reconciler.reconcile_once()
        assert first.full and first.marked == [task_id]
    row = read_task(sqlite_engine, task_id, "t1")
    assert row is not None and row.status == "CANCELLED"


async def test_a_row_the_reconciler_cannot_read_stops_no_other_repair(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = datetime.now(UTC)
    task_spec = spec(schedule_type="interval", interval_seconds=3600)
    ids = sorted(uuid.uuid4().hex for _ in range(2))  # repaired in this order
    for task_id in ids:  # rows whose workflows were lost
        save_snapshot(sqlite_engine, TaskSnapshot(
            task_id=task_id, tenant_id="t1", name=task_spec.task_name, schedule_type="interval",
            spec=task_spec.model_dump(mode="json"), status="PENDING", next_run_at=now + timedelta(hours=1),
            created_at=now - timedelta(minutes=5), updated_at=now - timedelta(minutes=5),
        ))
    # The first row's spec is one this release cannot read: restarting it fails.
    with sqlite_engine.begin() as connection:
        connection.execute(update(Task).where(col(Task.id) == ids[0]).values(spec={"bogus": True}))
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        report = await reconciler.reconcile_once()
        assert report.full and report.restarted == [ids[1]]
        restarted = dev_env.client.get_workflow_handle(workflow_id(ids[1]))
        assert (await restarted.describe()).status is WorkflowExecutionStatus.RUNNING
        # The next pass (no full one) tries the failed repair again: mended meanwhile, it goes.
        with sqlite_engine.begin() as connection:
            connection.execute(update(Task).where(col(Task.id) == ids[0]).values(
                spec=task_spec.model_dump(mode="json")))
        again = await reconciler.reconcile_once()
        assert not again.full and again.restarted == [ids[0]]
        for task_id in ids:
            await dev_env.client.get_workflow_handle(workflow_id(task_id)).terminate("done")


async def test_a_task_started_again_while_the_reconciler_looks_is_not_marked_ended(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its workflow was terminated; a new run of it starts and writes its row between the
    # reconciler's describe (TERMINATED) and its mark: the live task keeps its row.
    task_spec = spec(schedule_type="interval", interval_seconds=3600)
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        first = await start_task(dev_env, worker.task_queue, task_spec)
        task_id = first.id.removeprefix("task-")

        async def written(after: datetime | None = None) -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "PENDING" and (after is None or row.updated_at != after)

        await until(written)
        await first.terminate("operator")
        described_as = WorkflowHandle.describe

        async def describe_then_start_again(self: WorkflowHandle[Any, Any], *args: Any, **kwargs: Any) -> Any:
            described = await described_as(self, *args, **kwargs)
            if described.status is WorkflowExecutionStatus.TERMINATED:
                row = read_task(sqlite_engine, task_id, "t1")
                assert row is not None
                await start_task(dev_env, worker.task_queue, task_spec, task_id=task_id)
                await until(lambda: written(row.updated_at))
            return described

        monkeypatch.setattr(WorkflowHandle, "describe", describe_then_start_again)
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        report = await reconciler.reconcile_once()
        monkeypatch.setattr(WorkflowHandle, "describe", described_as)
        live = await dev_env.client.get_workflow_handle(first.id).describe()
        row = read_task(sqlite_engine, task_id, "t1")
        await dev_env.client.get_workflow_handle(first.id).terminate("test over")
    assert live.status is WorkflowExecutionStatus.RUNNING
    assert task_id not in report.marked and row is not None and row.status == "PENDING", report
