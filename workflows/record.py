"""What a task workflow writes down and whom it tells: the task row (versioned, written only
when something a user sees has changed), execution rows, search attributes, metrics and
webhook notifications. Workflow code: rows go through one local activity, batched by the
worker; notifications through an activity that never blocks the task."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.options import NAME_FITS, NEXT_RUN_KEPT, QUIET_STATUS
    from activities.payloads import NOTIFY, RECORD, Notification, Record
    from config.temporal import task_priority
    from scheduling import policy
    from scheduling.spec import NotifyEvent
    from scheduling.status import ExecutionStatus, SkipReason, Trigger, execution_id
    from store.models import ExecutionRecord, TaskEventRecord, TaskSnapshot
    from workflows import attributes, spans
    from workflows.describe import describe_schedule
    from workflows.events import actor_of
    from workflows.state import TaskState

BOOKKEEPING_TIMEOUT = timedelta(seconds=30)
# Room for one workflow run's task row writes in the low bits of state_version.
RUN_WRITES = 1 << 16
# Bookkeeping retries until the database is back: a run's record must never be lost.
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
# A write behind the task backs off between attempts on a workflow timer, never inside the
# workflow task (the SDK retries locally below a minute): the task then answers its messages
# while the database refuses writes.
BACKOFF_ON_TIMER = timedelta(milliseconds=1)
NOTIFY_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30))
# A workflow task that runs a local activity completes, and sends its commands, when the
# activity ends, or when the SDK heartbeats the task: at 80 % of its timeout (10 s, the
# default). So a slow write holds the commands of each workflow task it spans this long. (A
# write into a database that hangs gives up sooner: activities/bookkeeping.py.)
WRITE_HOLDS_COMMANDS = timedelta(seconds=8)
# The rows and events (as JSON) a workflow run may hand to the next when it continues as new
# while the database refuses them: with the state beside them, under Temporal's 2 MiB payload
# limit; about 1,900 rows of some 530 bytes, two histories' worth of a task firing every
# second. Past it, the run waits for the database.
CARRIED_MAX_BYTES = 1_000_000


class TaskRecord:
    """The task's rows, attributes and notifications, for one workflow run."""

    def __init__(self, state: TaskState) -> None:
        self._state = state
        self._saved: TaskSnapshot | None = None
        self._version = 0
        self._pending: list[ExecutionRecord] = []
        self._latest: TaskSnapshot | None = None  # the task row for the writer behind
        self._writer: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        # Workflows started before the task history record no events (set by the workflow).
        self.events_on = False
        # The release of the worker that answered this workflow run's options (set by the
        # workflow): runs recorded on older releases keep the commands they recorded.
        self.release = 0
        self._events: list[TaskEventRecord] = []
        self._event_count = 0
        # Awaited before each write (set by the workflow: a run's cancel goes out first).
        self.before_write: Callable[[], Awaitable[None]] | None = None
        self._writing = False  # a write's local activity is running or backing off
        self._in_flight: Record | None = None  # what the writer behind is writing now

    def add(self, record: ExecutionRecord) -> None:
        """An execution row to write with the next ``write``; counted in the metrics."""
        self._pending.append(record)
        meter = workflow.metric_meter()
        if record.status == ExecutionStatus.SKIPPED:
            meter.create_counter("scheduler_skipped_runs", "fires recorded as skipped, by reason"
                                 ).add(1, {"reason": record.reason or "skipped"})
            return
        meter.create_counter("scheduler_runs", "finished runs by outcome").add(
            1, {"outcome": record.status.lower()})
        if record.dead_letter is not None:
            meter.create_counter("scheduler_dead_letters", "runs dead-lettered").add(1)
        if record.drifted:
            meter.create_counter("scheduler_drift_events",
                                 "runs that started past the drift threshold").add(1)

    def finished(self, record: ExecutionRecord, trigger: Trigger) -> None:
        """A run that ran has ended: complete its row (end, lateness and drift from its
        instant, dead letter), write it with the next ``write`` and tell the webhook of a dead
        letter or a drift."""
        now = workflow.now()
        # The start is the worker's clock, the end the workflow's: never before the start. (A
        # run whose end the server never heard of has the end its jobs worker wrote.)
        if record.finished_at is None:
            record.finished_at = max(now, record.started_at) if record.started_at else now
        if record.started_at is not None:
            lateness = record.started_at - (record.instant or record.scheduled_at)
            record.lateness_ms = max(0.0, lateness.total_seconds() * 1000)
            record.drifted = policy.drifted(self._state.spec, trigger, lateness)
        record.dead_letter = policy.dead_letter_of(ExecutionStatus(record.status), trigger)
        self.add(record)
        if record.dead_letter is not None:
            self.notify(NotifyEvent.FAILED, record.id, record.error)
            self.notify(NotifyEvent.DEAD_LETTERED, record.id, "retries exhausted; replayable")
        if record.drifted:
            workflow.logger.warning("run drifted", extra={"execution_id": record.id})
            self.notify(NotifyEvent.DRIFT, record.id, f"started {record.lateness_ms:.0f} ms late")

    def skip(self, fire: datetime, reason: SkipReason, run_id: str | None = None,
             trigger: Trigger = Trigger.SCHEDULE) -> None:
        """Record a fire (or a run someone asked for) that did not run, and why."""
        state = self._state
        state.skipped_count += 1
        run_id = run_id or execution_id(state.task_id, fire)
        spans.decided(state.spec, "skip", task_id=state.task_id, fire=fire, run_id=run_id,
                      reason=reason.value, trigger=trigger)
        # Its instant, as a run's: the overdue check finds the fire decided by it.
        instant = policy.aimed_instant(state.spec, state.task_id, fire, trigger)
        self.add(ExecutionRecord(
            id=run_id, task_id=state.task_id,
            tenant_id=state.tenant_id, scheduled_at=fire, instant=instant,
            status=ExecutionStatus.SKIPPED, reason=reason.value, finished_at=workflow.now(),
            trigger=trigger, spec_version=state.spec_version))

    def event(self, action: str, actor: str | None, *, detail: dict[str, Any] | None = None,
              spec: bool = False) -> None:
        """Append a change of the task to its history, written with the next write: who made
        it (an API key id; None: a plain Temporal message) and, with ``spec``, the spec after
        it. The id is the workflow run's and the event's count in it: replays and retried
        writes add it once."""
        if not self.events_on:
            return
        state = self._state
        self._event_count += 1
        self._events.append(TaskEventRecord(
            id=f"{state.task_id}:{workflow.info().run_id}:{self._event_count:05d}",
            task_id=state.task_id, tenant_id=state.tenant_id, at=workflow.now(),
            actor=actor_of(actor), action=action, spec_version=state.spec_version,
            spec=state.spec.model_dump(mode="json") if spec else None, detail=detail))

    async def write(self, next_instant: datetime | None) -> None:
        """Write the pending execution rows and the task row, if either has anything new."""
        snapshot = self._versioned(self._snapshot(next_instant))
        executions, self._pending = self._pending, []
        events, self._events = self._events, []
        if snapshot is None and not executions and not events:
            return
        await self._record(Record(executions=executions, snapshot=snapshot, events=events))

    def write_behind(self, next_instant: datetime | None) -> None:
        """Like ``write``, but never waits: one writer coroutine writes the pending rows and
        the newest task row, again and again until nothing is left (``idle``). The task's
        state changes at once while the database refuses writes; its rows catch up."""
        self._latest = self._versioned(self._snapshot(next_instant)) or self._latest
        if (self._latest is not None or self._pending or self._events) and self.idle():
            self._writer = asyncio.create_task(self._write_behind())

    def idle(self) -> bool:
        """Nothing is being written behind the task."""
        return self._writer is None or self._writer.done()

    def unwritten(self) -> Record | None:
        """The rows and events not yet known written, oldest first, for the next workflow run
        (the task row is not: that run writes its own); None when they are more than it takes
        (CARRIED_MAX_BYTES)."""
        flying = self._in_flight or Record()
        carried = Record(executions=[*flying.executions, *self._pending],
                         events=[*flying.events, *self._events])
        return carried if len(carried.model_dump_json()) <= CARRIED_MAX_BYTES else None

    def carry(self, record: Record) -> None:
        """Take the rows and events the workflow run before left unwritten: written first."""
        self._pending = [*record.executions, *self._pending]
        self._events = [*record.events, *self._events]

    def holding(self) -> timedelta:
        """How long the commands of this workflow task may wait for the write in flight (also
        while it backs off between attempts, when it holds nothing: the safe side)."""
        return WRITE_HOLDS_COMMANDS if self._writing else timedelta(0)

    async def _write_behind(self) -> None:
        while self._latest is not None or self._pending or self._events:
            record = Record(executions=self._pending, snapshot=self._latest, events=self._events)
            self._pending, self._latest, self._events = [], None, []
            self._in_flight = record
            try:
                await self._record(record, local_retry_threshold=BACKOFF_ON_TIMER)
            finally:
                self._in_flight = None

    async def _record(self, record: Record, **options: Any) -> None:
        if self.before_write is not None:
            await self.before_write()
        self._writing = True
        try:
            await workflow.execute_local_activity(
                RECORD,
                record,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"record {self._state.status.value}, {len(record.executions)} runs",
                **options,
            )
        finally:
            self._writing = False

    def notify(self, event: NotifyEvent, run_id: str | None, detail: str | None) -> None:
        """Tell the task's webhook, if it asked for this event; never blocks the task."""
        state = self._state
        spec = state.spec
        workflow.logger.info(f"task event {event.value}", extra={"execution_id": run_id})
        if spec.notify is None or event not in spec.notify.events:
            return
        note = Notification(
            url=spec.notify.url, event=event.value, task_id=state.task_id,
            tenant_id=state.tenant_id, task_name=spec.task_name, execution_id=run_id,
            detail=detail, at=workflow.now(),
        )
        state.notifications.append(note)
        self._deliver(note)

    def resend(self) -> None:
        """Deliver again what a workflow run before this one had not delivered yet."""
        for note in self._state.notifications:
            self._deliver(note)

    async def delivered(self) -> None:
        """Return once every notification is delivered or given up on."""
        await workflow.wait_condition(lambda: not self._deliveries)

    def _deliver(self, note: Notification) -> None:
        async def deliver() -> None:
            try:
                await workflow.execute_activity(
                    NOTIFY, note, start_to_close_timeout=timedelta(seconds=15),
                    schedule_to_close_timeout=timedelta(minutes=2), retry_policy=NOTIFY_RETRY,
                    priority=task_priority(self._state.spec.priority, note.tenant_id),
                    summary=f"notify {note.event}",
                )
            except ActivityError:
                workflow.logger.warning(f"notification {note.event} not delivered")
            if note in self._state.notifications:
                self._state.notifications.remove(note)

        task = asyncio.create_task(deliver())
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    def _snapshot(self, next_instant: datetime | None) -> TaskSnapshot:
        # updated_at is set by _versioned, only when something a user sees has changed.
        return self._state.snapshot(next_instant, updated_at=self._state.created_at)

    def _versioned(self, snapshot: TaskSnapshot) -> TaskSnapshot | None:
        """The snapshot to write (None when nothing a user can see has changed)."""
        if self._saved is not None and (snapshot == self._saved or self._sent_ahead(snapshot)):
            return None
        previous, self._saved = self._saved, snapshot
        self._upsert_search_attributes(previous, snapshot)
        # The version orders this run's writes; a continued-as-new run keeps counting upwards.
        self._version += 1
        return snapshot.model_copy(update={
            "updated_at": workflow.now(),
            "state_version": state_version(workflow.info().start_time, self._version),
        })

    def _sent_ahead(self, snapshot: TaskSnapshot) -> bool:
        """Only a run sent ahead of its instant has changed, and the row shows that instant as
        the next run already: the overdue check watches the sooner of the two, so the row says
        the same without a write (one local activity and transaction less per fire)."""
        saved = self._saved
        return (self.release >= QUIET_STATUS and saved is not None and saved.unstarted_at is None
                and snapshot.unstarted_at is not None
                and snapshot.unstarted_at == snapshot.next_run_at == saved.next_run_at
                and snapshot == saved.model_copy(update={"unstarted_at": snapshot.unstarted_at}))

    def _upsert_search_attributes(self, before: TaskSnapshot | None, now: TaskSnapshot) -> None:
        current = workflow.info().typed_search_attributes
        updates: list[SearchAttributeUpdate[Any]] = []
        # Only what differs from what the workflow already carries: every upsert is a
        # visibility write on the server.
        status = attributes.shown_status(now.status, with_runs=self.release < QUIET_STATUS)
        if current.get(attributes.TASK_STATUS) != status:
            updates.append(attributes.TASK_STATUS.value_set(status))
        # Workflow runs of older releases upserted the whole name (a too long one failed them).
        name = attributes.shown_name(now.name) if self.release >= NAME_FITS else now.name
        if current.get(attributes.TASK_NAME) != name:
            updates.append(attributes.TASK_NAME.value_set(name))
        if current.get(attributes.SCHEDULE_TYPE) != now.schedule_type:
            updates.append(attributes.SCHEDULE_TYPE.value_set(now.schedule_type))
        if now.next_run_at is not None:
            if _seconds(current.get(attributes.NEXT_RUN_AT)) != _seconds(now.next_run_at):
                updates.append(attributes.NEXT_RUN_AT.value_set(now.next_run_at))
        elif current.get(attributes.NEXT_RUN_AT) is not None and (
                updates or self.release < NEXT_RUN_KEPT):
            # Alone, the unset waits for the task's next upsert (the next run's instant, its
            # end, a pause, a cancel): the instant of the run going on stays shown, one
            # visibility write less (a one-time task's last run, each fixed_delay run).
            updates.append(attributes.NEXT_RUN_AT.value_unset())
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(
            f"**{now.status}** {now.name}: {describe_schedule(self._state.spec)}; next run "
            f"{now.next_run_at.isoformat() if now.next_run_at else 'none'}; "
            f"{now.run_count} runs, {now.failure_count} failed"
        )


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
