"""The task workflow's input and state: pure models shared by the workflow, the API and tests."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from activities.options import RunOptions
from activities.payloads import Notification, Record
from scheduling.calendars import CalendarDates, CalendarPlan
from scheduling.fire import first_fire
from scheduling.policy import Flight, Position, Probe, Run, instant_of, on_resume, runs_left
from scheduling.spec import TaskSpec
from scheduling.status import (
    FINAL_STATUSES,
    ExecutionStatus,
    ResumeMissed,
    TaskStatus,
    Trigger,
    execution_id,
)
from store.models import ExecutionRecord, TaskSnapshot

# The keyed updates a task's workflow keeps the ids of, across continue-as-new: Temporal drops
# a repeated update id only within one workflow run.
KEPT_UPDATE_IDS = 64


def update_id(name: str, request_id: str | None) -> str:
    """An update's id: ``<name>-<request id>`` for a request under an Idempotency-Key (the same
    on every retry, and with no '-' in the request id), else ``<name>-<uuid4>``."""
    return f"{name}-{request_id or uuid.uuid4()}"


def keyed(update: str) -> bool:
    """Whether an update id (update_id) is a keyed request's."""
    _, dash, rest = update.partition("-")
    return bool(dash and rest) and "-" not in rest


class ReplayRequest(BaseModel):
    """Run a dead-lettered execution again under its own id (and Idempotency-Key)."""

    execution_id: str
    scheduled_at: datetime
    actor: str | None = Field(default=None, description="who asked (the API key's id)")


class BackfillItem(BaseModel):
    """One past instant a backfill runs again, and what its row said before (None: no row)."""

    scheduled_at: datetime
    earlier: str | None = None


class BackfillRequest(BaseModel):
    """Run these past instants of the schedule again, oldest first, trigger ``backfill``."""

    mode: str
    start: datetime
    end: datetime
    instants: list[BackfillItem]
    actor: str | None = Field(default=None, description="who asked: the API key's id")


# Why a backfill stopped when its task's workflow was restarted from the row (the instants
# it had left are not in the row).
RESTARTED = "restarted"


class Backfill(BaseModel):
    """A backfill of the task: what it was asked, how far it got, and what is left."""

    mode: str
    start: datetime
    end: datetime
    total: int
    started: int = 0
    status: str = Field(default="running", description="running | done | stopped")
    reason: str | None = Field(default=None, description="why it stopped (paused, cancelled)")
    asked_at: datetime
    pending: list[BackfillItem] = Field(default_factory=list, description="not started yet")
    current: BackfillItem | None = Field(default=None, description="the one running")
    undecided_from: datetime | None = Field(
        default=None, description="the next fire when it was asked: the instants from there on "
        "are the schedule's to decide, not the backfill's")
    held: list[str] = Field(default_factory=list, description="the execution ids queued or in "
                            "flight when it was asked: they run once, as the schedule decided")
    unrecorded_stop: bool = Field(default=False, description="stopped by a restart from the "
                                  "row; the restarted workflow records it, once")

    def decided_since(self, item: BackfillItem, run_id: str) -> bool:
        """The workflow has decided (or run) ``item``'s instant since the backfill was asked,
        or has still to: ``missing`` and ``failed`` leave it to the schedule."""
        if self.mode not in ("missing", "failed"):
            return False
        return run_id in self.held or (self.undecided_from is not None
                                       and item.scheduled_at >= self.undecided_from)

    @property
    def running(self) -> bool:
        """Instants are left to start, or one is running."""
        return self.status == "running"

    def stop(self, reason: str) -> None:
        """Start no more instants: the ones left keep their rows as they are."""
        if self.running:
            self.status, self.reason = "stopped", reason

    def shown(self) -> dict[str, Any]:
        """Its progress as the task row and every answer show it."""
        return {**self.model_dump(mode="json", exclude={"pending", "current", "undecided_from", "held",
                                                        "unrecorded_stop"}),
                "left": len(self.pending)}


class LastRun(BaseModel):
    """The most recent finished run."""

    execution_id: str
    scheduled_at: datetime
    status: ExecutionStatus
    finished_at: datetime | None = None
    error: str | None = None


