"""TaskWorkflow: one durable workflow per task; sleeps until the next fire, runs the job, obeys
cancel, update, pause, resume and trigger.

Determinism: every time comes from ``workflow.now()``; schedule math is the pure code in
``scheduling`` (passed through the sandbox); side effects happen only in activities.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        MISSED,
        NOTIFY,
        RECORD_RUN,
        RUN_JOB,
        RUN_SERIES,
        SAVE_EXECUTION,
        SAVE_TASK,
        WITHDRAWN,
        JobFailureDetails,
        JobInput,
        JobResult,
        Notification,
        RunRecord,
        SeriesFire,
        SeriesInput,
        SeriesResult,
        jobs_queue,
    )
    from scheduling.fire import first_fire, next_fire
    from scheduling.jitter import jitter_offset
    from scheduling.spec import (
        HandlerJob,
        HttpJob,
        IntervalMode,
        MissedRunPolicy,
        NotifyEvent,
        OverlapPolicy,
        ScheduleFields,
        ScheduleType,
        TaskChanges,
        TaskSpec,
        check_timing,
        redact_url,
    )
    from scheduling.waiting import waiting_heartbeat_timeout
    from store.records import ExecutionRecord, TaskSnapshot
    from workflows import attributes
    from workflows.plan import MISSED_AFTER, Decision, plan_due_fires
    from workflows.state import (
        FINAL_STATUSES,
        ExecutionStatus,
        LastRun,
        QueuedRun,
        ReplayRequest,
        TaskState,
        TaskStatus,
        TaskWorkflowInput,
        Trigger,
        execution_id,
    )

BOOKKEEPING_TIMEOUT = timedelta(seconds=30)
# Bookkeeping retries until the database is back: a run's record must never be lost.
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
SCHEDULE_FIELD_NAMES = frozenset(ScheduleFields.model_fields)
# Changing only these keeps the schedule's timing as it is (a fixed-rate grid is not re-anchored).
BOUND_FIELD_NAMES = frozenset({"end_date", "max_runs"})
# Temporal priority keys: smaller runs first when the task queue is backlogged.
PRIORITY_KEYS = {"high": 1, "medium": 3, "low": 5}
DISPATCH_SLACK = timedelta(seconds=1)
NOTIFY_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30))
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


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    """A task: a schedule, a job, and the record of every run."""

    @workflow.init
    def __init__(self, start: TaskWorkflowInput) -> None:
        self._input = start
        self._state = start.state or TaskState(
            task_id=start.task_id,
            tenant_id=start.tenant_id,
            spec=start.spec,
            created_at=start.created_at,
            anchor=start.created_at,
            next_fire_at=first_fire(start.spec, start.created_at),
        )
        self._state.running = []
        self._active: dict[str, workflow.ActivityHandle[JobResult]] = {}
        # Runs in flight (started, not yet recorded as finished); counted by the run itself so
        # the main loop sees the end in the same workflow task that records it.
        self._runs: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._wake = False
        self._saved: TaskSnapshot | None = None
        self._version = 0
        # Runs dispatched ahead of their instant: id -> instant; and why a waiting one was
        # withdrawn (it never ran, so it is not recorded as a run).
        self._instants: dict[str, datetime] = {}
        self._withdrawn: dict[str, str] = {}
        self._notes: set[asyncio.Task[None]] = set()
        # Series in flight: id -> its fires (scheduled time, instant).
        self._series: dict[str, list[tuple[datetime, datetime]]] = {}

    # ----------------------------------------------------------------- main loop
    @workflow.run
    async def run(self, start: TaskWorkflowInput) -> TaskState:
        """Sleep until each fire time and run the job, until the task ends."""
        state = self._state
        try:
            await self._save()
            while True:
                self._wake = False
                if state.cancel_requested:
                    await self._stop_runs()
                    self._finish(TaskStatus.CANCELLED, state.status_reason or "cancelled")
                    break
                if not state.paused:
                    await self._fire_due()
                self._start_queued()
                self._predispatch()
                if self._schedule_exhausted():
                    self._finish(self._final_status(), state.status_reason or self._end_reason())
                    break
                self._refresh_status()
                if not self._in_flight or self._only_series():
                    # A run in flight writes the task row with its own record when it ends:
                    # dispatching it costs no write. A series records its runs itself.
                    await self._save()
                if self._should_continue_as_new():
                    await workflow.wait_condition(
                        lambda: not self._notes and workflow.all_handlers_finished()
                    )
                    state.continued_as_new += 1
                    workflow.continue_as_new(self._input.model_copy(update={"state": state}))
                await self._sleep()
        except asyncio.CancelledError:
            # Cancelled through Temporal itself (e.g. `temporal workflow cancel`): stop the
            # running job, record the end, then let the workflow end as cancelled.
            await self._stop_runs()
            self._finish(TaskStatus.CANCELLED, "workflow cancelled through Temporal")
            await self._save()
            raise
        await self._save()
        if state.status is TaskStatus.COMPLETED:
            self._notify(NotifyEvent.COMPLETED, None, state.status_reason or "the task has ended")
        await workflow.wait_condition(lambda: not self._notes and workflow.all_handlers_finished())
        return state

    async def _sleep(self) -> None:
        state = self._state
        # Read the clock now, not at the top of the loop: the bookkeeping in between takes time
        # and a timer set from a stale "now" would fire that much late.
        now = workflow.now()
        due = None if state.paused else state.next_fire_at
        timeout = None
        summary = None
        if due is not None:
            instant = due + self._offset(due)
            # Wake a lead early to dispatch the run ahead of its instant, unless a run is in
            # flight: then wake at the instant, where the overlap policy decides. The next
            # series goes out beside the one running.
            ahead = not self._in_flight or self._may_dispatch_beside()
            wake_at = instant - self._lead() if ahead else instant
            timeout = max(wake_at - now, timedelta(milliseconds=1))
            summary = (
                f"sleep until {instant.astimezone(state.spec.zone()).isoformat()} "
                f"({_describe(state.spec)})"
            )
        try:
            await workflow.wait_condition(
                lambda: self._wake, timeout=timeout, timeout_summary=summary
            )
        except TimeoutError:
            # How late the timer fired is the backlog this task sees: lead further ahead.
            assert timeout is not None
            late = workflow.now() - (now + timeout)
            state.wake_lag_seconds = max(0.0, late.total_seconds())

    def _lead(self) -> timedelta:
        base = self._input.lead_seconds
        if base <= 0:
            return timedelta(0)
        adaptive = base + 2 * self._state.wake_lag_seconds
        return timedelta(seconds=min(max(base, adaptive), self._input.max_lead_seconds))

    def _offset(self, scheduled_at: datetime) -> timedelta:
        spec = self._state.spec
        return jitter_offset(self._state.task_id, scheduled_at, spec.jitter_seconds)

    def _predispatch(self) -> None:
        """Dispatch the next run ahead of its instant when nothing else is in flight."""
        state = self._state
        due = state.next_fire_at
        lead = self._lead()
        if (due is None or not lead or state.paused or state.cancel_requested or state.queue
                or (self._in_flight and not self._may_dispatch_beside())):
            return
        instant = due + self._offset(due)
        # A timer may fire a few milliseconds before the wake it was set for: a second of
        # slack keeps that from costing a second, tiny timer.
        if instant - workflow.now() > lead + DISPATCH_SLACK:
            return
        if self._series:
            # Beside a series in flight: the next one (even of one fire) follows it.
            fires = self._series_fires(due, lead)
            if fires:
                self._start_series(fires)
            return
        if self._series_eligible():
            fires = self._series_fires(due, lead)
            if len(fires) > 1 and workflow.patched(SERIES_PATCH):
                # A new workflow run dispatches the series when this one's history is long.
                if not self._should_continue_as_new():
                    self._start_series(fires)
                return
        state.next_fire_at = (
            None if self._fixed_delay()
            else next_fire(state.spec, anchor=state.anchor, after=due)
        )
        self._start_run(QueuedRun(scheduled_at=due), instant=instant)
        state.next_fire_at = self._limit_runs(state.next_fire_at)

    async def _fire_due(self) -> None:
        state = self._state
        now = workflow.now()
        plan = plan_due_fires(state, now, running=self._in_flight > 0, offset=self._offset)
        state.next_fire_at = plan.next_fire_at
        for decision in plan.decisions:
            await self._apply(decision)

    async def _apply(self, decision: Decision) -> None:
        state = self._state
        if decision.action == "skip":
            await self._record_skip(decision.scheduled_at, decision.reason or "skipped")
        elif decision.action == "queue":
            state.queue.append(
                QueuedRun(scheduled_at=decision.scheduled_at, trigger=decision.trigger)
            )
        elif decision.action == "buffer":
            # buffer_one keeps only the newest waiting fire; the one it replaces is recorded.
            await self._replace_waiting()
            state.queue.append(QueuedRun(scheduled_at=decision.scheduled_at))
        elif decision.action == "cancel_running":
            for handle in self._active.values():
                handle.cancel()
            await self._replace_waiting()
            state.queue.insert(0, QueuedRun(scheduled_at=decision.scheduled_at))
        else:
            # Its instant has come (the plan only decides due fires): no waiting.
            self._start_run(QueuedRun(scheduled_at=decision.scheduled_at, trigger=decision.trigger))

    async def _replace_waiting(self) -> None:
        """Drop the scheduled fire waiting for the running one (recorded as skipped).

        Catch-up and manual runs stay queued: the missed-run policy or a user asked for them.
        """
        state = self._state
        for old in [q for q in state.queue if q.trigger is Trigger.SCHEDULE]:
            state.queue.remove(old)
            await self._record_skip(old.scheduled_at, "overlap")

    def _start_queued(self) -> None:
        state = self._state
        if not state.queue:
            return
        head = state.queue[0]
        asked = head.trigger in (Trigger.MANUAL, Trigger.REPLAY)
        # A run someone asked for does not wait behind one that only waits for its instant.
        if not self._in_flight or (asked and self._only_waiting()):
            self._start_run(state.queue.pop(0))

    def _only_waiting(self) -> bool:
        now = workflow.now()
        return all(
            run_id in self._series or self._instants.get(run_id, now) > now
            for run_id in self._active
        ) and len(self._active) == self._in_flight

    def _only_series(self) -> bool:
        return bool(self._series) and len(self._series) == self._in_flight

    def _may_dispatch_beside(self) -> bool:
        """The next series may go out while the one in flight runs: its fires then start on
        time after the last of the running one, with no workflow round trip between them."""
        return (
            self._only_series()
            and len(self._series) < MAX_SERIES_IN_FLIGHT
            and self._series_eligible()
            and not self._history_long()
        )

    def _schedule_exhausted(self) -> bool:
        state = self._state
        return (
            state.next_fire_at is None
            and not state.queue
            and not self._in_flight
            and not (state.paused and state.spec.schedule_type is ScheduleType.ONCE)
            and not self._waiting_for_delay()
        )

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

    def _fixed_delay(self) -> bool:
        spec = self._state.spec
        return (
            spec.schedule_type is ScheduleType.INTERVAL
            and spec.interval_mode is IntervalMode.FIXED_DELAY
        )

    def _waiting_for_delay(self) -> bool:
        # fixed_delay plans its next fire when the running one completes.
        return self._fixed_delay() and self._in_flight > 0

    def _final_status(self) -> TaskStatus:
        last = self._state.last_run
        if self._state.spec.schedule_type is ScheduleType.ONCE and last is not None:
            return {
                ExecutionStatus.COMPLETED: TaskStatus.COMPLETED,
                ExecutionStatus.CANCELLED: TaskStatus.CANCELLED,
            }.get(last.status, TaskStatus.FAILED)
        return TaskStatus.COMPLETED

    def _end_reason(self) -> str | None:
        """Why a task ends without a run of its own to show for it."""
        state = self._state
        if state.spec.schedule_type is ScheduleType.ONCE and state.last_run is None:
            return "its only run was skipped (see its executions for the reason)"
        return None

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

    def _should_continue_as_new(self) -> bool:
        return not self._in_flight and self._history_long()

    def _history_long(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._input.history_limit
        )

    # ----------------------------------------------------------------- runs
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
            summary=f"{_describe_job(spec)} at {(instant or queued.scheduled_at).isoformat()}",
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

    def _after_run_events(self, record: ExecutionRecord, tripped: bool) -> None:
        meter = workflow.metric_meter()
        meter.create_counter("scheduler_runs", "finished runs by outcome").add(
            1, {"outcome": str(record.status).lower()}
        )
        if record.status == ExecutionStatus.FAILED:
            meter.create_counter("scheduler_dead_letters", "runs dead-lettered").add(1)
            self._notify(NotifyEvent.FAILED, record.id, record.error)
            self._notify(NotifyEvent.DEAD_LETTERED, record.id, "retries exhausted; replayable")
        if record.drifted:
            meter.create_counter("scheduler_drift_events", "runs that started past the drift threshold").add(1)
            self._notify(NotifyEvent.DRIFT, record.id, f"started {record.lateness_ms:.0f} ms late")
            workflow.logger.warning("run drifted", extra={"execution_id": record.id})
        if tripped:
            self._notify(NotifyEvent.AUTO_PAUSED, record.id, self._state.status_reason)

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

    # ----------------------------------------------------------------- series
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
            summary=f"{_describe_job(spec)} x{len(fires)} from {fires[0][1].isoformat()}",
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

    def _notify(self, event: NotifyEvent, run_id: str | None, detail: str | None) -> None:
        """Tell the task's webhook, if it asked for this event; never blocks the task."""
        spec = self._state.spec
        workflow.logger.info(f"task event {event.value}", extra={"execution_id": run_id})
        if spec.notify is None or event not in spec.notify.events:
            return
        note = Notification(
            url=spec.notify.url, event=event.value, task_id=self._state.task_id,
            tenant_id=self._state.tenant_id, task_name=spec.task_name, execution_id=run_id,
            detail=detail, at=workflow.now(),
        )

        async def deliver() -> None:
            try:
                await workflow.execute_activity(
                    NOTIFY, note, start_to_close_timeout=timedelta(seconds=15),
                    schedule_to_close_timeout=timedelta(minutes=2), retry_policy=NOTIFY_RETRY,
                    summary=f"notify {event.value}",
                )
            except ActivityError:
                workflow.logger.warning(f"notification {event.value} not delivered")

        task = asyncio.create_task(deliver())
        self._notes.add(task)
        task.add_done_callback(self._notes.discard)

    def _limit_runs(self, candidate: datetime | None) -> datetime | None:
        max_runs = self._state.spec.max_runs
        if max_runs is not None and self._state.run_count >= max_runs:
            return None
        return candidate

    def _count_skip(self, reason: str) -> None:
        self._state.skipped_count += 1
        workflow.metric_meter().create_counter(
            "scheduler_skipped_runs", "fires recorded as skipped, by reason"
        ).add(1, {"reason": reason})

    async def _record_skip(self, scheduled_at: datetime, reason: str) -> None:
        state = self._state
        self._count_skip(reason)
        now = workflow.now()
        await self._save_execution(
            ExecutionRecord(
                id=execution_id(state.task_id, scheduled_at),
                task_id=state.task_id,
                tenant_id=state.tenant_id,
                scheduled_at=scheduled_at,
                status=ExecutionStatus.SKIPPED,
                reason=reason,
                finished_at=now,
            )
        )

    async def _stop_runs(self) -> None:
        for handle in self._active.values():
            handle.cancel()
        self._state.queue.clear()
        await workflow.wait_condition(lambda: not self._in_flight)

    # ----------------------------------------------------------------- bookkeeping
    def _snapshot(self) -> TaskSnapshot:
        state = self._state
        last = state.last_run
        upcoming = None if state.paused or state.next_fire_at is None else (
            state.next_fire_at + self._offset(state.next_fire_at)
        )
        now = workflow.now()
        coming = [i for fires in self._series.values() for _, i in fires if i > now]
        if coming and not state.paused:
            upcoming = min(coming)
        return TaskSnapshot(
            task_id=state.task_id,
            tenant_id=state.tenant_id,
            name=state.spec.task_name,
            schedule_type=state.spec.schedule_type.value,
            spec=state.spec.model_dump(mode="json"),
            status=state.status.value,
            status_reason=state.status_reason,
            next_run_at=upcoming,
            last_run_at=last.scheduled_at if last else None,
            last_run_status=last.status.value if last else None,
            last_execution_id=last.execution_id if last else None,
            run_count=state.run_count + state.manual_count,
            success_count=state.success_count,
            failure_count=state.failure_count,
            skipped_count=state.skipped_count,
            consecutive_failures=state.consecutive_failures,
            created_at=state.created_at,
            updated_at=state.created_at,
        )

    def _versioned(self, snapshot: TaskSnapshot) -> TaskSnapshot | None:
        """The snapshot to write (None when nothing a user can see has changed)."""
        if self._saved is not None and snapshot == self._saved:
            return None
        previous, self._saved = self._saved, snapshot
        self._upsert_search_attributes(previous, snapshot)
        # The version orders concurrent writers (main loop, runs, update handlers); a
        # continued-as-new run keeps counting upwards.
        self._version += 1
        return snapshot.model_copy(
            update={
                "updated_at": workflow.now(),
                # Later workflow runs (continue-as-new, a restart, a replay) start later, so
                # their writes outrank every write of the runs before them.
                "state_version": _run_epoch_ms() * 1_000_000 + self._version,
            }
        )

    async def _save(self) -> None:
        """Write the task row when something a user can see has changed."""
        to_write = self._versioned(self._snapshot())
        if to_write is None:
            return
        await workflow.execute_local_activity(
            SAVE_TASK,
            to_write,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"save task {self._state.status.value}",
        )

    async def _record_run(self, record: ExecutionRecord) -> None:
        """A finished run's row and the task row after it, in one local activity."""
        await workflow.execute_local_activity(
            RECORD_RUN,
            RunRecord(execution=record, snapshot=self._versioned(self._snapshot())),
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"record {record.status} {record.id}",
        )

    def _upsert_search_attributes(self, before: TaskSnapshot | None, now: TaskSnapshot) -> None:
        current = workflow.info().typed_search_attributes
        updates: list[SearchAttributeUpdate[Any]] = []
        # Only what differs from what the workflow already carries: a fresh start brought its
        # attributes along, and every upsert is a visibility write on the server.
        if current.get(attributes.TASK_STATUS) != now.status:
            updates.append(attributes.TASK_STATUS.value_set(now.status))
        if current.get(attributes.TASK_NAME) != now.name:
            updates.append(attributes.TASK_NAME.value_set(now.name))
        if current.get(attributes.SCHEDULE_TYPE) != now.schedule_type:
            updates.append(attributes.SCHEDULE_TYPE.value_set(now.schedule_type))
        if _seconds(current.get(attributes.NEXT_RUN_AT)) != _seconds(now.next_run_at):
            updates.append(
                attributes.NEXT_RUN_AT.value_set(now.next_run_at)
                if now.next_run_at is not None
                else attributes.NEXT_RUN_AT.value_unset()
            )
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(
            f"**{now.status}** {now.name}: {_describe(self._state.spec)}; next run "
            f"{now.next_run_at.isoformat() if now.next_run_at else 'none'}; "
            f"{now.run_count} runs, {now.failure_count} failed"
        )

    async def _save_execution(self, record: ExecutionRecord) -> None:
        await workflow.execute_local_activity(
            SAVE_EXECUTION,
            record,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"record {record.status} {record.id}",
        )

    # ----------------------------------------------------------------- messages
    @workflow.query(name="state")
    def query_state(self) -> TaskState:
        """The task's current state."""
        return self._state

    @workflow.signal(name="cancel")
    def cancel_signal(self, reason: str | None = None) -> None:
        """Cancel the task; a running job is cancelled through its heartbeats."""
        self._request_cancel(reason)

    @workflow.signal(name="pause")
    def pause_signal(self, reason: str | None = None) -> None:
        """Stop starting runs until resumed."""
        self._pause(reason)

    @workflow.signal(name="resume")
    def resume_signal(self) -> None:
        """Start runs again."""
        self._resume()

    @workflow.signal(name="trigger")
    def trigger_signal(self) -> None:
        """Run the job now, outside the schedule."""
        self._trigger()

    @workflow.update(name="cancel_task")
    async def cancel_update(self, reason: str | None = None) -> TaskState:
        """Cancel the task and answer with its state."""
        self._request_cancel(reason)
        return self._state

    @cancel_update.validator
    def _validate_cancel(self, reason: str | None = None) -> None:
        self._refuse_if_final("cancelled")

    @workflow.update(name="pause_task")
    async def pause_update(self, reason: str | None = None) -> TaskState:
        """Pause the task and answer with its state."""
        self._pause(reason)
        await self._save()
        return self._state

    @pause_update.validator
    def _validate_pause(self, reason: str | None = None) -> None:
        self._refuse_if_final("paused")

    @workflow.update(name="resume_task")
    async def resume_update(self) -> TaskState:
        """Resume the task and answer with its state."""
        self._resume()
        await self._save()
        return self._state

    @resume_update.validator
    def _validate_resume(self) -> None:
        self._refuse_if_final("resumed")

    @workflow.update(name="trigger_task")
    async def trigger_update(self) -> TaskState:
        """Queue a run now and answer with the task's state."""
        self._trigger()
        return self._state

    @trigger_update.validator
    def _validate_trigger(self) -> None:
        self._refuse_if_final("triggered")

    @workflow.update(name="replay_run")
    async def replay_update(self, request: ReplayRequest) -> TaskState:
        """Run a dead-lettered run again, under its own execution id."""
        self._state.queue.append(
            QueuedRun(scheduled_at=request.scheduled_at, trigger=Trigger.REPLAY,
                      execution_id=request.execution_id)
        )
        self._wake = True
        return self._state

    @replay_update.validator
    def _validate_replay(self, request: ReplayRequest) -> None:
        self._refuse_if_final("replayed")
        if not request.execution_id.startswith(f"{self._state.task_id}:"):
            raise ApplicationError("that execution is not one of this task's", non_retryable=True)

    @workflow.update(name="update_task")
    async def update_task(self, changes: TaskChanges) -> TaskState:
        """Change the task; the sleeping workflow re-plans at once."""
        state = self._state
        new_spec = changes.apply_to(state.spec)
        changed = {
            name
            for name in SCHEDULE_FIELD_NAMES
            if getattr(new_spec, name) != getattr(state.spec, name)
        }
        state.spec = new_spec
        if changed and changed <= BOUND_FIELD_NAMES:
            if self._series:
                # Its fires were chosen under the old bounds: they come back and are re-bound.
                self._withdraw_waiting("rebound")
            state.next_fire_at = self._limit_runs(self._rebound(state.next_fire_at))
        elif changed:
            now = workflow.now()
            self._withdraw_waiting("rescheduled")
            state.anchor = now
            state.run_count = 0 if new_spec.schedule_type is ScheduleType.ONCE else state.run_count
            state.next_fire_at = self._limit_runs(first_fire(new_spec, now))
            # Runs waiting under the old schedule are dropped, and recorded as such.
            asked = (Trigger.MANUAL, Trigger.REPLAY)
            dropped = [q for q in state.queue if q.trigger not in asked]
            state.queue = [q for q in state.queue if q.trigger in asked]
            for old in dropped:
                await self._record_skip(old.scheduled_at, "rescheduled")
        self._wake = True
        await self._save()
        return state

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

    @update_task.validator
    def _validate_update(self, changes: TaskChanges) -> None:
        self._refuse_if_final("updated")
        check_timing(changes.apply_to(self._state.spec), workflow.now())

    def _refuse_if_final(self, verb: str) -> None:
        state = self._state
        if state.status in FINAL_STATUSES or state.cancel_requested:
            status = "being cancelled" if state.status not in FINAL_STATUSES else state.status.value
            raise ApplicationError(
                f"task is {status} and can no longer be {verb}",
                type="TaskFinished",
                non_retryable=True,
            )

    def _request_cancel(self, reason: str | None) -> None:
        if self._state.status in FINAL_STATUSES:
            return
        self._state.cancel_requested = True
        self._state.status_reason = reason or "cancelled"
        self._wake = True

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

    def _resume(self) -> None:
        state = self._state
        if not state.paused:
            return
        state.paused = False
        state.status_reason = None
        state.consecutive_failures = 0
        if state.spec.schedule_type is not ScheduleType.ONCE:
            # Fires that fell inside the pause are recorded as skipped, not caught up. A
            # one-time task's fire is left to its missed-run policy instead.
            state.resumed_at = workflow.now()
        self._refresh_status()
        self._wake = True

    def _trigger(self) -> None:
        if self._state.status in FINAL_STATUSES:
            return
        self._state.queue.append(QueuedRun(scheduled_at=workflow.now(), trigger=Trigger.MANUAL))
        self._wake = True


