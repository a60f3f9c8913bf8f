"""TaskWorkflow: one durable workflow per task; sleeps until the next fire, runs the job, obeys
cancel, update, pause, resume and trigger.

This module holds the main loop: when to wake, what is due, what to dispatch ahead. The rest
comes from its layers (``core``, ``records``, ``runs``, ``series``, ``messages``).

Determinism: every time comes from ``workflow.now()``; schedule math is the pure code in
``scheduling`` (passed through the sandbox); side effects happen only in activities.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from scheduling.fire import next_fire
    from scheduling.spec import NotifyEvent, ScheduleType
    from workflows.plan import Decision, plan_due_fires
    from workflows.state import QueuedRun, TaskState, TaskStatus, TaskWorkflowInput, Trigger

from workflows.core import DISPATCH_SLACK, describe_schedule
from workflows.messages import TaskMessages
from workflows.runs import TaskRuns
from workflows.series import MAX_SERIES_IN_FLIGHT, SERIES_PATCH, TaskSeries


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow(TaskMessages, TaskSeries, TaskRuns):
    """A task: a schedule, a job, and the record of every run."""

    @workflow.init
    def __init__(self, start: TaskWorkflowInput) -> None:
        self._input = start
        self._state = start.initial_state()
        self._state.running = []
        # The attributes are declared, with what they hold, on TaskCore.
        self._active = {}
        self._runs = set()
        self._in_flight = 0
        self._wake = False
        self._saved = None
        self._version = 0
        self._instants = {}
        self._withdrawn = {}
        self._notes = set()
        self._series = {}

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
                f"({describe_schedule(state.spec)})"
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

    def _waiting_for_delay(self) -> bool:
        # fixed_delay plans its next fire when the running one completes.
        return self._fixed_delay() and self._in_flight > 0

    def _end_reason(self) -> str | None:
        """Why a task ends without a run of its own to show for it."""
        state = self._state
        if state.spec.schedule_type is ScheduleType.ONCE and state.last_run is None:
            return "its only run was skipped (see its executions for the reason)"
        return None

    def _should_continue_as_new(self) -> bool:
        return not self._in_flight and self._history_long()
