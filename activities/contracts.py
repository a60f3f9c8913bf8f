"""Inputs and outputs of the job activity; pure models, imported by the workflow too."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from scheduling.spec import HandlerJob, HttpJob, WorkflowJob
from store.records import ExecutionRecord, TaskSnapshot

RUN_JOB = "run_job"
SAVE_TASK = "save_task"
SAVE_EXECUTION = "save_execution"
RECORD_RUN = "record_run"
NOTIFY = "notify"
WITHDRAWN = "Withdrawn"
MISSED = "Missed"


def jobs_queue(task_queue: str) -> str:
    """The task queue of job activities: its own slots, so runs waiting for their instant
    never starve workflow and bookkeeping work."""
    return f"{task_queue}-jobs"


class JobInput(BaseModel):
    """One run of a task's job."""

    execution_id: str
    task_id: str
    tenant_id: str
    scheduled_at: datetime
    job: HttpJob | HandlerJob | WorkflowJob
    not_before: datetime | None = None
    trigger: str = "schedule"
    drift_threshold_seconds: float | None = None
    run_timeout_seconds: float = 3600.0
    skip_if_late_seconds: float | None = Field(
        default=None, description="a retry that never started and is this late is missed"
    )


class JobResult(BaseModel):
    """What a successful run returned."""

    attempt: int = 1
    started_at: datetime | None = None
    http_status: int | None = None
    response_snippet: str | None = None
    output: Any = None


class JobFailureDetails(BaseModel):
    """Carried in the ApplicationError details of a failed attempt."""

    attempt: int = 1
    started_at: datetime | None = None
    http_status: int | None = None
    response_snippet: str | None = None


class RunRecord(BaseModel):
    """A finished run's row and the task row after it, written together."""

    execution: ExecutionRecord
    snapshot: TaskSnapshot | None = None


class Notification(BaseModel):
    """One event delivered to a task's notification webhook."""

    url: str
    event: str
    task_id: str
    tenant_id: str
    task_name: str
    execution_id: str | None = None
    detail: str | None = None
    at: datetime
