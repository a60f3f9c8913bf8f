"""The task workflow's input and state: pure models shared by the workflow, the API and tests."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from scheduling.fire import first_fire
from scheduling.spec import TaskSpec


class TaskStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


FINAL_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

# Temporal priority keys of a task's workflow and runs: smaller runs first when a task queue is
# backlogged.
PRIORITY_KEYS = {"high": 1, "medium": 3, "low": 5}


class ExecutionStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


class Trigger(StrEnum):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    REPLAY = "replay"


class QueuedRun(BaseModel):
    """A run waiting for the running one to finish (catch-up, buffered, manual or replay)."""

    scheduled_at: datetime
    trigger: Trigger = Trigger.SCHEDULE
    execution_id: str | None = Field(default=None, description="set for a replayed run")


class ReplayRequest(BaseModel):
    """Run a dead-lettered execution again under its own id (and Idempotency-Key)."""

    execution_id: str
    scheduled_at: datetime


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
    resumed_at: datetime | None = Field(
        default=None, description="fires up to this instant fell inside a pause"
    )
    cancel_requested: bool = False
    queue: list[QueuedRun] = Field(default_factory=list)
    last_run: LastRun | None = None
    run_count: int = Field(default=0, description="scheduled runs started (max_runs counts these)")
    manual_count: int = Field(default=0, description="manual and replayed runs started")
    success_count: int = 0
    failure_count: int = 0
    skipped_count: int = 0
    cancelled_count: int = 0
    consecutive_failures: int = 0
    running: list[str] = Field(default_factory=list, description="execution ids in progress")
    continued_as_new: int = 0
    wake_lag_seconds: float = Field(
        default=0.0, description="how late the last timer fired: the dispatch lead grows with it"
    )


class TaskWorkflowInput(BaseModel):
    """Start input of TaskWorkflow; ``state`` is set when continuing as new."""

    task_id: str
    tenant_id: str
    spec: TaskSpec
    created_at: datetime
    state: TaskState | None = None
    history_limit: int = Field(default=10_000, description="continue-as-new past this length")
    lead_seconds: float = Field(
        default=0.0, ge=0,
        description="dispatch each run this long before its instant; the job waits for the "
        "instant on the worker's clock (0: dispatch at the instant)",
    )
    max_lead_seconds: float = Field(default=60.0, ge=0)

    def initial_state(self) -> TaskState:
        """The state the workflow starts from: the one carried over, or a new task's."""
        return self.state or TaskState(
            task_id=self.task_id, tenant_id=self.tenant_id, spec=self.spec,
            created_at=self.created_at, anchor=self.created_at,
            next_fire_at=first_fire(self.spec, self.created_at),
        )


def workflow_id(task_id: str) -> str:
    """The id of a task's workflow."""
    return f"task-{task_id}"


def execution_id(task_id: str, scheduled_at: datetime, trigger: Trigger = Trigger.SCHEDULE) -> str:
    """The deterministic id of a run: ``<task_id>:<scheduled_at>`` (manual runs are marked)."""
    stamp = scheduled_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{task_id}:manual-{stamp}" if trigger is Trigger.MANUAL else f"{task_id}:{stamp}"
