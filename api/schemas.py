"""Request and response bodies of the REST API."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from types import NoneType
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from api.cursors import NextCursor
from api.examples import (
    BACKFILL_EXAMPLE,
    EVENT_EXAMPLE,
    EXECUTION_EXAMPLE,
    TASK_EXAMPLE,
    VERSION_EXAMPLE,
)
from scheduling.backfill import BackfillAction, BackfillMode
from scheduling.bounds import INSTANT_RANGE, MAX_INTERVAL_SECONDS, Count, MaxRuns, Text, in_range
from scheduling.partial import admits_null, optional_fields
from scheduling.preview import describe_stored
from scheduling.spec import (
    MAX_DATES,
    DstPolicy,
    IntervalMode,
    JobFields,
    PolicyFields,
    TaskChanges,
    TaskSpec,
)
from scheduling.status import ResumeMissed
from store.models import ALARM_COLUMNS, Task, TaskEvent, TaskExecution, TaskFields, TaskSnapshot


# The create and update bodies describe to clients exactly what TaskSpec accepts; the API then
# validates them into a TaskSpec (or TaskChanges), the one set of rules every path applies.
def _rfc3339_text(value: Any) -> Any:
    # Without this a number would pass as seconds since the epoch: the document says string.
    if not isinstance(value, str | datetime):
        raise ValueError("must be an RFC 3339 date-time string, e.g. 2026-12-01T10:00:00Z")
    return value


# The range holds for the instants a client sends; tasks stored before it keep theirs.
Instant = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(in_range)]
Cron = Annotated[Text, Field(max_length=200, description="5 fields, or 6 with seconds first",
                            examples=["0 10 * * *"])]
TimeZone = Annotated[Text, Field(max_length=64, description="IANA name, for cron",
                                examples=["Europe/Berlin"])]
# At least a microsecond, the finest step a run time has; the tenant's quota sets the
# shortest interval it allows (min_interval_seconds).
IntervalSeconds = Annotated[float, Field(strict=True, ge=0.000001, le=MAX_INTERVAL_SECONDS)]


class _NewTask(PolicyFields, JobFields):
    """What every new task has, whatever its kind of schedule."""

    timezone: TimeZone = "UTC"
    interval_mode: IntervalMode = Field(
        default=IntervalMode.FIXED_RATE, description="for interval: fixed_rate or fixed_delay"
    )
    start_date: Instant | None = Field(default=None, description=f"no run before this instant, {INSTANT_RANGE}")
    end_date: Instant | None = Field(default=None, description=f"no run after this instant, {INSTANT_RANGE}")
    dst_policy: DstPolicy = Field(default_factory=DstPolicy, description="for cron: daylight saving rules")

    def spec(self) -> TaskSpec:
        """The task as a TaskSpec (raises ValidationError naming the field at fault)."""
        return TaskSpec.model_validate(self.model_dump(exclude_unset=True))


class OnceTask(_NewTask):
    """A task that runs once, at ``run_at``."""

    schedule_type: Literal["once"]
    run_at: Instant = Field(description=f"the instant to run, with a time zone offset, {INSTANT_RANGE}")
    # The other kinds' fields may be sent as null, as a flat client sends them; nothing else.
    cron: None = None
    interval_seconds: None = None
    max_runs: None = None
    dates: None = None


class CronTask(_NewTask):
    """A task that runs at the times of a cron expression in ``timezone``."""

    schedule_type: Literal["cron"]
    cron: Cron
    max_runs: MaxRuns | None = None
    run_at: None = None
    interval_seconds: None = None
    dates: None = None


class IntervalTask(_NewTask):
    """A task that runs every ``interval_seconds``."""

    schedule_type: Literal["interval"]
    interval_seconds: IntervalSeconds
    max_runs: MaxRuns | None = None
    run_at: None = None
    cron: None = None
    dates: None = None


class DatesTask(_NewTask):
    """A task that runs once at each of ``dates``, and completes after the last."""

    schedule_type: Literal["dates"]
    dates: list[Instant] = Field(min_length=1, max_length=MAX_DATES, description=(
        f"the instants to run, each with a time zone offset, {INSTANT_RANGE}; none more "
        "than a minute in the past"))
    max_runs: MaxRuns | None = None
    run_at: None = None
    cron: None = None
    interval_seconds: None = None


TaskCreate = Annotated[OnceTask | CronTask | IntervalTask | DatesTask,
                      Field(discriminator="schedule_type")]
RecurringTaskCreate = Annotated[CronTask | IntervalTask, Field(discriminator="schedule_type")]


def _as_created(name: str) -> FieldInfo:
    """A spec field as the create bodies declare it (in the kind of task that takes it), or as
    the spec does (schedule_type, a literal in each kind)."""
    for kind in (OnceTask, CronTask, IntervalTask, DatesTask):
        field = kind.model_fields[name]
        if field.annotation is not NoneType and get_origin(field.annotation) is not Literal:
            return field
    return TaskSpec.model_fields[name]


# Every field of the spec, each with the bounds of the create bodies.
UPDATABLE = {name: _as_created(name) for name in TaskSpec.model_fields}
# Fields an update may leave out but not set to null: null is no value they can take.
NOT_NULL = tuple(name for name, field in TaskSpec.model_fields.items() if not admits_null(field))


def _update_schema(schema: dict[str, Any]) -> None:
    # A field left out of an update keeps its value, so no field shows a default; and the
    # fields that refuse null do not offer it.
    for name, field in schema.get("properties", {}).items():
        field.pop("default", None)
        if name in NOT_NULL and "anyOf" in field:
            (kept,) = (branch for branch in field.pop("anyOf") if branch != {"type": "null"})
            field.update(kept)


class _UpdateBody(BaseModel):
    """Body of POST /task/update: the task id and the fields to change. A field left out keeps
    its value; null clears a field that may be empty (and only such a field)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_update_schema)

    task_id: Text = Field(min_length=1, max_length=64)

    @field_validator(*NOT_NULL, mode="before", check_fields=False)
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("may not be null; leave the field out to keep its value")
        return value

    def changes(self) -> TaskChanges:
        """The requested changes without the task id."""
        fields = self.model_dump(exclude_unset=True, exclude={"task_id"})
        return TaskChanges.model_validate(fields)


