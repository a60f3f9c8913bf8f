"""One run of a task's job: the activity on the jobs queue (dispatched ahead of its instant
when there is a lead), its outcome and its record."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        MISSED,
        RUN_JOB,
        WITHDRAWN,
        JobFailureDetails,
        JobInput,
        JobResult,
        jobs_queue,
    )
    from scheduling.fire import next_fire
    from scheduling.spec import MissedRunPolicy
    from scheduling.waiting import waiting_heartbeat_timeout
    from store.records import ExecutionRecord
    from workflows.plan import MISSED_AFTER
    from workflows.state import PRIORITY_KEYS, ExecutionStatus, QueuedRun, Trigger, execution_id

from workflows.core import DISPATCH_SLACK, describe_job
from workflows.records import TaskRecords


class TaskRuns(TaskRecords):
    """Starting runs, waiting for them and recording how each ended."""

    def _start_run(self, queued: QueuedRun, *, instant: datetime | None = None) -> None:
        state = self._state
        if queued.trigger in (Trigger.MANUAL, Trigger.REPLAY):
            state.manual_count += 1
        else:
            state.run_count += 1
        run_id = queued.execution_id or execution_id(state.task_id, queued.scheduled_at, queued.trigger)
        if instant is not None:
            self._instants[run_id] = instant
        self._in_flight += 1
        run = asyncio.create_task(self._run_once(queued, run_id))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def _run_once(self, queued: QueuedRun, run_id: str) -> None:
        try:
            await self._execute(queued, run_id)
        finally:
            self._in_flight -= 1
            self._instants.pop(run_id, None)
            self._wake = True

    async def _execute(self, queued: QueuedRun, run_id: str) -> None:
        state = self._state
        spec = state.spec
        instant = self._instants.get(run_id)
        record = ExecutionRecord(
            id=run_id,
            task_id=state.task_id,
            tenant_id=state.tenant_id,
            scheduled_at=queued.scheduled_at,
            trigger=queued.trigger.value,
            status=ExecutionStatus.RUNNING,
        )
        handle = workflow.start_activity(
            RUN_JOB,
            JobInput(
                execution_id=run_id,
                task_id=state.task_id,
                tenant_id=state.tenant_id,
                scheduled_at=queued.scheduled_at,
                job=spec.job_details,
                not_before=instant,
                trigger=queued.trigger.value,
                drift_threshold_seconds=spec.drift_threshold_seconds,
                run_timeout_seconds=spec.run_timeout_seconds,
                skip_if_late_seconds=(
                    MISSED_AFTER.total_seconds()
                    if queued.trigger is Trigger.SCHEDULE
                    and spec.effective_missed_run_policy() is MissedRunPolicy.SKIP
                    else None
                ),
            ),
            task_queue=jobs_queue(workflow.info().task_queue),
            result_type=JobResult,
            # The job itself is held to run_timeout_seconds by the activity; this backstop
            # also covers the wait of a run dispatched ahead of its instant.
            start_to_close_timeout=timedelta(seconds=spec.run_timeout_seconds) + self._lead()
            + DISPATCH_SLACK + timedelta(seconds=10),
            heartbeat_timeout=timedelta(seconds=waiting_heartbeat_timeout(
                spec.heartbeat_timeout_seconds,
                (instant - workflow.now()).total_seconds() if instant is not None else 0.0,
            )),
            retry_policy=RetryPolicy(
                maximum_attempts=spec.retry_policy.max_attempts,
                initial_interval=timedelta(seconds=spec.retry_policy.initial_interval_seconds),
                backoff_coefficient=spec.retry_policy.backoff_coefficient,
                maximum_interval=timedelta(seconds=spec.retry_policy.maximum_interval_seconds),
            ),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            activity_id=run_id,
            priority=Priority(priority_key=PRIORITY_KEYS[spec.priority]),
            summary=f"{describe_job(spec)} at {(instant or queued.scheduled_at).isoformat()}",
        )
        self._active[run_id] = handle
        state.running.append(run_id)
        self._refresh_status()
        try:
            result = await handle
            record.status = ExecutionStatus.COMPLETED
            record.attempts = result.attempt
            record.started_at = result.started_at
            record.http_status = result.http_status
            record.response_snippet = result.response_snippet
        except ActivityError as err:
            if _is_withdrawn(err):
                await self._withdrawn_run(queued, run_id)
                return
            if _failure_type(err) == MISSED:
                await self._record_skip(queued.scheduled_at, "missed")
                return
            record.status, record.error = _failure_status(err)
            details = _failure_details(err)
            record.attempts = details.attempt if details else spec.retry_policy.max_attempts
            if details:
                record.started_at = details.started_at
                record.http_status = details.http_status
                record.response_snippet = details.response_snippet
        finally:
            del self._active[run_id]
            state.running.remove(run_id)
        await self._finish_run(queued, record)

    async def _finish_run(self, queued: QueuedRun, record: ExecutionRecord) -> None:
        state = self._state
        spec = state.spec
        record.finished_at = workflow.now()
        if record.started_at is not None:
            lateness = (record.started_at - record.scheduled_at).total_seconds()
            record.lateness_ms = max(0.0, lateness * 1000)
            threshold = spec.drift_threshold_seconds
            record.drifted = threshold is not None and queued.trigger is Trigger.SCHEDULE and lateness > threshold
        if record.status == ExecutionStatus.FAILED:
            record.dead_letter = "open"  # retries are exhausted: listable and replayable
        self._count(record)
        # The schedule as it is now: an update during the run may have changed it.
        if (
            self._fixed_delay()
            and queued.trigger in (Trigger.SCHEDULE, Trigger.CATCHUP)
            and not state.cancel_requested
        ):
            state.next_fire_at = self._limit_runs(
                next_fire(state.spec, anchor=state.anchor, after=record.finished_at)
            )
        tripped = (
            record.status == ExecutionStatus.FAILED
            and spec.max_consecutive_failures is not None
            and state.consecutive_failures >= spec.max_consecutive_failures
            and not state.paused
        )
        if tripped:
            self._pause(
                f"auto-paused after {state.consecutive_failures} consecutive failed runs "
                f"(max_consecutive_failures={spec.max_consecutive_failures})"
            )
        self._refresh_status()
        if self._last_of_schedule():
            # The task ends with this run: its final status goes in the same write.
            self._finish(self._final_status(), state.status_reason)
        await self._record_run(record)
        self._after_run_events(record, tripped)

    async def _withdrawn_run(self, queued: QueuedRun, run_id: str) -> None:
        """A run withdrawn before its instant never ran: give its fire back to the schedule."""
        state = self._state
        reason = self._withdrawn.pop(run_id, "withdrawn")
        if queued.trigger in (Trigger.MANUAL, Trigger.REPLAY):
            state.manual_count -= 1
        else:
            state.run_count -= 1
        # Withdrawn by a pause, its instant falls inside the pause (unless resumed first):
        # the fire goes back to the schedule and is decided on resume.
        if reason == "paused" and (
            state.next_fire_at is None or queued.scheduled_at < state.next_fire_at
        ):
            state.next_fire_at = queued.scheduled_at

    def _last_of_schedule(self) -> bool:
        """This finishing run is the task's last: nothing else is due, queued or in flight."""
        state = self._state
        return (
            self._in_flight == 1
            and state.next_fire_at is None
            and not state.queue
            and not state.paused
            and not state.cancel_requested
        )

    async def _stop_runs(self) -> None:
        for handle in self._active.values():
            handle.cancel()
        self._state.queue.clear()
        await workflow.wait_condition(lambda: not self._in_flight)


def _failure_status(err: ActivityError) -> tuple[ExecutionStatus, str]:
    cause = err.cause
    if isinstance(cause, CancelledError):
        return ExecutionStatus.CANCELLED, "cancelled while running"
    message = str(cause) if cause is not None else str(err)
    return ExecutionStatus.FAILED, message[:2000]


def _is_withdrawn(err: ActivityError) -> bool:
    return _failure_type(err) == WITHDRAWN


def _failure_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _failure_details(err: ActivityError) -> JobFailureDetails | None:
    cause = err.cause
    return JobFailureDetails.of(cause.details) if isinstance(cause, ApplicationError) else None
