"""Bookkeeping activities: the workflow's view of a task and its runs, written to the database."""

from __future__ import annotations

import structlog
from sqlalchemy import Engine
from temporalio import activity

from activities.payloads import RECORD, Record
from scheduling.status import workflow_id
from store.batch import BatchWriter
from store.events import with_events
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import write_record

log = structlog.get_logger("task_scheduler.bookkeeping")


class BookkeepingActivities:
    """Row writers run as local activities; failures retry until the database is back.

    Writes from many workflows are committed together by the batch writer."""

    def __init__(self, engine: Engine, writer: BatchWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer or BatchWriter(engine)

    @activity.defn(name=RECORD)
    async def record(self, record: Record) -> None:
        """Upsert execution rows by id and the task row (an older snapshot never overwrites a
        newer one) and append the task's events, in one transaction: a retried write records
        each run and each event once."""
        await self._writer.submit(with_events(
            write_record(self._engine, record.executions, record.snapshot), record.events))
        if record.snapshot is not None:
            _log_task_state(record.snapshot)
        for execution in record.executions:
            log_execution(execution)


def _log_task_state(snapshot: TaskSnapshot) -> None:
    log.info(
        "task.state",
        task_id=snapshot.task_id,
        workflow_id=workflow_id(snapshot.task_id),
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
        workflow_id=workflow_id(record.task_id),
        execution_id=record.id,
        tenant=record.tenant_id,
        status=record.status,
        reason=record.reason,
        attempt=record.attempts,
        lateness_ms=record.lateness_ms,
    )
