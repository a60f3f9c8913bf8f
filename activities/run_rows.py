"""The execution rows the jobs worker writes itself, beside the jobs: a run's RUNNING row with
its real start, the job's finish on that row before the server hears of it, and a series
fire's outcome.
The workflow still writes each run's full row once the server has its outcome; these rows are
what a user sees meanwhile, and what a retried attempt checks before running a job again."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy import Engine

from activities.bookkeeping import log_execution
from activities.contracts import JobInput, JobResult
from store.batch import BatchWriter, Write
from store.models import TaskExecution
from store.records import ExecutionRecord
from store.tasks import get_execution, write_run, write_started

log = structlog.get_logger("task_scheduler.jobs")


class RunRows:
    """Run rows through one batch writer; every write runs beside the job, never before it."""

    def __init__(self, engine: Engine, writer: BatchWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer or BatchWriter(engine)
        self._writes: set[asyncio.Task[None]] = set()

    async def status_of(self, execution_id: str) -> str | None:
        """An execution's recorded status (None: no row, or the database is unavailable)."""
        row = await self._row(execution_id)
        return row.status if row is not None else None

    async def completed_before(self, job_input: JobInput) -> JobResult | None:
        """What an earlier attempt of this run returned, when it completed the job.

        The server retries an attempt whose completion it never got (a lost connection, a
        server out of capacity): the job ran, and must not run again."""
        row = await self._row(job_input.execution_id)
        if row is None or not _job_finished(row):
            return None
        return JobResult(
            attempt=row.attempts, started_at=row.started_at,
            http_status=row.http_status, response_snippet=row.response_snippet,
        )

    def started(self, job_input: JobInput, started: datetime, attempt: int, bound: Any) -> None:
        """The RUNNING row with the real start time (a final outcome is never overwritten by it)."""
        lateness_ms = _lateness_ms(job_input, started)
        record = _record(
            job_input, status="RUNNING", attempts=attempt,
            started_at=started if attempt == 1 else None,
            lateness_ms=lateness_ms if attempt == 1 else None,
            drifted=attempt == 1 and _drifted(job_input, lateness_ms),
        )
        self._beside(self._submit(write_started(self._engine, record), "job.start_not_recorded", bound))

    def completed(self, job_input: JobInput, result: JobResult, bound: Any) -> None:
        """The job's finish and answer on its RUNNING row as soon as it is done, for
        ``completed_before``. The row turns COMPLETED when the workflow has the outcome, in
        one write with the task row, so the two never disagree."""
        started = result.started_at
        lateness_ms = None if started is None else _lateness_ms(job_input, started)
        record = _record(
            job_input, status="RUNNING", attempts=result.attempt, started_at=started,
            # on the start's clock: a time-skipping server's start may be ahead of this one
            finished_at=max(datetime.now(UTC), started) if started else datetime.now(UTC),
            http_status=result.http_status,
            response_snippet=result.response_snippet, lateness_ms=lateness_ms,
            drifted=job_input.trigger == "schedule" and _drifted(job_input, lateness_ms),
        )
        self._beside(self._submit(write_run(self._engine, record, None), "job.completion_not_recorded", bound))

    async def outcome(self, record: ExecutionRecord) -> None:
        """A series fire's final row; retried until the database takes it."""
        delay = 1.0
        while True:
            try:
                await self._writer.submit(write_run(self._engine, record, None))
            except Exception as exc:  # the database may be down: the record must land
                log.warning("execution.not_recorded", execution_id=record.id, error=type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            log_execution(record)
            return

    async def _row(self, execution_id: str) -> TaskExecution | None:
        """The run's row; None as well when the database cannot say (the run then goes on as
        if there were none: it is not held back, and a retry runs its job)."""
        try:
            return await asyncio.to_thread(get_execution, self._engine, execution_id)
        except Exception:
            return None

    async def _submit(self, write: Write, failure: str, bound: Any) -> None:
        try:
            await self._writer.submit(write)
        except Exception as exc:  # the workflow records the run in full when the server has it
            bound.warning(failure, error=type(exc).__name__)

    def _beside(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(write)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


def _job_finished(row: TaskExecution) -> bool:
    """The row says the job of this run completed: the workflow recorded it, or the attempt
    that ran it did (``RunRows.completed``). A replayed dead letter's reopened row keeps the
    finish of the run before, which came before the replay started."""
    if row.status == "COMPLETED":
        return True
    return (
        row.status == "RUNNING" and row.finished_at is not None and row.started_at is not None
        and row.finished_at >= row.started_at
    )


def _record(job_input: JobInput, **fields: Any) -> ExecutionRecord:
    return ExecutionRecord(
        id=job_input.execution_id, task_id=job_input.task_id, tenant_id=job_input.tenant_id,
        scheduled_at=job_input.scheduled_at, trigger=job_input.trigger, **fields,
    )


def _lateness_ms(job_input: JobInput, started: datetime) -> float:
    return max(0.0, (started - job_input.scheduled_at).total_seconds() * 1000)


def _drifted(job_input: JobInput, lateness_ms: float | None) -> bool:
    threshold = job_input.drift_threshold_seconds
    return threshold is not None and lateness_ms is not None and lateness_ms > threshold * 1000
