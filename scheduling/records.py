"""Plain records the workflow hands to bookkeeping: no I/O here, safe to import in workflows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class TaskSnapshot(BaseModel):
    """The task's current state as the workflow sees it; newer state_version wins."""

    task_id: str
    tenant_id: str
    name: str
    schedule_type: str
    spec: dict[str, Any]
    status: str
    status_reason: str | None = None
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_run_status: str | None = None
    last_execution_id: str | None = None
    run_count: int = 0
    success_count: int = 0
    failure_count: int = 0
    skipped_count: int = 0
    consecutive_failures: int = 0
    state_version: int = 0
    created_at: datetime
    updated_at: datetime

    @property
    def id(self) -> str:
        """The task id under the name of the row's column (so it reads like a row)."""
        return self.task_id


class ExecutionRecord(BaseModel):
    """One execution row as it stands; a final status is never overwritten by RUNNING."""

    id: str
    task_id: str
    tenant_id: str
    scheduled_at: datetime
    trigger: str = "schedule"
    status: str
    reason: str | None = None
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    http_status: int | None = None
    response_snippet: str | None = None
    error: str | None = None
    instant: datetime | None = None  # what the run aimed at: scheduled_at plus its jitter
    lateness_ms: float | None = None  # its start after the instant
    drifted: bool = False
    dead_letter: str | None = None
