"""Inputs and outputs of the job activity; pure models, imported by the workflow too."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from scheduling.spec import HandlerJob, HttpJob, WorkflowJob
from store.records import ExecutionRecord, TaskSnapshot

RUN_JOB = "run_job"
RUN_SERIES = "run_series"
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

    @classmethod
    def of(cls, details: Sequence[Any]) -> JobFailureDetails | None:
        """The details a failed attempt carried, if it carried them."""
        if not details:
            return None
        try:
            return cls.model_validate(details[0])
        except ValueError:
            return None


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


class SeriesFire(BaseModel):
    """One fire of a series: its run's id, scheduled time and the instant it starts at."""

    execution_id: str
    scheduled_at: datetime
    not_before: datetime


class SeriesInput(BaseModel):
    """Consecutive fires of one task, dispatched together and run on the worker's clock.

    Within the series the activity applies the task's overlap policy (skip or allow), its
    missed-run policy to fires it reaches more than ``missed_after_seconds`` late, its retry
    policy to each run, and stops starting runs once ``max_consecutive_failures`` failed in a row."""

    task_id: str
    tenant_id: str
    job: HttpJob | HandlerJob | WorkflowJob
    fires: list[SeriesFire]
    overlap: str = "skip"
    missed_run_policy: str = "skip"
    max_catchup_runs: int = 100
    catchup_window_seconds: float | None = None
    missed_after_seconds: float = 60.0
    drift_threshold_seconds: float | None = None
    run_timeout_seconds: float = 3600.0
    max_attempts: int = 1
    initial_interval_seconds: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval_seconds: float = 60.0
    max_consecutive_failures: int | None = None
    consecutive_failures: int = 0
    previous_execution_id: str | None = Field(
        default=None, description="the fire before the first, run by the series before this one"
    )


class SeriesOutcome(BaseModel):
    """What became of one fire of a series (its row is written by the activity)."""

    execution_id: str
    scheduled_at: datetime
    status: str
    reason: str | None = None
    error: str | None = None
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lateness_ms: float | None = None
    drifted: bool = False


class SeriesResult(BaseModel):
    """The fires of a series that ended (in instant order) and those never started.

    ``tripped``: the series stopped after the task's consecutive-failure limit."""

    outcomes: list[SeriesOutcome] = Field(default_factory=list)
    unrun: list[datetime] = Field(default_factory=list)
    tripped: bool = False