class TaskState(BaseModel):
    """Everything the workflow knows; carried whole across continue-as-new."""

    task_id: str
    tenant_id: str
    spec: TaskSpec
    created_at: datetime
    anchor: datetime = Field(description="where a fixed-rate interval counts from")
    status: TaskStatus = TaskStatus.PENDING
    status_reason: str | None = None
    next_fire_at: datetime | None = Field(default=None, description="next scheduled time")
    paused: bool = False
    paused_at: datetime | None = Field(
        default=None, description="when the last pause was asked: fires due before it are "
        "missed, not paused (None in workflows older than this rule)")
    resumed_at: datetime | None = Field(
        default=None, description="fires up to this instant fell inside a pause"
    )
    cancel_requested: bool = False
    cancelled_at: datetime | None = None  # when the cancel was asked (None: not kept)
    queue: list[Run] = Field(default_factory=list, description="runs waiting to start")
    latest_taken: datetime | None = Field(
        default=None, description="the newest fire taken from the schedule (decided or sent)")
    last_run: LastRun | None = None
    executed: int = Field(default=0, description="scheduled runs that ran (max_runs counts these)")
    manual_runs: int = Field(default=0, description="manual runs asked for (numbers their ids)")
    success_count: int = 0
    failure_count: int = 0
    skipped_count: int = 0
    cancelled_count: int = 0
    consecutive_failures: int = 0
    running: list[str] = Field(default_factory=list, description="execution ids in flight")
    in_flight: Flight = Field(default_factory=Flight, description="how the policy counts them")
    waiting: list[datetime] = Field(
        default_factory=list, description="instants of the runs sent ahead of them whose fires "
        "are still to run (withdrawn ones too while their fires go back to the schedule)")
    started_before_cancel: list[str] = Field(
        default_factory=list, description="runs whose job had started when the task's cancel "
        "reached it: cancelled through their heartbeats, or ended first")
    notifications: list[Notification] = Field(
        default_factory=list, description="webhook deliveries not yet done (resent after a "
        "continue-as-new)")
    continued_as_new: int = 0
    spec_version: int = Field(default=1, description="1 at create, one more with every spec change")
    wake_lag_seconds: float = Field(
        default=0.0, description="how late the last timer fired: the dispatch lead grows with it"
    )
    crowd: int = Field(
        default=0, ge=0, description="the herd it was created into: tasks due in its first "
        "run's second, created before it (policy.herd_lead); once its schedule is retimed, the "
        "herd the update counted for its new next run (policy.retimed_crowd)")
    probe: Probe | None = Field(
        default=None, description="auto-paused by the breaker: the next probe run and its "
        "cool-down (auto_resume_after_seconds)")
    probing: str | None = Field(default=None, description="the execution id of the probe queued "
                                "or in flight")
    backfill: Backfill | None = Field(default=None, description="the latest backfill")
    calendar_dates: list[CalendarDates] = Field(
        default_factory=list, description="the excluded dates of exclude_calendars, as last read")
    applied_updates: list[str] = Field(
        default_factory=list, description="the ids of the last keyed updates applied "
        "(KEPT_UPDATE_IDS): a retry that reaches a later run of the workflow acts no more")
    unstarted_at: datetime | None = Field(
        default=None, description="the instant of the oldest run sent and not reported started, "
        "or queued (None in workflows older than this field): the overdue check reads it")
    # The plan calendar() built last, with the spec and the dates it was built of.
    _calendar: tuple[TaskSpec, list[CalendarDates], CalendarPlan] | None = PrivateAttr(default=None)

    @property
    def run_count(self) -> int:
        """Runs that ran and ended, whatever started them."""
        return self.success_count + self.failure_count + self.cancelled_count

    def snapshot(self, next_run_at: datetime | None, updated_at: datetime) -> TaskSnapshot:
        """The task's row as this state makes it, the one way every path builds it: the
        workflow writes it, the reconciler repairs a missing row and the API answers with it."""
        last = self.last_run
        derived: dict[str, Any] = {
            "name": self.spec.task_name, "schedule_type": self.spec.schedule_type.value,
            "spec": self.spec.model_dump(mode="json"), "status": self.status.value,
            "next_run_at": next_run_at, "run_count": self.run_count,
            "last_run_at": last.scheduled_at if last else None,
            "last_run_status": last.status.value if last else None,
            "last_execution_id": last.execution_id if last else None,
            "next_probe_at": self.probe.at if self.probe else None,
            "updated_at": updated_at,
            "backfill": self.backfill.shown() if self.backfill else None,
        }
        # Every other column is this state's field of the same name (the ids, the counters,
        # status_reason, created_at): a new one needs no line here.
        kept = (TaskSnapshot.model_fields.keys() & TaskState.model_fields.keys()) - derived.keys()
        return TaskSnapshot(**{name: getattr(self, name) for name in kept}, **derived)

    def count(self, record: ExecutionRecord, trigger: Trigger, *, rerun: bool = False) -> None:
        """Count a run that ran and ended; it is the last run now. A ``rerun`` (a replay of a
        dead letter, under its own id) is no new run: its outcome replaces the failure."""
        status = ExecutionStatus(record.status)
        if rerun and self.failure_count:
            self.failure_count -= 1
        if status is ExecutionStatus.COMPLETED:
            self.success_count += 1
            self.consecutive_failures = 0
        elif status is ExecutionStatus.FAILED:
            self.failure_count += 1
            self.consecutive_failures += 1
        else:
            self.cancelled_count += 1
        if trigger.scheduled:
            self.executed += 1
        self.last_run = LastRun(execution_id=record.id, scheduled_at=record.scheduled_at,
                                status=status, finished_at=record.finished_at, error=record.error)

    def request_cancel(self, reason: str | None, now: datetime | None = None) -> bool:
        """Ask the task to end CANCELLED; False once it has ended."""
        if self.status in FINAL_STATUSES:
            return False
        if not self.cancel_requested:
            self.cancelled_at = now
        self.cancel_requested, self.status_reason = True, reason or "cancelled"
        self.probe = None  # a cancel ends the breaker's cool-down
        return True

    def pause(self, reason: str | None, now: datetime | None) -> bool:
        """Stop starting runs from ``now``; False when ended or already paused."""
        if self.status in FINAL_STATUSES or self.paused:
            return False
        self.paused, self.paused_at, self.status_reason = True, now, reason or "paused"
        return True

    def resume(self, now: datetime, missed: ResumeMissed = ResumeMissed.SKIP) -> bool:
        """Start runs again, the failure streak and the breaker's cool-down forgotten; False
        when not paused. Fires inside the pause are recorded as skipped, or decided by the
        missed-run policy (``missed``, ``policy.on_resume``); a one-time task's fire is left
        to its missed-run policy."""
        if not self.paused:
            return False
        self.paused, self.status_reason, self.consecutive_failures = False, None, 0
        self.probe = self.probing = None
        self.resumed_at = on_resume(self.position(), missed, now).resumed_at
        return True

    def repeated_update(self, update: str | None) -> bool:
        """Whether a keyed update was applied already (by an earlier run of the workflow);
        else it is noted as applied now."""
        if update is None or not keyed(update):
            return False
        if update in self.applied_updates:
            return True
        self.applied_updates = [*self.applied_updates, update][-KEPT_UPDATE_IDS:]
        return False

    def add_manual_run(self, now: datetime) -> bool:
        """Queue a run outside the schedule, numbered; False once ended or being cancelled."""
        if self.status in FINAL_STATUSES or self.cancel_requested:
            return False
        self.manual_runs += 1
        self.queue.append(Run(scheduled_at=now, trigger=Trigger.MANUAL, execution_id=execution_id(
            self.task_id, now, Trigger.MANUAL, self.manual_runs)))
        return True

    def add_replay(self, request: ReplayRequest) -> None:
        """Queue a dead-lettered run again, under its own execution id, unless that run is
        queued or in flight already (a workflow run started for this very replay)."""
        if request.execution_id in self.running or any(
                run.execution_id == request.execution_id for run in self.queue):
            return
        self.queue.append(Run(scheduled_at=request.scheduled_at, trigger=Trigger.REPLAY,
                              execution_id=request.execution_id))

    def refresh_status(self, *, running: bool, paused_first: bool = True) -> None:
        """PAUSED while paused (a run going on finishes; the row must keep the pause), else
        RUNNING while a run has started, else PENDING. (Histories recorded before this rule
        put RUNNING first: ``paused_first=False`` replays them.)"""
        if self.paused and (paused_first or not running):
            self.status = TaskStatus.PAUSED
        else:
            self.status = TaskStatus.RUNNING if running else TaskStatus.PENDING

    def closed_to(self, verb: str) -> str | None:
        """Why the task can no longer be ``verb`` (ended or being cancelled), or None."""
        if self.status in FINAL_STATUSES:
            return f"task is {self.status.value} and can no longer be {verb}"
        if self.cancel_requested:
            return f"task is being cancelled and can no longer be {verb}"
        return None

    def finish(self, status: TaskStatus, reason: str | None) -> None:
        """The task has ended: nothing more is scheduled or queued."""
        self.status, self.status_reason = status, reason
        self.next_fire_at, self.queue, self.probe = None, [], None

    def next_instant(self) -> datetime | None:
        """When the next fire runs (its jitter included); None while paused."""
        if self.paused or self.next_fire_at is None:
            return None
        if self.spec.exclude_calendars:
            return self.position().instant(self.next_fire_at)
        return instant_of(self.spec, self.task_id, self.next_fire_at, self.spec.jitter_seconds)

    def next_run_at(self, now: datetime, *, reported: bool = True) -> datetime | None:
        """The task's next run, as every answer, the row and NextRunAt show it: the soonest
        instant still to come of a run waiting for it or of the next fire (jitter included);
        None while paused or being cancelled (``reported`` False: histories from before
        reported-starts, which showed it while being cancelled)."""
        if self.paused or (reported and self.cancel_requested):
            return None
        return min((i for i in [*self.waiting, self.next_instant()] if i is not None and i > now),
                   default=None)

    def runs_left(self, spec: TaskSpec) -> int | None:
        """Scheduled runs ``spec``'s max_runs still allows the task, beyond those it has run,
        those in flight and those queued (``policy.runs_left``)."""
        return runs_left(replace(self.position(), spec=spec), self.in_flight)

    def position(self) -> Position:
        """Where the schedule stands, for the policy engine."""
        return Position(spec=self.spec, task_id=self.task_id, anchor=self.anchor,
                        next_fire_at=self.next_fire_at, executed=self.executed,
                        paused=self.paused, paused_at=self.paused_at,
                        resumed_at=self.resumed_at, queue=tuple(self.queue),
                        latest_taken=self.latest_taken, calendar=self.calendar())

    def calendar(self) -> CalendarPlan | None:
        """The task's calendars and their dates as last read; None when it names none. Built
        once per spec and read (each fire asks for it a score of times, and 10 calendars of
        2,000 dates take a millisecond to build)."""
        if not self.spec.exclude_calendars:
            return None
        built = self._calendar
        if built is None or built[1] is not self.calendar_dates or built[0] is not self.spec:
            plan = CalendarPlan.of(self.spec.exclude_calendars, self.calendar_dates, self.spec.zone())
            self._calendar = built = (self.spec, self.calendar_dates, plan)
        return built[2]


