"""Bookkeeping activities: the workflow's view of a task and its runs, written to the database."""

from __future__ import annotations

import asyncio

import structlog
from sqlalchemy import Engine
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.execution_rows import completed_result
from activities.payloads import COMPLETED_ROW, RECORD, CompletedRun, Record, RowAsk
from scheduling.status import workflow_id
from store.batch import BatchWriter
from store.events import with_events
from store.models import ExecutionRecord, TaskSnapshot
from store.tasks import get_execution, write_record

log = structlog.get_logger("task_scheduler.bookkeeping")

# A write attempt gives up once the database has sat on one commit this long. The local
# activity holds its workflow task's commands (the runs it sends, the cancels) while it runs;
# given up, it retries on a workflow timer, which holds nothing (workflows/record.py).
WRITE_STALLED_AFTER = 2.0


class BookkeepingActivities:
    """Row writers run as local activities; failures retry until the database is back.

    Writes from many workflows are committed together by the batch writer."""

    def __init__(self, engine: Engine, writer: BatchWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer or BatchWriter(engine)
        # Each workflow run's write still waiting for the database, with what it writes.
        self._waiting: dict[str, tuple[Record, asyncio.Future[None]]] = {}

    @activity.defn(name=RECORD)
    async def record(self, record: Record) -> None:
        """Upsert execution rows by id and the task row (an older snapshot never overwrites a
        newer one) and append the task's events, in one transaction: a retried write records
        each run and each event once. Fails while the database sits on a commit
        (``WRITE_STALLED_AFTER``); the write stays queued and a retry waits for it."""
        info = activity.info()
        written = self._submitted(info.workflow_run_id or info.activity_id, record)
        while not written.done():
            stalled = self._writer.stalled_for()
            if stalled >= WRITE_STALLED_AFTER:
                log.warning("record.database_stalled", workflow_id=info.workflow_id,
                            stalled_s=round(stalled, 1), attempt=info.attempt)
                # Benign: the SDK logs it at DEBUG, without a trace (the line above tells).
                raise ApplicationError(f"the task database has not finished a commit in "
                                       f"{stalled:.1f}s; the write stays queued",
                                       type="DatabaseStalled",
                                       category=ApplicationErrorCategory.BENIGN)
            await asyncio.wait({written}, timeout=WRITE_STALLED_AFTER - stalled)
        written.result()
        if record.snapshot is not None:
            _log_task_state(record.snapshot)
        for execution in record.executions:
            log_execution(execution)

    @activity.defn(name=COMPLETED_ROW)
    async def completed_row(self, ask: RowAsk) -> CompletedRun | None:
        """What the run's job returned, if its row says it completed after ``ask.since`` (the
        jobs worker writes that row before the server hears of the attempt's end; one from
        before is an earlier run's of the same id)."""
        row = await asyncio.to_thread(get_execution, self._engine, ask.execution_id)
        done = completed_result(row, ask.trigger)
        if done is None or row is None or row.finished_at is None:
            return None
        if ask.since is not None and row.finished_at <= ask.since:
            return None
        return CompletedRun(**done.model_dump(), finished_at=row.finished_at)

    def _submitted(self, run_id: str, record: Record) -> asyncio.Future[None]:
        """The write of ``record`` in the batch writer: the one a given-up attempt left
        queued, or a new one."""
        waiting = self._waiting.get(run_id)
        if waiting is not None and waiting[0] == record:
            return waiting[1]
        written = asyncio.ensure_future(self._writer.submit(with_events(
            write_record(self._engine, record.executions, record.snapshot), record.events)))
        self._waiting[run_id] = (record, written)

        def forget(done: asyncio.Future[None]) -> None:
            if self._waiting.get(run_id, (None, None))[1] is done:
                del self._waiting[run_id]
            if not done.cancelled():
                done.exception()  # a failure nobody waits for any more is not logged again

        written.add_done_callback(forget)
        return written


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