if TYPE_CHECKING:
    class TaskUpdate(_UpdateBody):
        """Body of POST /task/update."""
else:
    TaskUpdate = create_model("TaskUpdate", __base__=_UpdateBody, __module__=__name__,
                              __doc__=_UpdateBody.__doc__,
                              **optional_fields(UPDATABLE, bounds=True))


class TaskCancel(BaseModel):
    """Body of PATCH /task/cancel."""

    model_config = ConfigDict(extra="forbid")
    task_id: Text = Field(min_length=1, max_length=64)
    task_name: Text | None = Field(default=None, max_length=200)
    reason: Text | None = Field(default=None, max_length=500)


class PauseRequest(BaseModel):
    """Optional body of POST /tasks/{id}/pause."""

    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


class ResumeRequest(BaseModel):
    """Optional body of POST /tasks/{id}/resume."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"missed": "policy"}]})
    missed: ResumeMissed = Field(
        default=ResumeMissed.SKIP,
        description="the fires that came during the pause: skip records them SKIPPED paused; "
        "policy lets the task's missed_run_policy decide them, as after an outage")


class LastRunOut(BaseModel):
    execution_id: str
    status: str
    scheduled_at: datetime


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
    description: str | None = Field(default=None, description="the schedule in words",
                                    examples=["At 10:00, every day, in Europe/Berlin"])
    job_details: dict[str, Any]
    next_run_at: datetime | None
    last_run: LastRunOut | None = None
    run_count: int
    success_count: int
    failure_count: int
    skipped_count: int
    consecutive_failures: int
    next_probe_at: datetime | None = Field(
        default=None, description="auto-paused by the circuit breaker: when its probe run "
        "(trigger probe) is due (auto_resume_after_seconds)")
    created_at: datetime
    updated_at: datetime | None = None
    spec_version: int = Field(default=1, description="1 at create, one more with every change of "
                              "the spec (update, rollback): GET /tasks/{id}/versions lists them")
    overdue_since: datetime | None = Field(
        default=None, description="set while a run is overdue: when the alarm was raised")
    overdue_run_at: datetime | None = Field(
        default=None, description="the instant of the overdue run, while it is overdue")
    backfill: dict[str, Any] | None = Field(
        default=None, description="the latest backfill: mode, start, end, total, started, left, "
        "status (running | done | stopped) and why it stopped")

    @classmethod
    def of(cls, row: Task | TaskSnapshot) -> TaskOut:
        """The task as shown, from its row (read, or as the workflow's state makes it)."""
        schedule = dict(row.spec)
        job = schedule.pop("job_details", {})
        schedule.pop("task_name", None)
        last = None
        if row.last_execution_id and row.last_run_status and row.last_run_at:
            last = LastRunOut(execution_id=row.last_execution_id, status=row.last_run_status,
                              scheduled_at=row.last_run_at)
        # Every other field is the row's column of the same name: a new one needs no line here.
        same = {name: getattr(row, name) for name in _STORED_AS_SHOWN}
        # The alarm is the table's alone (the overdue check writes it, never a snapshot).
        alarm = {name: getattr(row, name, None) for name in ALARM_COLUMNS}
        return cls(task_id=row.id, task_name=row.name, schedule=schedule, job_details=job,
                   description=describe_stored(row.spec), last_run=last, **same, **alarm)


# The fields of a shown task that are its row's columns under the same name.
_STORED_AS_SHOWN = tuple(sorted(TaskOut.model_fields.keys() & TaskFields.model_fields.keys()))


class TaskFilter(StrEnum):
    """What the task list may be filtered by beside a status."""

    OVERDUE = "overdue"  # a run of the task is overdue now


class TaskPage(BaseModel):
    """One page of tasks, newest first."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [TASK_EXAMPLE], "next_cursor": "1763453560123456.5b0c2e7c9f2d4e2a9a51d3c0b8f1a7e4"}]}
    )

    items: list[TaskOut]
    next_cursor: NextCursor


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
    instant: datetime | None = Field(
        default=None, description="the instant the run aimed at: scheduled_at plus its jitter")
    jitter_ms: float | None = Field(default=None, description="instant minus scheduled_at")
    lateness_ms: float | None = Field(default=None, description="actual start minus instant")
    drifted: bool = Field(
        default=False, description="started later than the drift threshold after its instant")
    dead_letter: str | None = Field(
        default=None, description="open (replayable), replayed or dismissed, for failed runs"
    )
    spec_version: int | None = Field(default=None, description="the task's spec version it ran under")

    @model_validator(mode="after")
    def _jitter(self) -> ExecutionOut:
        if self.instant is not None:
            self.jitter_ms = (self.instant - self.scheduled_at).total_seconds() * 1000
        return self

    @classmethod
    def from_row(cls, row: TaskExecution) -> ExecutionOut:
        return cls.model_validate(row)


class DeadLetterOut(ExecutionOut):
    """A run that exhausted its retries, with its task's name."""

    task_name: str


class DeadLetterPage(BaseModel):
    """One page of open dead letters, newest first."""

    items: list[DeadLetterOut]
    next_cursor: NextCursor


class ExecutionPage(BaseModel):
    """One page of a task's executions, newest first."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [EXECUTION_EXAMPLE], "next_cursor": None}]}
    )

    items: list[ExecutionOut]
    next_cursor: NextCursor


class EventOut(BaseModel):
    """One change of a task: who made it, when, and for a change of the spec the spec after."""

    model_config = ConfigDict(from_attributes=True, json_schema_extra={"examples": [EVENT_EXAMPLE]})

    id: str
    task_id: str
    at: datetime
    actor: str = Field(description="the API key id, `temporal signal`, `reconciler` or `scheduler`")
    action: str = Field(description="create, update, rollback, pause, resume, cancel, trigger, "
                        "replay, restart, marked, ...")
    spec_version: int = Field(description="the task's spec version after the change")
    spec: dict[str, Any] | None = Field(default=None, description="the spec after a change of it")
    detail: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: TaskEvent) -> EventOut:
        return cls.model_validate(row)


class EventPage(BaseModel):
    """One page of a task's events, newest first."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [EVENT_EXAMPLE], "next_cursor": None}]})

    items: list[EventOut]
    next_cursor: NextCursor


class VersionOut(BaseModel):
    """One version of a task's spec."""

    model_config = ConfigDict(json_schema_extra={"examples": [VERSION_EXAMPLE]})

    version: int
    at: datetime
    actor: str
    action: str = Field(description="create, update or rollback")
    spec: dict[str, Any]

    @classmethod
    def from_row(cls, row: TaskEvent) -> VersionOut:
        return cls(version=row.spec_version, at=row.at, actor=row.actor, action=row.action,
                   spec=row.spec or {})


class VersionPage(BaseModel):
    """One page of a task's spec versions, newest first."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [VERSION_EXAMPLE], "next_cursor": None}]})

    items: list[VersionOut]
    next_cursor: NextCursor


class RollbackRequest(BaseModel):
    """Restore the spec of one of the task's versions."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"version": 1}]})

    version: Count = Field(ge=1, le=2**31 - 1, description="a version GET /tasks/{id}/versions lists")


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


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("must carry a time zone offset, e.g. 2026-12-01T10:00:00Z")
    return value


PastInstant = Annotated[Instant, AfterValidator(_aware)]


class BackfillIn(BaseModel):
    """Run the task's schedule instants in [start, end) again (both in the past)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z", "mode": "failed"}]})

    start: PastInstant = Field(description=f"the first instant looked at (included), {INSTANT_RANGE}")
    end: PastInstant = Field(description="where the range ends (excluded); not in the future, "
                             f"{INSTANT_RANGE}")
    mode: BackfillMode = Field(default=BackfillMode.MISSING, description=(
        "missing: instants with no execution or a SKIPPED one; failed: FAILED or dead-lettered; "
        "all: every instant"))
    dry_run: bool = Field(default=False, strict=True, description="answer what would run, change nothing")


class BackfillInstantOut(BaseModel):
    """One instant of the range and what the backfill does with it."""

    scheduled_at: datetime
    execution_id: str = Field(description="the id (and job Idempotency-Key) the instant always has")
    current: str | None = Field(description="the status of its execution row now (null: none)")
    action: BackfillAction = Field(description="run: runs again (trigger backfill); keep: left as it is")
    reason: str | None = Field(default=None, description="why an instant the mode picks is kept "
                               "(not decided by the workflow yet, or on a calendar's excluded date)")


class BackfillOut(BaseModel):
    """A backfill's instants, oldest first, and what happens to each."""

    model_config = ConfigDict(json_schema_extra={"examples": [BACKFILL_EXAMPLE]})

    task_id: str
    mode: BackfillMode
    start: datetime
    end: datetime
    dry_run: bool
    to_run: int = Field(description="how many instants run")
    instants: list[BackfillInstantOut]
