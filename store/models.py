"""Tables (Task, TaskExecution, ApiKey, signing secrets, ...) and the records of their rows
that the workflow hands to bookkeeping (TaskSnapshot, ExecutionRecord): one declaration of
each row's fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, DateTime, Index, Table, TypeDecorator, text
from sqlalchemy.engine import Dialect
from sqlmodel import AutoString, Field, SQLModel


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC and always gives back timezone-aware datetimes (SQLite drops offsets)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _ts(**kwargs: Any) -> Any:
    return Field(sa_type=UTCDateTime, **kwargs)


def _text(length: int, **kwargs: Any) -> Any:
    # The length bounds the column, not the records of a row the workflow and the jobs worker
    # build (a max_length would refuse a long reason or answer in the workflow itself).
    return Field(sa_type=AutoString(length), **kwargs)


class TaskFields(SQLModel):
    """A task row's columns but its id, declared once: the table's, and the snapshot's that the
    workflow hands to bookkeeping."""

    tenant_id: str = _text(128)
    name: str = _text(200)
    schedule_type: str = _text(16)
    spec: dict[str, Any] = Field(sa_type=JSON, nullable=False)
    status: str = _text(16)
    status_reason: str | None = _text(500, default=None)
    next_run_at: datetime | None = _ts(default=None)
    last_run_at: datetime | None = _ts(default=None)
    last_run_status: str | None = _text(16, default=None)
    last_execution_id: str | None = _text(200, default=None)
    run_count: int = 0
    success_count: int = 0
    failure_count: int = 0
    skipped_count: int = 0
    # Scheduled runs that ran, as the workflow counts them (max_runs counts these): a backfill
    # that runs an instant again writes its own trigger over the row of the instant's run.
    executed: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    consecutive_failures: int = 0
    next_probe_at: datetime | None = _ts(default=None)
    # The instant of the oldest run due that has neither started nor been decided, as the
    # workflow knows it: sent and not reported started, or waiting in the task's queue.
    unstarted_at: datetime | None = _ts(default=None)
    state_version: int = Field(default=0, sa_type=BigInteger)
    spec_version: int = 1  # 1 at create, one more with every change of the spec
    created_at: datetime = _ts(default_factory=utcnow)
    updated_at: datetime = _ts(default_factory=utcnow)
    # The latest backfill's progress (mode, range, total, started, left, status).
    backfill: dict[str, Any] | None = Field(default=None, sa_type=JSON, nullable=True)


class Task(TaskFields, table=True):
    """One scheduled task; its workflow is ``task-<id>``."""

    __tablename__ = "task"
    # Listing pages are read in (created_at, id) order: the indexes that end in it make a page,
    # and a cursor into the list, a range read whatever the number of tasks. The status index
    # stays narrow: it serves the active-task count of every create, and its entries change
    # with every run (a page filtered by status reads the tenant's index and skips the others).
    __table_args__ = (
        Index("ix_task_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_task_tenant_name_created", "tenant_id", "name", "created_at", "id"),
        Index("ix_task_created", "created_at", "id"),
        Index("ix_task_tenant_status", "tenant_id", "status"),
        Index("ix_task_next_run_at", "next_run_at"),
        Index("ix_task_overdue", "overdue_since"),
        Index("ix_task_unstarted_at", "unstarted_at"),
    )

    id: str = Field(primary_key=True, max_length=64)
    # The alarm of a run that did not come (ALARM_COLUMNS): written only by the API's overdue
    # check, never by a snapshot, which does not carry them; its claim and clearing are one UPDATE.
    overdue_since: datetime | None = _ts(default=None)
    overdue_run_at: datetime | None = _ts(default=None)


# The task row's columns that are not the workflow's: the overdue check's alarm.
ALARM_COLUMNS = ("overdue_since", "overdue_run_at")


class TaskSnapshot(TaskFields):
    """The task's row as its workflow sees it; newer state_version wins. It travels to
    bookkeeping under these JSON names (``task_id``, not ``id``): recorded histories carry it."""

    task_id: str

    @property
    def id(self) -> str:
        """The task id under the name of the row's column (so it reads like a row)."""
        return self.task_id


class ExecutionFields(SQLModel):
    """An execution row's columns but its creation time, declared once: the table's, and the
    record's that the workflow and the jobs worker hand to bookkeeping."""

    id: str = _text(200, primary_key=True)
    task_id: str = _text(64)
    tenant_id: str = _text(128, index=True)
    scheduled_at: datetime = _ts()
    trigger: str = _text(16, default="schedule")
    status: str = _text(16)
    reason: str | None = _text(500, default=None)
    attempts: int = 0
    started_at: datetime | None = _ts(default=None)
    finished_at: datetime | None = _ts(default=None)
    http_status: int | None = None
    response_snippet: str | None = _text(2048, default=None)
    error: str | None = _text(2000, default=None)
    instant: datetime | None = _ts(default=None)  # scheduled_at plus the run's jitter
    lateness_ms: float | None = None  # started_at minus instant
    drifted: bool = False
    dead_letter: str | None = _text(16, default=None, index=True)
    spec_version: int | None = None  # the task's spec version the run ran under