class TaskWorkflowInput(BaseModel):
    """Start input of TaskWorkflow; ``state`` is set when continuing as new."""

    task_id: str
    tenant_id: str
    spec: TaskSpec
    created_at: datetime
    state: TaskState | None = None
    actor: str | None = Field(default=None, description="who started it: the API key's id "
                              "for a create, the reconciler for a restart")
    crowd: int = Field(default=0, ge=0, description="tasks due in the first run's second, "
                       "created before this one (a create counts them)")
    release: int = Field(default=0, ge=0, description="the workflow code's release of its "
                         "starter (activities/options.py RELEASE; 0: started before inputs said)")
    unwritten: Record | None = Field(
        default=None, description="rows and events the run before had not written yet (the "
        "database refused them): this run writes them first")
    # Runtime options are the workflow worker's (RunOptions, asked once per workflow run); the
    # starters of older workflows froze them here, and the runs recorded so replay with them.
    history_limit: int | None = Field(default=None, description="set by older starters only")
    lead_seconds: float | None = Field(default=None, ge=0, description="set by older starters only")
    max_lead_seconds: float | None = Field(default=None, ge=0,
                                           description="set by older starters only")

    def initial_state(self) -> TaskState:
        """The state the workflow starts from: the one carried over, or a new task's."""
        return self.state or TaskState(
            task_id=self.task_id, tenant_id=self.tenant_id, spec=self.spec,
            created_at=self.created_at, anchor=self.created_at,
            next_fire_at=first_fire(self.spec, self.created_at), crowd=self.crowd,
        )

    def frozen_options(self) -> RunOptions:
        """The options an older starter froze into this input, the defaults for those it left
        out (a run recorded before the worker owned them replays with these)."""
        frozen = {"history_limit": self.history_limit, "lead_seconds": self.lead_seconds,
                  "max_lead_seconds": self.max_lead_seconds}
        return RunOptions.model_validate({k: v for k, v in frozen.items() if v is not None})
