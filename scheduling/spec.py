"""The task specification: what to run (job) and when (schedule), as validated models.

These models are pure (no I/O, no clock) so the API, the workflow's update validator and the
tests all validate the very same way. Checks that need the current time live in
``check_timing`` and take the time as an argument.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from scheduling.bounds import (
    JSON_DEPTH,
    MAX_INTERVAL_SECONDS,
    MAX_RUN_SECONDS,
    MIN_DURATION_SECONDS,
    CatchupWindowSeconds,
    Count,
    DriftThresholdSeconds,
    Duration,
    HeaderName,
    HeaderValue,
    HeartbeatTimeoutSeconds,
    JitterSeconds,
    JsonValue,
    MaxCatchupRuns,
    MaxConsecutiveFailures,
    MaxRuns,
    OverdueAfterSeconds,
    RunTimeoutSeconds,
    Text,
)
from scheduling.calendars import MAX_TASK_CALENDARS, CalendarRef
from scheduling.cron import CronError, check_portable, parse_cron
from scheduling.partial import optional_fields

MAX_NAME_LENGTH = 200
MAX_DATES = 1000
# A scheduled run that starts more than this long after its instant was missed (the stack was
# down, or the workers were backlogged): the missed-run policy decides it, not the clock. So a
# new run_at (or date) up to this far in the past still runs, on time (a client's clock lags).
ON_TIME_GRACE = timedelta(seconds=60)
# The longest cool-down of a self-healing breaker: a failing probe doubles it up to this.
MAX_COOL_DOWN_SECONDS = 86_400


class ScheduleType(StrEnum):
    ONCE = "once"
    CRON = "cron"
    INTERVAL = "interval"
    DATES = "dates"


class IntervalMode(StrEnum):
    FIXED_RATE = "fixed_rate"
    FIXED_DELAY = "fixed_delay"


class Priority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class MissedRunPolicy(StrEnum):
    SKIP = "skip"
    SINGLE_CATCHUP = "single_catchup"
    CATCHUP = "catchup"


class OverlapPolicy(StrEnum):
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"
    CANCEL_RUNNING = "cancel_running"


class DstGap(StrEnum):
    SHIFT = "shift"
    SKIP = "skip"


class DstRepeated(StrEnum):
    FIRST = "first"
    LAST = "last"
    BOTH = "both"


DEFAULT_MISSED_RUN_POLICY = {
    Priority.HIGH: MissedRunPolicy.CATCHUP,
    Priority.MEDIUM: MissedRunPolicy.SINGLE_CATCHUP,
    Priority.LOW: MissedRunPolicy.SKIP,
}


class _Strict(BaseModel):
    # NaN and infinities are refused as such (a NaN failed its bound with a misleading "≤").
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)



# What every delivery says of itself (Standard Webhooks, and the scheduler's own); a job's
# headers may not set them.
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
TASK_ID_HEADER = "Scheduler-Task-Id"
SCHEDULED_AT_HEADER = "Scheduler-Scheduled-At"
ATTEMPT_HEADER = "Scheduler-Attempt"
DELIVERY_HEADERS = (*SIGNATURE_HEADERS, TASK_ID_HEADER, SCHEDULED_AT_HEADER, ATTEMPT_HEADER,
                    "traceparent")


class HttpJob(_Strict):
    """Call an HTTP(S) endpoint; 2xx is success."""

    type: Literal["http"]
    url: Text = Field(max_length=2048, examples=["https://example.com/hooks/report"])
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    # Keys outside the pattern are refused too: say so (a bare patternProperties allows them).
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict, json_schema_extra={"additionalProperties": False})
    body: JsonValue = Field(default=None, description=JSON_DEPTH)
    timeout_seconds: float = Field(strict=True, default=30.0, gt=0, le=3600)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        return value

    @field_validator("headers")
    @classmethod
    def _no_reserved_headers(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = {"host", "idempotency-key", "content-length", "transfer-encoding",
                    *(name.lower() for name in DELIVERY_HEADERS)}
        clash = sorted(name for name in value if name.lower() in reserved)
        if clash:
            raise ValueError(f"headers {clash} are set by the scheduler and cannot be overridden")
        return value


class HandlerJob(_Strict):
    """Run a Python callable registered by name in the worker."""

    type: Literal["handler"]
    name: Text = Field(min_length=1, max_length=200, examples=["noop"])
    args: dict[Text, JsonValue] = Field(default_factory=dict, description=JSON_DEPTH,
                                        json_schema_extra={"additionalProperties": False})


class WorkflowJob(_Strict):
    """Start another Temporal workflow as the run and wait for its result."""

    type: Literal["workflow"]
    workflow_type: Text = Field(min_length=1, max_length=200)
    task_queue: Text | None = Field(default=None, max_length=200)
    args: list[JsonValue] = Field(default_factory=list, description=JSON_DEPTH)
    execution_timeout_seconds: Duration | None = Field(default=None, le=MAX_RUN_SECONDS)


JobDetails = Annotated[HttpJob | HandlerJob | WorkflowJob, Field(discriminator="type")]


class RetrySpec(_Strict):
    """How a failed run is retried before it counts as FAILED."""

    max_attempts: Count = Field(default=3, ge=1, le=50)
    initial_interval_seconds: Duration = Field(default=1.0, le=3600)
    backoff_coefficient: float = Field(strict=True, default=2.0, ge=1, le=10)
    maximum_interval_seconds: Duration = Field(default=300.0, le=86400)

    @model_validator(mode="after")
    def _ordered(self) -> RetrySpec:
        # Temporal refuses such a retry policy when the run is scheduled, which would leave
        # the task's workflow stuck: refuse it up front instead.
        if self.maximum_interval_seconds < self.initial_interval_seconds:
            raise ValueError("maximum_interval_seconds must be at least initial_interval_seconds")
        return self


class DstPolicy(_Strict):
    """What a cron task does at daylight saving changes; the defaults are the rules of
    docs/scheduling.md (``scheduling/cron.py`` applies them)."""

    gap: DstGap = Field(default=DstGap.SHIFT, description="a wall time that does not exist: "
                        "shift (run at the first valid instant after it) or skip (no run)")
    repeated: DstRepeated = Field(default=DstRepeated.FIRST, description="a wall time that "
                                  "happens twice: run on the first, the last or both (an hour "
                                  "field of * always runs on both)")


# The IANA names every host's tz database has alike (new tasks only: a stored spec keeps its
# zone, whatever it is, so that its workflow still reads it).
PORTABLE_ZONES = frozenset(available_timezones() - {"localtime", "Factory", "posixrules"})


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a directory ("America")
        raise ValueError(f"unknown IANA time zone {name!r}") from exc


def _aware(value: datetime | None, field: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{field} needs a time zone offset, e.g. 2026-12-01T10:00:00Z")
    return value


class ScheduleFields(_Strict):
    """When a task runs. Shared by the create body, the update body and the workflow state."""

    schedule_type: ScheduleType
    run_at: datetime | None = Field(default=None, description="once: the instant to run")
    cron: Text | None = Field(
        default=None,
        max_length=200,
        description="cron: 5 fields, or 6 with seconds first",
        examples=["0 10 * * *"],
    )
    timezone: Text = Field(default="UTC", max_length=64, description="IANA name, for cron")
    interval_seconds: float | None = Field(default=None, gt=0, le=MAX_INTERVAL_SECONDS)
    interval_mode: IntervalMode = IntervalMode.FIXED_RATE
    start_date: datetime | None = None
    end_date: datetime | None = None
    max_runs: MaxRuns | None = None
    dst_policy: DstPolicy = Field(default_factory=DstPolicy, description="cron: daylight saving rules")
    dates: list[datetime] | None = Field(
        default=None, min_length=1, max_length=MAX_DATES,
        description="dates: the instants to run, each once, with a time zone offset")

    @field_validator("dates")
    @classmethod
    def _dates_aware(cls, value: list[datetime] | None) -> list[datetime] | None:
        if value is None:
            return None
        for i, instant in enumerate(value):
            _aware(instant, f"dates[{i}]")
        return sorted(set(value))  # each instant runs once, in order

    @field_validator("run_at", "start_date", "end_date")
    @classmethod
    def _tz_aware(cls, value: datetime | None, info: Any) -> datetime | None:
        return _aware(value, info.field_name)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        _zone(value)
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parse_cron(value)
        except CronError as exc:
            raise ValueError(str(exc)) from exc
        return value.strip()

    @model_validator(mode="after")
    def _consistent(self) -> ScheduleFields:
        kind = self.schedule_type
        if kind is not ScheduleType.DATES and self.dates is not None:
            raise ValueError(f"dates does not apply to schedule_type '{kind.value}'")
        if kind is ScheduleType.DATES:
            if self.dates is None:
                raise ValueError("dates is required when schedule_type is 'dates'")
            for name in ("run_at", "cron", "interval_seconds"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} does not apply to schedule_type 'dates'")
        elif kind is ScheduleType.ONCE:
            if self.run_at is None:
                raise ValueError("run_at is required when schedule_type is 'once'")
            for name in ("cron", "interval_seconds", "max_runs"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} does not apply to schedule_type 'once'")
        elif kind is ScheduleType.CRON:
            if self.cron is None:
                raise ValueError("cron is required when schedule_type is 'cron'")
            for name in ("run_at", "interval_seconds"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} does not apply to schedule_type 'cron'")
        else:
            if self.interval_seconds is None:
                raise ValueError("interval_seconds is required when schedule_type is 'interval'")
            for name in ("run_at", "cron"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} does not apply to schedule_type 'interval'")
        if self.start_date and self.end_date and self.end_date <= self.start_date:
            raise ValueError("end_date must be after start_date")
        return self


class NotifyEvent(StrEnum):
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"
    DRIFT = "drift"
    AUTO_PAUSED = "auto_paused"
    PROBE_FAILED = "probe_failed"
    AUTO_RESUMED = "auto_resumed"
    COMPLETED = "completed"
    OVERDUE = "overdue"  # run.overdue, then run.recovered: told by the API, not the workflow


class NotifySpec(_Strict):
    """Where to POST a task's events, and which events."""

    url: Text = Field(max_length=2048, examples=["https://example.com/hooks/scheduler"])
    events: list[NotifyEvent] = Field(
        default_factory=lambda: [NotifyEvent.FAILED, NotifyEvent.DEAD_LETTERED,
                                 NotifyEvent.DRIFT, NotifyEvent.AUTO_PAUSED,
                                 NotifyEvent.PROBE_FAILED, NotifyEvent.AUTO_RESUMED, NotifyEvent.OVERDUE]
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        return value


class PolicyFields(_Strict):
    """Retry and run policies of a task."""

    priority: Priority = Priority.MEDIUM
    missed_run_policy: MissedRunPolicy | None = Field(
        default=None,
        description="after downtime; default from priority: high catchup, medium "
        "single_catchup, low skip",
    )
    max_catchup_runs: MaxCatchupRuns = 100
    catchup_window_seconds: CatchupWindowSeconds | None = Field(
        default=None, description="missed runs older than this are skipped, not caught up"
    )
    overlap_policy: OverlapPolicy = OverlapPolicy.SKIP
    jitter_seconds: JitterSeconds = Field(
        default=0,
        description="spread each run by a deterministic offset in [0, jitter) from its time",
    )
    drift_threshold_seconds: DriftThresholdSeconds | None = Field(
        default=None, description="a run starting later than this is flagged and notified"
    )
    overdue_after_seconds: OverdueAfterSeconds | None = Field(
        default=None, description="a run not started this long after its instant raises "
        "run.overdue; default: the service's setting",
    )
    max_consecutive_failures: MaxConsecutiveFailures | None = Field(
        default=5,
        description="after this many failed runs in a row the task is auto-paused (null: never)",
    )
    auto_resume_after_seconds: Duration | None = Field(
        default=None, le=MAX_COOL_DOWN_SECONDS,
        description="after an auto-pause, one probe run after this cool-down: success resumes "
        "the task, failure pauses it again with the cool-down doubled, up to a day (null: stay "
        "paused until resumed)",
    )
    notify: NotifySpec | None = None
    exclude_calendars: list[CalendarRef] = Field(
        default_factory=list, max_length=MAX_TASK_CALENDARS,
        description="the tenant's calendars whose dates (in the task's timezone) do not run: "
        "each fire on one is SKIPPED calendar, or shifted to the next business day (shift)")

    retry_policy: RetrySpec = Field(default_factory=RetrySpec)
    heartbeat_timeout_seconds: HeartbeatTimeoutSeconds = 30.0
    run_timeout_seconds: RunTimeoutSeconds = Field(
        default=3600.0, description="limit for one attempt of a run"
    )


class JobFields(_Strict):
    """What a task is called and what it runs."""

    task_name: Text = Field(min_length=1, max_length=MAX_NAME_LENGTH, examples=["nightly-report"])
    job_details: JobDetails


class TaskSpec(ScheduleFields, PolicyFields, JobFields):
    """Everything that defines a task, the one declaration of its editable fields and their
    bounds; validated the same way by the API and the workflow."""

    def effective_missed_run_policy(self) -> MissedRunPolicy:
        """The missed-run policy, or the default of the task's priority."""
        return self.missed_run_policy or DEFAULT_MISSED_RUN_POLICY[self.priority]

    def zone(self) -> ZoneInfo:
        """The task's time zone."""
        return _zone(self.timezone)


class _Changes(_Strict):
    """Fields an update may change; anything left out keeps its value."""

    @model_serializer(mode="wrap")
    def _only_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only the fields the caller gave travel (to the workflow too): an absent field means
        # "keep", while an explicit null clears an optional field.
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    def apply_to(self, spec: TaskSpec) -> TaskSpec:
        """The spec with these changes applied, validated as a whole (raises ValueError)."""
        changes = self.model_dump(exclude_unset=True)
        if "schedule_type" in changes and changes["schedule_type"] != spec.schedule_type:
            # A new kind of schedule drops the fields of the old one.
            base = spec.model_dump(exclude={"run_at", "cron", "interval_seconds", "max_runs",
                                            "dates"})
        else:
            base = spec.model_dump()
        base.update(changes)
        return TaskSpec.model_validate(base)


# Every field of the spec, optional and without its bounds: the spec they make is validated
# whole (apply_to), so a change obeys the very rules a new task does.
if TYPE_CHECKING:
    class TaskChanges(_Changes):
        """Fields an update may change; anything left out keeps its value."""
else:
    TaskChanges = create_model("TaskChanges", __base__=_Changes, __module__=__name__,
                               __doc__=_Changes.__doc__,
                               **optional_fields(TaskSpec.model_fields, bounds=False))


def outside_catchup_window(spec: TaskSpec, fire: datetime, now: datetime) -> bool:
    """A missed fire older than the task's ``catchup_window_seconds``: it is SKIPPED
    outside_window, whatever the missed-run policy would do with it."""
    window = spec.catchup_window_seconds
    return window is not None and now - fire > timedelta(seconds=window)


class TimingError(ValueError):
    """A schedule that can never fire or points into the past, and the field at fault."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


def check_timing(spec: TaskSpec, now: datetime, before: TaskSpec | None = None) -> None:
    """Refuse schedules that can never fire or that point into the past (raises TimingError).

    A run_at in the past is most often a client's clock or time-zone mistake, so it is refused
    unless the task itself asks for missed runs to be caught up: then it runs at once.
    """
    once = spec.schedule_type is ScheduleType.ONCE
    catch_up = spec.missed_run_policy in (MissedRunPolicy.SINGLE_CATCHUP, MissedRunPolicy.CATCHUP)
    if once and spec.run_at is not None and spec.run_at < now - ON_TIME_GRACE and not catch_up:
        raise TimingError(
            "run_at", "is more than a minute in the past; check the client's clock and time zone "
            "(or set missed_run_policy to single_catchup or catchup to run it at once)"
        )
    past = [i for i, d in enumerate(spec.dates or []) if d < now - ON_TIME_GRACE]
    if past and not catch_up:
        raise TimingError(
            f"dates[{past[0]}]", "is more than a minute in the past; check the client's clock "
            "and time zone (or set missed_run_policy to single_catchup or catchup)")
    # Missed, and older than the window, every one: never run. Judged on the latest instant
    # each may have (jitter delays it up to jitter_seconds); not where a calendar may move it.
    fires = [spec.run_at] if once and spec.run_at is not None else list(spec.dates or [])
    latest = timedelta(seconds=spec.jitter_seconds or 0)
    if catch_up and fires and not spec.exclude_calendars and all(
            f + latest < now - ON_TIME_GRACE and outside_catchup_window(spec, f, now)
            for f in fires):
        raise TimingError(
            "run_at" if once else "dates",
            f"is older than catchup_window_seconds={spec.catchup_window_seconds:g}: its missed run "
            "would be skipped as outside the window, never run (widen the window or drop it)")
    if spec.end_date is not None and spec.end_date <= now:
        raise TimingError("end_date", "is in the past: the task could never run")
    # A change (``before``) is judged on what it sets: a stored task keeps its own cron and zone.
    if spec.cron is not None and (before is None or before.cron != spec.cron):
        try:
            check_portable(spec.cron)
        except CronError as exc:
            raise TimingError("cron", str(exc)) from exc
    if spec.timezone not in PORTABLE_ZONES and (before is None or before.timezone != spec.timezone):
        # A zone file that is no IANA zone ("localtime", "Factory", "right/UTC") reads each
        # host's own setup: the API, the preview and every worker could fire at other times.
        raise TimingError("timezone", f"{spec.timezone!r} is not an IANA time zone name "
                          "(e.g. Europe/Berlin, America/New_York, UTC)")


def check_durations(spec: TaskSpec, before: TaskSpec | None = None) -> None:
    """Refuse a duration Temporal is handed that it would read as 0 (raises TimingError): the
    run would be refused as a bad schedule, or run without its timeout. Only a new value is
    checked (a stored task keeps what it has)."""
    def durations(of: TaskSpec | None) -> dict[str, float | None]:
        if of is None:
            return {}
        job = of.job_details
        return {"retry_policy.maximum_interval_seconds": of.retry_policy.maximum_interval_seconds,
                "retry_policy.initial_interval_seconds": of.retry_policy.initial_interval_seconds,
                "auto_resume_after_seconds": of.auto_resume_after_seconds,
                "job_details.execution_timeout_seconds":
                    job.execution_timeout_seconds if isinstance(job, WorkflowJob) else None}

    old = durations(before)
    for name, value in durations(spec).items():
        if value is not None and value < MIN_DURATION_SECONDS and old.get(name) != value:
            raise TimingError(name, f"must be greater than or equal to {MIN_DURATION_SECONDS:.6f} s: "
                              "Temporal counts whole microseconds, and reads a shorter one as 0")


def check_start(spec: TaskSpec) -> None:
    """Refuse a one-time run or a date before start_date (raises TimingError): nothing runs
    before it."""
    if spec.start_date is None:
        return
    start = spec.start_date.isoformat()
    if spec.schedule_type is ScheduleType.ONCE and spec.run_at is not None and spec.run_at < spec.start_date:
        raise TimingError("run_at", f"is before start_date {start}: nothing runs before it")
    early = [d for d in spec.dates or [] if d < spec.start_date]
    if early:
        raise TimingError("dates", f"has {early[0].isoformat()}, before start_date {start}: "
                          "nothing runs before it")


def redact_url(url: str) -> str:
    """The URL without path, query or credentials, for logs and summaries: webhook URLs often
    carry their secret in the path or the query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port the standard library cannot read: never fail a log line
        port = ":?"
    tail = "/…" if (parts.path not in ("", "/") or parts.query) else "/"
    return f"{parts.scheme}://{host}{port}{tail}"
