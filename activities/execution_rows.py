"""The execution rows the jobs worker writes itself, beside the jobs: a run's RUNNING row with
its real start, and its COMPLETED row as soon as the job is done. The workflow writes each
run's full row once the server has its outcome; these rows are what a user sees meanwhile,
and what a retried attempt checks before running a job again. The task row is the
workflow's alone."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

import structlog
from sqlalchemy import Engine

from activities.payloads import JobInput, JobResult
from scheduling.status import ExecutionStatus, Trigger
from store.batch import BatchWriter, Write
from store.models import ExecutionRecord, TaskExecution
from store.tasks import get_execution, write_completed, write_started

log = structlog.get_logger("task_scheduler.jobs")


class RunRows:
    """Run rows through one batch writer; every write runs beside the job, never before it."""

    def __init__(self, engine: Engine, writer: BatchWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer or BatchWriter(engine)
        self._writes: set[asyncio.Task[None]] = set()

    async def previous(self, job_input: JobInput) -> TaskExecution | None:
        """The row earlier attempts of this run left (None as well when the database cannot
        say: the run then goes on as if there were none, and a retry runs its job)."""
        try:
            return await asyncio.to_thread(get_execution, self._engine, job_input.execution_id)
        except Exception:
            return None

    def started(self, job_input: JobInput, started: datetime, attempt: int, bound: Any) -> None:
        """The RUNNING row with the real start time (a final outcome is never overwritten by it)."""
        lateness_ms = _lateness_ms(job_input, started)
        record = _record(
            job_input, status=ExecutionStatus.RUNNING, attempts=attempt,
            started_at=started if attempt == 1 else None,
            lateness_ms=lateness_ms if attempt == 1 else None,
        )
        self._beside(self._submit(write_started(self._engine, record), "job.start_not_recorded", bound))

    def completed(self, job_input: JobInput, result: JobResult, bound: Any) -> None:
        """The job's finish and answer on its row as soon as it is done: a retry of an attempt
        whose completion the server never got then returns it instead of running the job
        again (``completed_result``). The workflow writes the same outcome when it has it."""
        started = result.started_at
        lateness_ms = None if started is None else _lateness_ms(job_input, started)
        record = _record(
            job_input, status=ExecutionStatus.COMPLETED, attempts=result.attempt, started_at=started,
            # on the start's clock: a time-skipping server's start may be ahead of this one
            finished_at=max(datetime.now(UTC), started) if started else datetime.now(UTC),
            http_status=result.http_status,
            response_snippet=result.response_snippet, lateness_ms=lateness_ms,
        )
        self._beside(self._submit(write_completed(self._engine, record), "job.completion_not_recorded", bound))

    async def _submit(self, write: Write, failure: str, bound: Any) -> None:
        try:
            await self._writer.submit(write)
        except Exception as exc:  # the workflow records the run in full when the server has it
            bound.warning(failure, error=type(exc).__name__)

    def _beside(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(write)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


def completed_result(row: TaskExecution | None, trigger: Trigger) -> JobResult | None:
    """What an earlier attempt returned, when its row says the job completed. A backfill
    reruns an instant under its execution id, and its own start writes ``backfill`` on the row:
    a row without it is the earlier run's, left there when that write did not land. (A replay
    keeps the row's trigger: its COMPLETED row is its own.)"""
    if row is None or row.status != ExecutionStatus.COMPLETED:
        return None
    if trigger is Trigger.BACKFILL and row.trigger != Trigger.BACKFILL:
        return None
    return JobResult(attempt=row.attempts, started_at=row.started_at,
                     http_status=row.http_status, response_snippet=row.response_snippet)


def _record(job_input: JobInput, **fields: Any) -> ExecutionRecord:
    return ExecutionRecord(
        id=job_input.execution_id, task_id=job_input.task_id, tenant_id=job_input.tenant_id,
        scheduled_at=job_input.scheduled_at, instant=job_input.instant, trigger=job_input.trigger,
        spec_version=job_input.spec_version, **fields,
    )


def _lateness_ms(job_input: JobInput, started: datetime) -> float:
    return max(0.0, job_input.lateness(started).total_seconds() * 1000)
