"""The names every layer shares: task and execution statuses, what started a run, why a fire
was skipped, dead-letter states, the job's failure types, and the ids of workflows and runs."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum


class TaskStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


FINAL_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


class ExecutionStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


class Trigger(StrEnum):
    """What asked for a run: its schedule, the missed-run policy, a user, a replay, the circuit
    breaker trying whether an auto-paused task's job works again, or a backfill of past
    instants (neither of the last two counted against max_runs)."""

    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    REPLAY = "replay"
    PROBE = "probe"
    BACKFILL = "backfill"

    @property
    def scheduled(self) -> bool:
        """A run of the schedule (counted against max_runs), not one someone asked for."""
        return self in (Trigger.SCHEDULE, Trigger.CATCHUP)


class ResumeMissed(StrEnum):
    """What a resume does with the fires that came during the pause."""

    SKIP = "skip"  # SKIPPED paused
    POLICY = "policy"  # the missed-run policy decides them, as after an outage


class SkipReason(StrEnum):
    """Why a scheduled fire did not run (the SKIPPED row's reason)."""

    MISSED = "missed"  # older than the newest due fire, or past the on-time grace
    OUTSIDE_WINDOW = "outside_window"  # missed, and older than catchup_window_seconds
    CATCHUP_CAP = "catchup_cap"  # missed, beyond max_catchup_runs
    OVERLAP = "overlap"  # the previous run was still going (overlap_policy)
    PAUSED = "paused"  # its time fell inside a pause
    RESCHEDULED = "rescheduled"  # waiting when the schedule changed
    CANCELLED = "cancelled"  # waiting when the task was cancelled
    CALENDAR = "calendar"  # its date is in a calendar the task excludes


class DeadLetter(StrEnum):
    """The dead-letter state of a run that failed after its last retry."""

    OPEN = "open"
    REPLAYED = "replayed"
    DISMISSED = "dismissed"


class JobFailure(StrEnum):
    """The ApplicationError types of a job attempt that failed or did not run."""

    WITHDRAWN = "Withdrawn"  # cancelled before its instant: the job did not run
    LATE = "Late"  # reached past the on-time grace: the job did not run; the policy decides
    WORKFLOW_REFUSED = "WorkflowJobRefused"  # the workflow job may not start its workflow
    RUN_TIMEOUT = "RunTimeout"  # longer than run_timeout_seconds
    EGRESS_REFUSED = "EgressRefused"  # the HTTP target is not one jobs may reach
    HTTP_TIMEOUT = "HttpTimeout"
    HTTP_CONNECTION = "HttpConnectionError"
    HTTP_STATUS = "HttpStatus"  # answered outside 2xx
    UNKNOWN_HANDLER = "UnknownHandler"
    HANDLER_ERROR = "HandlerError"  # the handler raised
    WORKFLOW_FAILED = "WorkflowFailed"  # the job's workflow failed
    SIGNING_UNAVAILABLE = "SigningUnavailable"  # no signing secret could be read: not sent
    # Not taken: its tenant held its share of the worker's slots, or the worker was stopping
    # before the run's instant. The workflow sends the run again.
    TENANT_BUSY = "TenantBusy"
    # Cancelled while its job ran, the start report lost: the job started, and the run ends
    # as one cancelled while running (not as withdrawn unstarted).
    CANCELLED_RUNNING = "CancelledWhileRunning"


def workflow_id(task_id: str) -> str:
    """The id of a task's workflow."""
    return f"task-{task_id}"


def execution_id(task_id: str, scheduled_at: datetime, trigger: Trigger = Trigger.SCHEDULE,
                 number: int = 0) -> str:
    """The id of a run: ``<task_id>:<scheduled_at>`` for the schedule's runs (deterministic, so
    a retried or replayed run has one row); a manual run is marked and numbered, so two
    triggers in the same millisecond are two runs."""
    stamp = scheduled_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if trigger is Trigger.MANUAL:
        return f"{task_id}:manual-{stamp}-{number}"
    if trigger is Trigger.PROBE:
        return f"{task_id}:probe-{stamp}"
    return f"{task_id}:{stamp}"
