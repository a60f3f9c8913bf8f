"""The task workflow's state and the transitions every part of it shares: the lead, the
jitter offset, counting runs, pausing, withdrawing runs dispatched ahead, the final status.

The task workflow is assembled from layers, each on top of this one: ``records`` (rows and
search attributes), ``runs`` (one run of the job), ``series`` (many fires in one activity),
``messages`` (signals, updates, the query) and ``task`` (the main loop). Every method is
workflow code: times come from ``workflow.now()``, side effects only from activities.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from scheduling.fire import next_fire
    from scheduling.jitter import jitter_offset
    from scheduling.spec import (
        HandlerJob,
        HttpJob,
        IntervalMode,
        ScheduleType,
        TaskSpec,
        redact_url,
    )
    from store.records import ExecutionRecord, TaskSnapshot
    from workflows.state import (
        FINAL_STATUSES,
        ExecutionStatus,
        LastRun,
        TaskState,
        TaskStatus,
        TaskWorkflowInput,
    )

DISPATCH_SLACK = timedelta(seconds=1)


class TaskCore:
    """The state a task workflow holds, and the transitions on it that need no activity."""

    _input: TaskWorkflowInput
    _state: TaskState
    _active: dict[str, workflow.ActivityHandle[Any]]
    # Runs in flight (started, not yet recorded as finished); counted by the run itself so
    # the main loop sees the end in the same workflow task that records it.
    _runs: set[asyncio.Task[None]]
    _in_flight: int
    _wake: bool
    _saved: TaskSnapshot | None
    _version: int
    # Runs dispatched ahead of their instant: id -> instant; and why a waiting one was
    # withdrawn (it never ran, so it is not recorded as a run).
    _instants: dict[str, datetime]
    _withdrawn: dict[str, str]
    _notes: set[asyncio.Task[None]]
    # Series in flight: id -> its fires (scheduled time, instant).
    _series: dict[str, list[tuple[datetime, datetime]]]

    def _lead(self) -> timedelta:
        base = self._input.lead_seconds
        if base <= 0:
            return timedelta(0)
        adaptive = base + 2 * self._state.wake_lag_seconds
        return timedelta(seconds=min(max(base, adaptive), self._input.max_lead_seconds))

    def _offset(self, scheduled_at: datetime) -> timedelta:
        spec = self._state.spec
        return jitter_offset(self._state.task_id, scheduled_at, spec.jitter_seconds)

    def _fixed_delay(self) -> bool:
        spec = self._state.spec
        return (
            spec.schedule_type is ScheduleType.INTERVAL
            and spec.interval_mode is IntervalMode.FIXED_DELAY
        )

    def _limit_runs(self, candidate: datetime | None) -> datetime | None:
        max_runs = self._state.spec.max_runs
        if max_runs is not None and self._state.run_count >= max_runs:
            return None
        return candidate

    def _final_status(self) -> TaskStatus:
        last = self._state.last_run
        if self._state.spec.schedule_type is ScheduleType.ONCE and last is not None:
            return {
                ExecutionStatus.COMPLETED: TaskStatus.COMPLETED,
                ExecutionStatus.CANCELLED: TaskStatus.CANCELLED,
            }.get(last.status, TaskStatus.FAILED)
        return TaskStatus.COMPLETED

    def _finish(self, status: TaskStatus, reason: str | None) -> None:
        state = self._state
        state.status, state.status_reason = status, reason
        state.next_fire_at = None
        state.queue.clear()

    def _refresh_status(self) -> None:
        state = self._state
        now = workflow.now()
        # A paused task's series is being withdrawn: the task shows paused.
        if any(
            self._instants.get(run_id, now) <= now and not (state.paused and run_id in self._series)
            for run_id in self._active
        ):
            state.status = TaskStatus.RUNNING
        elif state.paused:
            state.status = TaskStatus.PAUSED
        else:
            state.status = TaskStatus.PENDING

    def _history_long(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._input.history_limit
        )

    def _pause(self, reason: str | None) -> None:
        state = self._state
        if state.status in FINAL_STATUSES or state.paused:
            return
        state.paused = True
        state.status_reason = reason or "paused"
        self._withdraw_waiting("paused")
        self._refresh_status()
        self._wake = True

    def _withdraw_waiting(self, reason: str) -> None:
        """Cancel runs dispatched ahead of an instant that has not come yet."""
        now = workflow.now()
        for run_id, handle in self._active.items():
            instant = self._instants.get(run_id)
            # A series withdraws the fires it has not reached; runs it started finish.
            if run_id in self._series or (instant is not None and instant > now):
                self._withdrawn[run_id] = reason
                handle.cancel()

    def _rebound(self, upcoming: datetime | None) -> datetime | None:
        """The next fire under new bounds, on the same timing as before."""
        spec = self._state.spec
        if upcoming is None:
            if self._fixed_delay():
                return None  # planned when the running one completes
            # The old bounds had ended the schedule; later ones may let it go on.
            return next_fire(spec, anchor=self._state.anchor, after=workflow.now())
        if spec.end_date is not None and upcoming > spec.end_date:
            return None
        return upcoming

    def _count(self, record: ExecutionRecord) -> None:
        state = self._state
        status = ExecutionStatus(record.status)
        if status is ExecutionStatus.COMPLETED:
            state.success_count += 1
            state.consecutive_failures = 0
        elif status is ExecutionStatus.FAILED:
            state.failure_count += 1
            state.consecutive_failures += 1
        else:
            state.cancelled_count += 1
        state.last_run = LastRun(
            execution_id=record.id,
            scheduled_at=record.scheduled_at,
            status=status,
            finished_at=record.finished_at,
            error=record.error,
        )

    def _count_skip(self, reason: str) -> None:
        self._state.skipped_count += 1
        workflow.metric_meter().create_counter(
            "scheduler_skipped_runs", "fires recorded as skipped, by reason"
        ).add(1, {"reason": reason})


def describe_schedule(spec: TaskSpec) -> str:
    """The schedule in a few words, for timer summaries and the workflow's details."""
    if spec.schedule_type is ScheduleType.CRON:
        return f"cron {spec.cron} {spec.timezone}"
    if spec.schedule_type is ScheduleType.INTERVAL:
        return f"every {spec.interval_seconds:g}s {spec.interval_mode.value}"
    return f"once at {spec.run_at.isoformat() if spec.run_at else '?'}"


def describe_job(spec: TaskSpec) -> str:
    """The job in a few words (an HTTP job's URL without its secrets), for activity summaries."""
    job = spec.job_details
    if isinstance(job, HttpJob):
        return f"{job.method} {redact_url(job.url)}"
    if isinstance(job, HandlerJob):
        return f"handler {job.name}"
    return f"workflow {job.workflow_type}"
