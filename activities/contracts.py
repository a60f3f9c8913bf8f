"""Inputs and outputs of the job activity; pure models, imported by the workflow too."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from scheduling.spec import HandlerJob, HttpJob, WorkflowJob

RUN_JOB = "run_job"
SAVE_TASK = "save_task"
SAVE_EXECUTION = "save_execution"


class JobInput(BaseModel):
    """One run of a task's job."""

    execution_id: str
    task_id: str
    tenant_id: str
    scheduled_at: datetime
    job: HttpJob | HandlerJob | WorkflowJob


class JobResult(BaseModel):
    """What a successful run returned."""

    attempt: int = 1
    http_status: int | None = None
    response_snippet: str | None = None
    output: Any = None


class JobFailureDetails(BaseModel):
    """Carried in the ApplicationError details of a failed attempt."""

    attempt: int = 1
    http_status: int | None = None
    response_snippet: str | None = None
