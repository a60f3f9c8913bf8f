"""The task workflow's bookkeeping: the task row, run rows, search attributes and webhook
notifications, all through activities (local ones for the rows, batched by the worker)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        NOTIFY,
        RECORD_RUN,
        SAVE_EXECUTION,
        SAVE_TASK,
        Notification,
        RunRecord,
    )
    from scheduling.spec import NotifyEvent
    from store.records import ExecutionRecord, TaskSnapshot
    from workflows import attributes
    from workflows.state import ExecutionStatus, execution_id

from workflows.core import TaskCore, describe_schedule

BOOKKEEPING_TIMEOUT = timedelta(seconds=30)
# Room for one workflow run's task row writes in the low bits of state_version.
RUN_WRITES = 1 << 16
# Bookkeeping retries until the database is back: a run's record must never be lost.
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
NOTIFY_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30))


class TaskRecords(TaskCore):
    """What the task workflow writes down, and whom it tells."""

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
                "state_version": state_version(workflow.info().start_time, self._version),
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

    async def _save_execution(self, record: ExecutionRecord) -> None:
        await workflow.execute_local_activity(
            SAVE_EXECUTION,
            record,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"record {record.status} {record.id}",
        )

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
            f"**{now.status}** {now.name}: {describe_schedule(self._state.spec)}; next run "
            f"{now.next_run_at.isoformat() if now.next_run_at else 'none'}; "
            f"{now.run_count} runs, {now.failure_count} failed"
        )

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


def _seconds(moment: datetime | None) -> int | None:
    """Search attributes keep datetimes to the second (or so): compare at that precision."""
    return None if moment is None else int(moment.timestamp())


def state_version(run_started: datetime, written: int) -> int:
    """The order of a task row write: the workflow run's start (ms), then the run's own count.

    Later workflow runs (continue-as-new, a reset, a restart) start at least 1 ms later, so
    their writes outrank every write of the runs before them: a run writes fewer than
    RUN_WRITES rows, as each write is a marker event and a history holds at most 51,200
    events. The value fits a signed 64-bit column for runs started up to the year 6400.
    """
    return int(run_started.timestamp() * 1000) * RUN_WRITES + written
