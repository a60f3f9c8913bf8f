"""Inputs and outputs of the job activity; pure models, imported by the workflow too."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.heartbeats import MIN_BEAT_SECONDS
from scheduling.spec import HandlerJob, HttpJob, WorkflowJob
from scheduling.status import JobFailure, Trigger
from store.models import ExecutionRecord, TaskEventRecord, TaskSnapshot

RUN_JOB = "run_job"
RECORD = "record"
NOTIFY = "notify"
# What a jobs worker tells a task's workflow: a run's job started (signal), or may it start
# this late (update: False, or the time of its grant; older workflow code answers True).
RUN_STARTED = "run_started"
# The heartbeat detail of a job that has started: its retry is a retry, not a late start, and
# an attempt that timed out with it had run.
STARTED = "started"
CLAIM_RUN = "claim_run"
# What the jobs worker's row of a run says its job returned (a local activity of the workflow).
COMPLETED_ROW = "completed_row"


class JobInput(BaseModel):
    """One run of a task's job."""

    execution_id: str
    task_id: str
    tenant_id: str
    scheduled_at: datetime
    job: HttpJob | HandlerJob | WorkflowJob
    not_before: datetime | None = Field(default=None, description="the run's instant")
    instant: datetime | None = Field(
        default=None, description="the instant the run aims at (scheduled_at plus its jitter, "
        "policy.aimed_instant), whether or not it was sent ahead: its lateness counts from it")
    sent_at: datetime | None = Field(default=None, description="when the workflow sent it")
    trigger: Trigger = Trigger.SCHEDULE
    spec_version: int | None = Field(default=None, description="the task's spec version it runs under")
    run_timeout_seconds: float = 3600.0
    late_after_seconds: float | None = Field(
        default=None, description="an attempt that would start this long after its instant "
        "(or after it was sent, if later) does not run: it reports Late and the workflow's "
        "policy decides the fire"
    )
    refusable: bool = Field(
        default=True, description="a jobs worker may refuse it while its tenant holds its "
        "share of the slots (activities/share.py); False once it was refused often enough")
    beat_seconds: float = Field(
        default=MIN_BEAT_SECONDS, gt=0, description="how often at most it heartbeats near its "
        "instant while it waits; its workflow withdraws it only further ahead than that "
        "(activities/heartbeats.py)")
    attempts_used: int = Field(
        default=0, ge=0, description="attempts of the run made by job activities before this "
        "one (a jobs worker refused a retry of it): this activity's attempts count on from them")
    started: bool = Field(
        default=False, description="the job of the run started in an earlier attempt: a retry "
        "is no late start")
    carries_attempts: bool = Field(
        default=False, description="its workflow sends a refused retry again with the attempts "
        "made (``attempts_used``), so a jobs worker may refuse retries too; workflows of older "
        "code do not, and their retries are never refused")

    def lateness(self, started: datetime) -> timedelta:
        """How late a start is: after the run's instant (an input sent without one, by an
        older workflow, counts from ``not_before``, else from ``scheduled_at``)."""
        return started - (self.instant or self.not_before or self.scheduled_at)


class RunStart(BaseModel):
    """A jobs worker's word on one attempt of a run: it started, or it asks to start."""

    execution_id: str
    attempt: int = 1
    at: datetime
    # The attempt's activity: a run found untaken and its catch-up share the execution id.
    activity_id: str | None = None
    # A claim that asks for the time of its grant (a workflow of older code answers True).
    timed: bool = False


class AttemptOutcome(BaseModel):
    """What one attempt of a run tells the workflow, whether it succeeded or failed."""

    attempt: int = 1
    started_at: datetime | None = None
    http_status: int | None = None
    response_snippet: str | None = None

    def fill(self, record: ExecutionRecord) -> None:
        """Set the attempt's fields of the run's execution row (the row says attempts)."""
        record.attempts, record.started_at = self.attempt, self.started_at
        record.http_status, record.response_snippet = self.http_status, self.response_snippet


class JobResult(AttemptOutcome):
    """What a successful run returned."""

    output: Any = None


class RowAsk(BaseModel):
    """The run whose row the workflow asks about, and when the run was sent."""

    execution_id: str
    trigger: Trigger
    since: datetime | None = None


class CompletedRun(JobResult):
    """What a run's row says its job returned, and when it ended."""

    finished_at: datetime | None = None


class JobFailureDetails(AttemptOutcome):
    """Carried in the ApplicationError details of a failed attempt."""

    @classmethod
    def of(cls, details: Sequence[Any]) -> JobFailureDetails | None:
        """The details a failed attempt carried, if it carried them."""
        if not details:
            return None
        try:
            return cls.model_validate(details[0])
        except ValueError:
            return None


def job_failure(
    kind: JobFailure, message: str, *, attempt: int | None = None, retryable: bool = True,
    http_status: int | None = None, response_snippet: str | None = None,
) -> ApplicationError:
    """The error of an attempt that failed or did not run, with its attempt's details if given."""
    details = () if attempt is None else (JobFailureDetails(
        attempt=attempt, http_status=http_status, response_snippet=response_snippet,
    ).model_dump(mode="json"),)
    return ApplicationError(message, *details, type=kind, non_retryable=not retryable)


class BusyRefusal(BaseModel):
    """What a jobs worker that gave a run back (its tenant's share full, the worker stopping)
    tells the workflow: how many attempts of the run were made, and whether its job started."""

    attempts_used: int = 0
    started: bool = False

    @classmethod
    def of(cls, details: Sequence[Any]) -> BusyRefusal:
        """The refusal's details; none (an older jobs worker): a first attempt, unstarted."""
        try:
            return cls.model_validate(details[0]) if details else cls()
        except ValueError:
            return cls()


def tenant_busy(message: str, attempt: int, *, started: bool) -> ApplicationError:
    """The refusal of ``attempt`` of a run: its workflow sends the run again
    (workflows/inflight.py), counting on from the attempts made. Benign: the SDK logs it at
    DEBUG and counts no failure."""
    refusal = BusyRefusal(attempts_used=attempt - 1, started=started)
    return ApplicationError(message, refusal.model_dump(mode="json"), type=JobFailure.TENANT_BUSY,
                            non_retryable=True, category=ApplicationErrorCategory.BENIGN)


class Record(BaseModel):
    """Execution rows, the task row after them and the task's new events, written in one
    transaction."""

    executions: list[ExecutionRecord] = Field(default_factory=list)
    snapshot: TaskSnapshot | None = None
    events: list[TaskEventRecord] = Field(default_factory=list)


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