def _describe(spec: TaskSpec) -> str:
    if spec.schedule_type is ScheduleType.CRON:
        return f"cron {spec.cron} {spec.timezone}"
    if spec.schedule_type is ScheduleType.INTERVAL:
        return f"every {spec.interval_seconds:g}s {spec.interval_mode.value}"
    return f"once at {spec.run_at.isoformat() if spec.run_at else '?'}"


def _describe_job(spec: TaskSpec) -> str:
    job = spec.job_details
    if isinstance(job, HttpJob):
        return f"{job.method} {redact_url(job.url)}"
    if isinstance(job, HandlerJob):
        return f"handler {job.name}"
    return f"workflow {job.workflow_type}"


def _failure_status(err: ActivityError) -> tuple[ExecutionStatus, str]:
    cause = err.cause
    if isinstance(cause, CancelledError):
        return ExecutionStatus.CANCELLED, "cancelled while running"
    message = str(cause) if cause is not None else str(err)
    return ExecutionStatus.FAILED, message[:2000]


def _seconds(moment: datetime | None) -> int | None:
    """Search attributes keep datetimes to the second (or so): compare at that precision."""
    return None if moment is None else int(moment.timestamp())


def _run_epoch_ms() -> int:
    return int(workflow.info().start_time.timestamp() * 1000)


def _is_withdrawn(err: ActivityError) -> bool:
    return _failure_type(err) == WITHDRAWN


def _failure_type(err: ActivityError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def _failure_details(err: ActivityError) -> JobFailureDetails | None:
    cause = err.cause
    return JobFailureDetails.of(cause.details) if isinstance(cause, ApplicationError) else None
