"""What a task workflow answers: the state query, and the cancel, pause, resume, trigger,
replay and update messages (signals for operators, updates for the API)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from scheduling.fire import first_fire
    from scheduling.spec import ScheduleFields, ScheduleType, TaskChanges, check_timing
    from workflows.state import FINAL_STATUSES, QueuedRun, ReplayRequest, TaskState, Trigger

from workflows.records import TaskRecords

SCHEDULE_FIELD_NAMES = frozenset(ScheduleFields.model_fields)
# Changing only these keeps the schedule's timing as it is (a fixed-rate grid is not re-anchored).
BOUND_FIELD_NAMES = frozenset({"end_date", "max_runs"})


class TaskMessages(TaskRecords):
    """The task workflow's signal, update and query handlers."""

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
