"""Bookkeeping activities: the workflow's view of a task and its runs, written to the database."""

from __future__ import annotations

import structlog
from sqlalchemy import Engine
from temporalio import activity

from activities.contracts import RECORD_RUN, SAVE_EXECUTION, SAVE_TASK, RunRecord
from store.batch import BatchWriter
from store.records import ExecutionRecord, TaskSnapshot
from store.tasks import write_run, write_snapshot

log = structlog.get_logger("task_scheduler.bookkeeping")


class BookkeepingActivities:
    """Row writers run as local activities; failures retry until the database is back.

    Writes from many workflows are committed together by the batch writer."""

    def __init__(self, engine: Engine, writer: BatchWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer or BatchWriter(engine)

    @activity.defn(name=SAVE_TASK)
    async def save_task(self, snapshot: TaskSnapshot) -> None:
        """Upsert the task row (older snapshots never overwrite newer ones)."""
        await self._writer.submit(write_snapshot(self._engine, snapshot))
        _log_task_state(snapshot)

    @activity.defn(name=SAVE_EXECUTION)
    async def save_execution(self, record: ExecutionRecord) -> None:
        """Upsert one execution row by its id (a retry or replay records it once)."""
        await self._writer.submit(write_run(self._engine, record, None))
        log_execution(record)

    @activity.defn(name=RECORD_RUN)
    async def record_run(self, run: RunRecord) -> None:
        """A finished run's row and the task row after it, in one transaction."""
        await self._writer.submit(write_run(self._engine, run.execution, run.snapshot))
        if run.snapshot is not None:
            _log_task_state(run.snapshot)
        log_execution(run.execution)


def _log_task_state(snapshot: TaskSnapshot) -> None:
    log.info(
        "task.state",
        task_id=snapshot.task_id,
        workflow_id=f"task-{snapshot.task_id}",
        tenant=snapshot.tenant_id,
        status=snapshot.status,
        next_run_at=snapshot.next_run_at.isoformat() if snapshot.next_run_at else None,
        version=snapshot.state_version,
    )


def log_execution(record: ExecutionRecord) -> None:
    """The structured log line of an execution row being written."""
    log.info(
        "execution.state",
        task_id=record.task_id,
        workflow_id=f"task-{record.task_id}",
        execution_id=record.id,
        tenant=record.tenant_id,
        status=record.status,
        reason=record.reason,
        attempt=record.attempts,
        lateness_ms=record.lateness_ms,
    )
