"""A task the reconciler restarts from its row keeps what the row knows of it: the breaker's
planned probe and the latest backfill (stopped, if it was running: the row keeps no instants)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from scheduling.status import workflow_id
from store.events import list_events
from store.models import TaskSnapshot
from store.tasks import list_executions, read_task, save_snapshot
from tests.conftest import new_worker
from tests.workflows.helpers import spec, until
from worker.reconcile import Reconciler
from workflows.task import TaskWorkflow


def _row(engine: Engine, task_id: str, now: datetime, **fields: object) -> None:
    task_spec = spec(schedule_type="interval", interval_seconds=3600, max_consecutive_failures=2,
                     auto_resume_after_seconds=300)
    created = now - timedelta(hours=2)
    save_snapshot(engine, TaskSnapshot.model_validate(dict(
        task_id=task_id, tenant_id="t1", name=task_spec.task_name, schedule_type="interval",
        spec=task_spec.model_dump(mode="json"), created_at=created, updated_at=created,
        **fields)))


async def test_a_restarted_auto_paused_task_keeps_its_probe_and_heals(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    probe_at = now + timedelta(seconds=3)
    told = probe_at.isoformat().replace("+00:00", "Z")
    task_id = uuid.uuid4().hex
    _row(sqlite_engine, task_id, now, status="PAUSED", next_probe_at=probe_at,
         status_reason=f"auto-paused after 2 consecutive failed runs "
                       f"(max_consecutive_failures=2); probe run at {told} (cool-down 600 s)",
         failure_count=3, run_count=3)
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        assert task_id in (await reconciler.reconcile_once()).restarted
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        state = await handle.query(TaskWorkflow.query_state)
        assert state.paused and state.probe is not None
        assert (state.probe.at, state.probe.cool_down_seconds) == (probe_at, 600)

        async def healed() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and row.status == "PENDING" and row.next_probe_at is None

        await until(healed)
        await handle.terminate("test over")
    runs, _ = list_executions(sqlite_engine, task_id=task_id, limit=5)
    assert [(r.trigger, r.status) for r in runs] == [("probe", "COMPLETED")]


async def test_a_restarted_task_records_its_running_backfill_stopped(
    dev_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    task_id = uuid.uuid4().hex
    backfill = {"mode": "all", "start": (now - timedelta(hours=2)).isoformat(),
                "end": now.isoformat(), "total": 5, "started": 2, "status": "running",
                "reason": None, "asked_at": now.isoformat(), "left": 3}
    _row(sqlite_engine, task_id, now, status="RUNNING", backfill=backfill)
    async with new_worker(dev_env.client, sqlite_engine) as worker:
        reconciler = Reconciler(sqlite_engine, dev_env.client, worker.task_queue, grace=timedelta(0))
        assert task_id in (await reconciler.reconcile_once()).restarted
        handle = dev_env.client.get_workflow_handle_for(TaskWorkflow.run, workflow_id(task_id))
        state = await handle.query(TaskWorkflow.query_state)
        assert state.backfill is not None
        assert (state.backfill.status, state.backfill.reason, state.backfill.started) == (
            "stopped", "restarted", 2)

        async def shown_stopped() -> bool:
            row = read_task(sqlite_engine, task_id, "t1")
            return row is not None and (row.backfill or {}).get("status") == "stopped"

        await until(shown_stopped)
        await handle.terminate("test over")
    events, _ = list_events(sqlite_engine, task_id=task_id, tenant_id="t1", limit=10)
    assert [(e.action, e.actor, e.detail) for e in reversed(events)] == [
        ("restart", "reconciler", {"reason": "restarted by the reconciler"}),
        ("backfill_stopped", "reconciler", {"reason": "restarted", "started": 2, "left": 3}),
    ]