class TaskExecution(ExecutionFields, table=True):
    """One run (or one recorded skip) of a task; id is ``<task_id>:<scheduled_at>``."""

    __tablename__ = "task_execution"
    __table_args__ = (Index("ix_execution_task_scheduled", "task_id", "scheduled_at"),)

    created_at: datetime = _ts(default_factory=utcnow)


class ExecutionRecord(ExecutionFields):
    """One execution row as it stands; a final status is never overwritten by RUNNING."""


class ApiKey(SQLModel, table=True):
    """An API key of a tenant; only its SHA-256 hash is stored."""

    __tablename__ = "api_key"

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=128, index=True)
    key_hash: str = Field(max_length=128, unique=True)
    prefix: str = Field(max_length=16)
    is_admin: bool = False
    created_at: datetime = _ts(default_factory=utcnow)
    revoked_at: datetime | None = _ts(default=None)


class IdempotencyRecord(SQLModel, table=True):
    """A request seen with an Idempotency-Key: a create's task, or another operation's answer."""

    __tablename__ = "idempotency_record"

    tenant_id: str = Field(primary_key=True, max_length=128)
    key: str = Field(primary_key=True, max_length=255)
    request_hash: str = Field(max_length=64)
    task_id: str = Field(max_length=64)  # the task created, or the task the operation acted on
    completed: bool = False
    # The first answer of an operation (not a create: its task row is its answer).
    response: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = _ts(default_factory=utcnow)


class TenantQuota(SQLModel, table=True):
    """Per-tenant overrides of the default quotas; absent fields use the defaults."""

    __tablename__ = "tenant_quota"

    tenant_id: str = Field(primary_key=True, max_length=128)
    max_active_tasks: int | None = None
    min_interval_seconds: float | None = None
    allow_seconds_cron: bool | None = None
    max_body_bytes: int | None = None
    max_header_bytes: int | None = None
    # What the tenant's workflow jobs may start, within what the deployment allows.
    workflow_types: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    workflow_task_queues: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    updated_at: datetime = _ts(default_factory=utcnow)


class TaskEventFields(SQLModel):
    """One change of a task, as its workflow records it (append-only): who, what, when, and
    for a change of the spec the spec after it."""

    id: str = _text(200, primary_key=True)
    task_id: str = _text(64)
    tenant_id: str = _text(128, index=True)
    at: datetime = _ts()
    actor: str = _text(200)
    action: str = _text(32)
    spec_version: int = 1
    # SQL NULL, not JSON null, when absent: the versions are the events with a spec.
    spec: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))
    detail: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSON(none_as_null=True), nullable=True))


class TaskEvent(TaskEventFields, table=True):
    """A row of a task's history; its id is deterministic, so a retried write adds it once."""

    __tablename__ = "task_event"
    __table_args__ = (Index("ix_task_event_task_at", "task_id", "at", "id"),)


class TaskEventRecord(TaskEventFields):
    """A task event on its way from the workflow to bookkeeping."""


# Typed handles on the tables, for core statements (upserts) that take a Table.
TASK_TABLE: Table = Task.__table__  # type: ignore[attr-defined]
EXECUTION_TABLE: Table = TaskExecution.__table__  # type: ignore[attr-defined]
IDEMPOTENCY_TABLE: Table = IdempotencyRecord.__table__  # type: ignore[attr-defined]
EVENT_TABLE: Table = TaskEvent.__table__  # type: ignore[attr-defined]


class SigningSecret(SQLModel, table=True):
    """A tenant's secret that signs its deliveries, encrypted at rest; one without
    ``expires_at`` is the current one, an older one signs until it expires."""

    __tablename__ = "signing_secret"
    # One current secret per tenant: two rotations at once cannot both make one.
    __table_args__ = (Index("ux_signing_secret_current", "tenant_id", unique=True,
                            sqlite_where=text("expires_at IS NULL"),
                            postgresql_where=text("expires_at IS NULL")),)

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=128, index=True)
    secret_encrypted: str = Field(max_length=512)
    created_at: datetime = _ts(default_factory=utcnow)
    expires_at: datetime | None = _ts(default=None)


class Calendar(SQLModel, table=True):
    """A tenant's calendar of excluded dates: its own dates and, optionally, a country's public
    holidays (``holidays``: {"country", "subdivision"})."""

    __tablename__ = "calendar"
    __table_args__ = (Index("ix_calendar_tenant_created", "tenant_id", "created_at", "id"),)

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=128)
    name: str = Field(max_length=200)
    dates: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    holidays: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = _ts(default_factory=utcnow)
    updated_at: datetime = _ts(default_factory=utcnow)
    # Deleted: gone for its tenant, but a task that took it in the moment of its delete (its
    # create or update checked it a moment before) still skips its dates.
    deleted_at: datetime | None = _ts(default=None)
