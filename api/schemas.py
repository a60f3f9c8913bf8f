"""Request and response bodies of the REST API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from scheduling.spec import TaskChanges, TaskSpec
from store.models import TaskExecution
from store.tasks import TaskView
from workflows.state import TaskState

CREATE_EXAMPLES: dict[str, Any] = {
    "cron-http": {
        "summary": "Every day at 10:00 Berlin time, call a webhook",
        "value": {
            "task_name": "daily-report",
            "job_details": {"type": "http", "url": "https://example.com/hooks/report",
                            "method": "POST", "body": {"report": "daily"}},
            "schedule_type": "cron",
            "cron": "0 10 * * *",
            "timezone": "Europe/Berlin",
        },
    },
    "once-handler": {
        "summary": "Once, at an instant, run a registered handler",
        "value": {
            "task_name": "send-welcome",
            "job_details": {"type": "handler", "name": "log", "args": {"user": 42}},
            "schedule_type": "once",
            "run_at": "2030-01-01T09:00:00Z",
        },
    },
    "interval-workflow": {
        "summary": "Every 15 minutes, start an existing Temporal workflow",
        "value": {
            "task_name": "sync-inventory",
            "job_details": {"type": "workflow", "workflow_type": "SyncInventory",
                            "task_queue": "inventory", "args": ["eu"]},
            "schedule_type": "interval",
            "interval_seconds": 900,
            "interval_mode": "fixed_delay",
        },
    },
}


class TaskCreate(TaskSpec):
    """Body of POST /task/create and /task/recurring."""


class TaskUpdate(TaskChanges):
    """Body of POST /task/update: the task id and the fields to change."""

    task_id: str = Field(min_length=1, max_length=64)

    def changes(self) -> TaskChanges:
        """The requested changes without the task id."""
        fields = self.model_dump(exclude_unset=True, exclude={"task_id"})
        return TaskChanges.model_validate(fields)


class TaskCancel(BaseModel):
    """Body of PATCH /task/cancel."""

    model_config = ConfigDict(extra="forbid")
    task_id: str = Field(min_length=1, max_length=64)
    task_name: str | None = Field(default=None, max_length=200)
    reason: str | None = Field(default=None, max_length=500)


class PauseRequest(BaseModel):
    """Optional body of POST /tasks/{id}/pause."""

    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=500)


class LastRunOut(BaseModel):
    execution_id: str
    status: str
    scheduled_at: datetime


TASK_EXAMPLE: dict[str, Any] = {
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "task_name": "daily-report", "tenant_id": "growth",
    "status": "PENDING", "status_reason": None, "schedule_type": "cron",
    "schedule": {"schedule_type": "cron", "cron": "0 10 * * *", "timezone": "Europe/Berlin",
                 "priority": "medium", "overlap_policy": "skip"},
    "job_details": {"type": "http", "url": "https://example.com/hooks/report", "method": "POST"},
    "next_run_at": "2026-12-01T09:00:00Z",
    "last_run": {"execution_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
                 "status": "COMPLETED", "scheduled_at": "2026-11-30T09:00:00Z"},
    "run_count": 12, "success_count": 12, "failure_count": 0, "skipped_count": 0,
    "consecutive_failures": 0, "created_at": "2026-11-18T08:12:40Z", "updated_at": "2026-11-30T09:00:01Z",
}
EXECUTION_EXAMPLE: dict[str, Any] = {
    "id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4:2026-11-30T09:00:00.000Z",
    "task_id": "5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4", "scheduled_at": "2026-11-30T09:00:00Z",
    "trigger": "schedule", "status": "COMPLETED", "reason": None, "attempts": 1,
    "started_at": "2026-11-30T09:00:00.004Z", "finished_at": "2026-11-30T09:00:00.210Z",
    "http_status": 200, "response_snippet": "{\"ok\": true}", "error": None,
    "lateness_ms": 4.0, "drifted": False, "dead_letter": None,
}


class TaskOut(BaseModel):
    """A task as the API shows it."""

    model_config = ConfigDict(json_schema_extra={"examples": [TASK_EXAMPLE]})

    task_id: str
    task_name: str
    tenant_id: str
    status: str
    status_reason: str | None = None
    schedule_type: str
    schedule: dict[str, Any]
    job_details: dict[str, Any]
    next_run_at: datetime | None
    last_run: LastRunOut | None = None
    run_count: int
    success_count: int
    failure_count: int
    skipped_count: int
    consecutive_failures: int
    created_at: datetime
    updated_at: datetime | None = None

    @classmethod
    def from_row(cls, row: TaskView) -> TaskOut:
        spec = dict(row.spec)
        job = spec.pop("job_details", {})
        spec.pop("task_name", None)
        last = None
        if row.last_execution_id and row.last_run_status and row.last_run_at:
            last = LastRunOut(
                execution_id=row.last_execution_id,
                status=row.last_run_status,
                scheduled_at=row.last_run_at,
            )
        return cls(
            task_id=row.id,
            task_name=row.name,
            tenant_id=row.tenant_id,
            status=row.status,
            status_reason=row.status_reason,
            schedule_type=row.schedule_type,
            schedule=spec,
            job_details=job,
            next_run_at=row.next_run_at,
            last_run=last,
            run_count=row.run_count,
            success_count=row.success_count,
            failure_count=row.failure_count,
            skipped_count=row.skipped_count,
            consecutive_failures=row.consecutive_failures,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    @classmethod
    def from_state(cls, state: TaskState) -> TaskOut:
        spec = state.spec.model_dump(mode="json")
        job = spec.pop("job_details")
        spec.pop("task_name")
        last = None
        if state.last_run is not None:
            last = LastRunOut(
                execution_id=state.last_run.execution_id,
                status=state.last_run.status.value,
                scheduled_at=state.last_run.scheduled_at,
            )
        return cls(
            task_id=state.task_id,
            task_name=state.spec.task_name,
            tenant_id=state.tenant_id,
            status=state.status.value,
            status_reason=state.status_reason,
            schedule_type=state.spec.schedule_type.value,
            schedule=spec,
            job_details=job,
            next_run_at=state.next_instant(),
            last_run=last,
            run_count=state.run_count,
            success_count=state.success_count,
            failure_count=state.failure_count,
            skipped_count=state.skipped_count,
            consecutive_failures=state.consecutive_failures,
            created_at=state.created_at,
        )


class TaskPage(BaseModel):
    """One page of tasks, newest first."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [TASK_EXAMPLE], "next_cursor": "MjAyNi0xMS0xOFQw"}]}
    )

    items: list[TaskOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class ExecutionOut(BaseModel):
    """One run, or one recorded skip, of a task."""

    model_config = ConfigDict(from_attributes=True, json_schema_extra={"examples": [EXECUTION_EXAMPLE]})

    id: str
    task_id: str
    scheduled_at: datetime
    trigger: str
    status: str
    reason: str | None
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    http_status: int | None
    response_snippet: str | None
    error: str | None
    lateness_ms: float | None = Field(default=None, description="actual start minus scheduled time")
    drifted: bool = Field(default=False, description="started later than the drift threshold")
    dead_letter: str | None = Field(
        default=None, description="open (replayable), replayed or dismissed, for failed runs"
    )

    @classmethod
    def from_row(cls, row: TaskExecution) -> ExecutionOut:
        return cls.model_validate(row)


class DeadLetterOut(ExecutionOut):
    """A run that exhausted its retries, with its task's name."""

    task_name: str


class DeadLetterPage(BaseModel):
    """One page of open dead letters, newest first."""

    items: list[DeadLetterOut]
    next_cursor: str | None


class ExecutionPage(BaseModel):
    """One page of a task's executions, newest first."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [EXECUTION_EXAMPLE], "next_cursor": None}]}
    )

    items: list[ExecutionOut]
    next_cursor: str | None


class Health(BaseModel):
    status: str
    checks: dict[str, Any]


class ProblemField(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    type: str = Field(description="stable URI naming the kind of problem")
    title: str
    status: int
    detail: str = Field(description="what went wrong, naming the field at fault")
    field: str | None = None
    errors: list[ProblemField] | None = None


def problem_responses(codes: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for error codes, all problem+json."""
    schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    inline = {k: v for k, v in schema.items() if k != "$defs"}
    inline["properties"]["errors"] = {
        "anyOf": [{"type": "array", "items": ProblemField.model_json_schema()}, {"type": "null"}]
    }
    return {
        code: {"description": text, "content": {"application/problem+json": {"schema": inline}}}
        for code, text in codes.items()
    }
