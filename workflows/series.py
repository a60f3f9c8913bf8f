"""Series: the fires of a task that fires faster than its lead, sent as one activity that runs
each at its instant; one workflow round trip for many runs."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import RUN_SERIES, SeriesFire, SeriesInput, SeriesResult, jobs_queue
    from scheduling.fire import next_fire
    from scheduling.spec import NotifyEvent, OverlapPolicy, ScheduleType
    from store.records import ExecutionRecord
    from workflows.plan import MISSED_AFTER
    from workflows.state import PRIORITY_KEYS, ExecutionStatus, execution_id

from workflows.core import describe_job
from workflows.records import TaskRecords

# Fires due within the lead plus this span go out together as one series when there are
# several: one workflow round trip for many runs of a task that fires faster than its lead.
SERIES_SPAN = timedelta(seconds=20)
SERIES_MAX_FIRES = 100
SERIES_PATCH = "run-series"
# The running series and the next one, dispatched a lead before its first fire.
MAX_SERIES_IN_FLIGHT = 2
SERIES_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# A series resumes on another worker when its worker dies; it is never given up.
SERIES_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


class TaskSeries(TaskRecords):
    """Dispatching a series, and counting its runs when it comes back."""

    def _series_eligible(self) -> bool:
        spec = self._state.spec
        return (
            spec.schedule_type is not ScheduleType.ONCE
            and not self._fixed_delay()
            and spec.overlap_policy in (OverlapPolicy.SKIP, OverlapPolicy.ALLOW)
        )

    def _series_fires(self, due: datetime, lead: timedelta) -> list[tuple[datetime, datetime]]:
        """The fires from ``due`` whose instants come within the lead plus the series span."""
        state = self._state
        horizon = workflow.now() + lead + SERIES_SPAN
        budget = None if state.spec.max_runs is None else state.spec.max_runs - state.run_count
        fires: list[tuple[datetime, datetime]] = []
        scheduled: datetime | None = due
        while scheduled is not None and len(fires) < SERIES_MAX_FIRES and (
            budget is None or len(fires) < budget
        ):
            instant = scheduled + self._offset(scheduled)
            if fires and instant > horizon:
                break
            fires.append((scheduled, instant))
            scheduled = next_fire(state.spec, anchor=state.anchor, after=scheduled)
        return fires

    def _start_series(self, fires: list[tuple[datetime, datetime]]) -> None:
        state = self._state
        state.run_count += len(fires)
        state.next_fire_at = self._limit_runs(
            next_fire(state.spec, anchor=state.anchor, after=fires[-1][0])
        )
        series_id = execution_id(state.task_id, fires[0][0]).replace(":", ":series-", 1)
        # The fire before this series' first, when a series in flight runs it: a run of it
        # still going at this series' first instant is an overlap.
        previous = max((f for run in self._series.values() for f in run), default=None)
        self._series[series_id] = fires
        self._instants[series_id] = min(instant for _, instant in fires)
        self._in_flight += 1
        run = asyncio.create_task(
            self._series_once(
                series_id, fires,
                execution_id(state.task_id, previous[0]) if previous is not None else None,
            )
        )
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def _series_once(
        self, series_id: str, fires: list[tuple[datetime, datetime]], previous: str | None
    ) -> None:
        try:
            result, reason = await self._run_series(series_id, fires, previous)
            self._finish_series(result, reason)
        finally:
            self._in_flight -= 1
            self._instants.pop(series_id, None)
            self._series.pop(series_id, None)
            self._wake = True

    async def _run_series(
        self, series_id: str, fires: list[tuple[datetime, datetime]], previous: str | None
    ) -> tuple[SeriesResult, str | None]:
        state = self._state
        spec = state.spec
        retry = spec.retry_policy
        last = max(instant for _, instant in fires)
        # Room for every fire's attempts and backoffs after the last instant; the heartbeat
        # timeout is what notices a dead worker.
        per_run = (spec.run_timeout_seconds + retry.maximum_interval_seconds) * retry.max_attempts
        handle = workflow.start_activity(
            RUN_SERIES,
            SeriesInput(
                task_id=state.task_id,
                tenant_id=state.tenant_id,
                job=spec.job_details,
                fires=[
                    SeriesFire(
                        execution_id=execution_id(state.task_id, scheduled),
                        scheduled_at=scheduled,
                        not_before=instant,
                    )
                    for scheduled, instant in fires
                ],
                overlap=spec.overlap_policy.value,
                missed_run_policy=spec.effective_missed_run_policy().value,
                max_catchup_runs=spec.max_catchup_runs,
                catchup_window_seconds=spec.catchup_window_seconds,
                missed_after_seconds=MISSED_AFTER.total_seconds(),
                drift_threshold_seconds=spec.drift_threshold_seconds,
                run_timeout_seconds=spec.run_timeout_seconds,
                max_attempts=retry.max_attempts,
                initial_interval_seconds=retry.initial_interval_seconds,
                backoff_coefficient=retry.backoff_coefficient,
                maximum_interval_seconds=retry.maximum_interval_seconds,
                max_consecutive_failures=spec.max_consecutive_failures,
                consecutive_failures=state.consecutive_failures,
                previous_execution_id=previous,
            ),
            task_queue=jobs_queue(workflow.info().task_queue),
            result_type=SeriesResult,
            start_to_close_timeout=(last - workflow.now()) + timedelta(seconds=per_run + 60),
            heartbeat_timeout=max(
                SERIES_HEARTBEAT_TIMEOUT, timedelta(seconds=spec.heartbeat_timeout_seconds)
            ),
            retry_policy=SERIES_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            activity_id=series_id,
            priority=Priority(priority_key=PRIORITY_KEYS[spec.priority]),
            summary=f"{describe_job(spec)} x{len(fires)} from {fires[0][1].isoformat()}",
        )
        self._active[series_id] = handle
        state.running.append(series_id)
        self._refresh_status()
        try:
            result = await handle
        except ActivityError:
            # Withdrawn before it started: none of its fires ran.
            result = SeriesResult(unrun=[scheduled for scheduled, _ in fires])
        finally:
            del self._active[series_id]
            state.running.remove(series_id)
        return result, self._withdrawn.pop(series_id, None)

    def _finish_series(self, result: SeriesResult, reason: str | None) -> None:
        """Count the series' runs (their rows are written) and take back its unrun fires."""
        state = self._state
        spec = state.spec
        for outcome in result.outcomes:
            if outcome.status == ExecutionStatus.SKIPPED:
                self._count_skip(outcome.reason or "skipped")
                continue
            record = ExecutionRecord(
                id=outcome.execution_id, task_id=state.task_id, tenant_id=state.tenant_id,
                scheduled_at=outcome.scheduled_at, status=outcome.status, error=outcome.error,
                attempts=outcome.attempts, started_at=outcome.started_at,
                finished_at=outcome.finished_at, lateness_ms=outcome.lateness_ms,
                drifted=outcome.drifted,
            )
            self._count(record)
            self._after_run_events(record, tripped=False)
        state.run_count -= len(result.unrun)
        limit = spec.max_consecutive_failures
        tripped = limit is not None and state.consecutive_failures >= limit and not state.paused
        if result.unrun and (tripped or reason in ("paused", "rebound")):
            # Not run: back to the schedule, decided again on resume or under the new bounds.
            first = min(result.unrun)
            if state.next_fire_at is None or first < state.next_fire_at:
                state.next_fire_at = first
            if reason == "rebound":
                state.next_fire_at = self._limit_runs(self._rebound(state.next_fire_at))
        if tripped:
            self._pause(
                f"auto-paused after {state.consecutive_failures} consecutive failed runs "
                f"(max_consecutive_failures={limit})"
            )
            self._notify(NotifyEvent.AUTO_PAUSED, None, state.status_reason)
