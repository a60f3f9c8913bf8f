"""Queries on tasks and executions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import structlog
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Select,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    or_,
    tuple_,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy import select as core_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlmodel import col, select

from scheduling.status import DeadLetter, ExecutionStatus, Trigger
from store.cursors import decode_cursor, encode_cursor
from store.models import (
    EXECUTION_TABLE,
    TASK_TABLE,
    ExecutionRecord,
    Task,
    TaskExecution,
    TaskSnapshot,
    utcnow,
)

# How a run that ran can end.
RUN_OUTCOMES = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED)
# A state_version from here up is the encoding before migration 0006 (ms × 10**6, any run since
# 2001), written by a worker of the release before still running after the migration: any write
# replaces it, or the row would keep it against every later write. Versions now reach it only
# for runs started after the year 2453.
LEGACY_STATE_VERSION = 10**18
log = structlog.get_logger("task_scheduler.store")


def _insert(engine: Engine, table: Any) -> Any:
    return _dialect_insert(engine.dialect.name, table)


def _dialect_insert(dialect: str, table: Any) -> Any:
    return (postgresql if dialect == "postgresql" else sqlite).insert(table)


def save_snapshot(engine: Engine, snapshot: TaskSnapshot) -> None:
    """Insert or update a task row; an older state_version never overwrites a newer one, and
    no write changes the row of another tenant."""
    with engine.begin() as connection:
        _upsert(connection, TASK_TABLE, _snapshot_upsert(engine, snapshot))


def write_completed(engine: Engine, record: ExecutionRecord) -> Callable[[Connection], None]:
    """The jobs worker's outcome of a run, for a batch. It lands only on a row that has none
    yet: the workflow's row, with its finish and drift, is final whoever writes last."""

    def write(connection: Connection) -> None:
        _upsert(connection, EXECUTION_TABLE, _execution_upsert(engine, record, early=True))

    return write


def write_record(engine: Engine, executions: Sequence[ExecutionRecord],
                 snapshot: TaskSnapshot | None) -> Callable[[Connection], None]:
    """Execution rows and the task row after them, for a batch (one transaction)."""

    def write(connection: Connection) -> None:
        for record in executions:
            _upsert(connection, EXECUTION_TABLE, _execution_upsert(engine, record))
        if snapshot is not None:
            _upsert(connection, TASK_TABLE, _snapshot_upsert(engine, snapshot))

    return write


def write_snapshot(engine: Engine, snapshot: TaskSnapshot) -> Callable[[Connection], None]:
    """A task row write, for a batch."""

    def write(connection: Connection) -> None:
        _upsert(connection, TASK_TABLE, _snapshot_upsert(engine, snapshot))

    return write


def write_started(engine: Engine, record: ExecutionRecord) -> Callable[[Connection], None]:
    """The RUNNING row of a run that has started, for a batch (the task row is the workflow's)."""

    def write(connection: Connection) -> None:
        _upsert(connection, EXECUTION_TABLE,
                _execution_upsert(engine, record, reopen=record.trigger == Trigger.REPLAY))
    # (A backfill's start reopens the earlier run's row: see _execution_statement.)

    return write


Upsert = tuple[Any, dict[str, Any]]


# The columns that say whose a row is: never changed by an upsert, and a write must match them.
_OWNERS = {TASK_TABLE.name: ("tenant_id",), EXECUTION_TABLE.name: ("tenant_id", "task_id")}
_OWNER_OF = {
    table.name: core_select(*(table.c[name] for name in _OWNERS[table.name])).where(
        table.c.id == bindparam("row_id")
    )
    for table in (TASK_TABLE, EXECUTION_TABLE)
}
_COUNTED = {"preserve_rowcount": True}
# The tenant of a task, to name it in the log line of an execution row refused at insert.
_TASK_TENANT = core_select(TASK_TABLE.c.tenant_id).where(TASK_TABLE.c.id == bindparam("task_id"))


def _upsert(connection: Connection, table: Table, upsert: Upsert) -> None:
    """Run an upsert; when it changed nothing, a row it found of another tenant (or, for an
    execution, of another task), or the other tenant's task a new execution row named, is
    logged: the statement refused to touch it."""
    statement, values = upsert
    # An INSERT's row count is kept only when asked for (psycopg's is dropped otherwise).
    if connection.execute(statement, values, execution_options=_COUNTED).rowcount:
        return
    owner = connection.execute(_OWNER_OF[table.name], {"row_id": values["id"]}).first()
    claimed = tuple(values[name] for name in _OWNERS[table.name])
    if owner is None and table is EXECUTION_TABLE:
        task_tenant = connection.scalar(_TASK_TENANT, {"task_id": values["task_id"]})
        if task_tenant is not None and task_tenant != values["tenant_id"]:
            log.warning(
                "store.foreign_write_refused", table=table.name, row_id=values["id"],
                tenant=values["tenant_id"], owner_tenant=task_tenant, task_id=values["task_id"],
                owner_task_id=values["task_id"],
            )
    elif owner is not None and tuple(owner) != claimed:
        log.warning(
            "store.foreign_write_refused", table=table.name, row_id=values["id"],
            tenant=values["tenant_id"], owner_tenant=owner.tenant_id,
            task_id=values.get("task_id"), owner_task_id=getattr(owner, "task_id", None),
        )


# Columns of text the workers word from what they met (an answer's body, an error's message):
# clipped to their columns, which PostgreSQL enforces.
FREE_TEXT = frozenset({"reason", "response_snippet", "error", "status_reason"})


def _storable(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as both databases store them: a NUL, which PostgreSQL refuses in text and a
    target's answer may hold, as U+FFFD (as undecodable bytes are), and free text clipped."""
    for name, value in values.items():
        if isinstance(value, str):
            value = value.replace("\x00", "\ufffd")
            column = table.c.get(name)
            length = getattr(column.type, "length", None) if column is not None else None
            values[name] = value[:length] if name in FREE_TEXT and length else value
    return values


def _snapshot_upsert(engine: Engine, snapshot: TaskSnapshot) -> Upsert:
    values = snapshot.model_dump()
    values["id"] = values.pop("task_id")
    _storable(TASK_TABLE, values)
    if values["backfill"] is None:
        # Never backfilled: no column to write (a backfill's progress is never unset), so a
        # database not yet migrated to 0016 takes the rows of the tasks that never backfill.
        del values["backfill"]
    return _snapshot_statement(engine.dialect.name, tuple(values)), values


def _execution_upsert(engine: Engine, record: ExecutionRecord, *, reopen: bool = False,
                      early: bool = False) -> Upsert:
    values = _storable(EXECUTION_TABLE, record.model_dump())
    # Only fields that are known overwrite: a final write keeps the start time the job recorded,
    # and the target's answer the jobs worker wrote when the workflow's word on the attempt has
    # none (it timed out). But a run keeps nothing of a skip it replaces (given back, then sent
    # again) nor of the failure a replay reopens: a run's write clears the reason and the
    # error, and its start the answer and the finish. A backfill's run also replaces the
    # earlier run's dead letter.
    rerun = record.trigger == Trigger.BACKFILL
    replaced: frozenset[str] = frozenset()
    if record.status != ExecutionStatus.SKIPPED:
        replaced = RUN_REPLACES | (RUN_START_REPLACES if record.status == ExecutionStatus.RUNNING
                                   else frozenset()) | (BACKFILL_REPLACES if rerun else frozenset())
    known = tuple(k for k, v in values.items() if k not in ("id", "created_at")
                  and (v is not None or k in replaced))
    return _execution_statement(engine.dialect.name, tuple(values), known, reopen, early,
                                rerun), values


# The columns a run's write writes even when it has none (it clears what the row held), those
# its RUNNING write also clears, and those a backfill's run also clears.
RUN_REPLACES = frozenset({"reason", "error"})
RUN_START_REPLACES = frozenset({"http_status", "response_snippet", "finished_at"})
BACKFILL_REPLACES = frozenset({"http_status", "response_snippet", "dead_letter"})


# The statements are built once per shape and executed with each write's parameters: building
# an upsert (its ``excluded`` alias above all) costs more than running it.
@functools.cache
def _snapshot_statement(dialect: str, columns: tuple[str, ...]) -> Any:
    stmt = _dialect_insert(dialect, TASK_TABLE)
    current = TASK_TABLE.c.state_version
    newer = or_(stmt.excluded.state_version >= current, current >= LEGACY_STATE_VERSION)
    changed = {k: stmt.excluded[k] for k in columns if k not in ("id", "tenant_id", "created_at")}
    return stmt.on_conflict_do_update(
        index_elements=["id"], set_=changed, where=and_(_same_owner(stmt, TASK_TABLE), newer)
    )


def _unless_foreign_task(dialect: str, columns: tuple[str, ...]) -> Any:
    """The execution row's values, as a one-row SELECT that yields nothing when the row names
    a task of another tenant: such a row is never inserted. A row whose task has no row yet
    (the API's write of it failed; the workflow writes it) is kept: it names no one else's."""
    task = TASK_TABLE

    params = {name: bindparam(name, type_=EXECUTION_TABLE.c[name].type) for name in columns}
    # PostgreSQL types a SELECT's parameters by themselves (text), not by the insert's columns;
    # SQLite has no types to cast to (its casts would turn a timestamp into a number).
    values = [sql_cast(params[name], EXECUTION_TABLE.c[name].type) if dialect == "postgresql"
              else params[name] for name in columns]
    foreign = exists().where(task.c.id == params["task_id"], task.c.tenant_id != params["tenant_id"])
    return core_select(*values).where(~foreign)


def _same_owner(stmt: Any, table: Table) -> Any:
    """The write's owner columns are the row's: a write for another tenant's row changes nothing."""
    return and_(*(table.c[name] == stmt.excluded[name] for name in _OWNERS[table.name]))


@functools.cache
def _execution_statement(dialect: str, columns: tuple[str, ...], known: tuple[str, ...],
                         reopen: bool, early: bool, rerun: bool = False) -> Any:
    table = EXECUTION_TABLE
    stmt = _dialect_insert(dialect, table).from_select(columns, _unless_foreign_task(dialect, columns))
    changed = {k: stmt.excluded[k] for k in known if k not in _OWNERS[table.name]}
    if "trigger" in changed:
        # A replay runs the row's own run again: the row keeps the trigger it ran by (its
        # dead_letter says it was replayed), and max_runs keeps counting it.
        changed["trigger"] = case((stmt.excluded.trigger == Trigger.REPLAY, table.c.trigger),
                                  else_=stmt.excluded.trigger)
    # A finished run's outcome lands (the jobs worker's early one only on a row without one);
    # a late RUNNING write never resurrects a finished row, but a replay's start reopens its
    # dead letter once; and a skip never replaces a run: a timed-out workflow task's local
    # activity may still write the skip its discarded decision made after the retried task
    # ran the fire.
    current, new = table.c.status, stmt.excluded.status
    outcome: ColumnElement[bool] = new.in_(RUN_OUTCOMES)
    if early:
        outcome = and_(outcome, current.not_in(RUN_OUTCOMES))
    resumable: ColumnElement[bool] = current.in_((ExecutionStatus.RUNNING, ExecutionStatus.SKIPPED))
    if reopen:
        resumable = or_(resumable, and_(current == ExecutionStatus.FAILED,
                                        table.c.dead_letter == DeadLetter.REPLAYED))
    if rerun:
        # A backfill's start reopens a row an earlier run finished (one by another trigger, or
        # finished before this attempt started), never the row its own earlier attempt left.
        resumable = or_(resumable, table.c.trigger != Trigger.BACKFILL,
                        table.c.finished_at < stmt.excluded.started_at)
    return stmt.on_conflict_do_update(
        index_elements=["id"],
        set_=changed,
        where=and_(_same_owner(stmt, table), or_(
            outcome,
            and_(new == ExecutionStatus.RUNNING, resumable),
            and_(new == ExecutionStatus.SKIPPED, current == ExecutionStatus.SKIPPED),
        )),
    )




# Reads that every GET makes are built once (see _task_page): plain rows, no ORM objects.
_TASK_BY_ID = core_select(TASK_TABLE).where(TASK_TABLE.c.id == bindparam("task_id"))


def read_task(engine: Engine, task_id: str, tenant_id: str | None) -> Task | None:
    """A task to show, by id; ``tenant_id`` None means any tenant (admin). A plain row with
    the table's columns, not an object a session tracks."""
    with engine.connect() as connection:
        row = connection.execute(_TASK_BY_ID, {"task_id": task_id}).first()
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        return None
    return cast(Task, row)


def list_tasks(
    engine: Engine,
    *,
    tenant_id: str | None,
    limit: int,
    cursor: str | None = None,
    status: str | None = None,
    name: str | None = None,
    overdue: bool = False,
) -> tuple[Sequence[Task], str | None]:
    """Tasks newest first (plain rows, as ``read_task``), and the cursor of the next page
    (None at the end); ``overdue``: only the tasks with a run overdue now."""
    params: dict[str, Any] = {"tenant_id": tenant_id, "status": status, "name": name,
                              "limit": limit + 1}
    if cursor is not None:
        params["after"], params["after_id"] = decode_cursor(cursor)
    query = _task_page(tenant_id is not None, status is not None, name is not None, cursor is not None,
                       overdue)
    with engine.connect() as connection:
        rows = cast(list[Task], connection.execute(query, params).all())
    return rows[:limit], _next_cursor(rows, limit, lambda r: (r.created_at, r.id))


@functools.cache
def _task_page(by_tenant: bool, by_status: bool, by_name: bool, after: bool,
               overdue: bool = False) -> Select[Any]:
    table = TASK_TABLE
    query = core_select(table)
    if overdue:
        query = query.where(table.c.overdue_since.is_not(None))
    if by_tenant:
        query = query.where(table.c.tenant_id == bindparam("tenant_id"))
    if by_status:
        query = query.where(table.c.status == bindparam("status"))
    if by_name:
        query = query.where(table.c.name == bindparam("name"))
    if after:
        cursor = tuple_(
            bindparam("after", type_=table.c.created_at.type), bindparam("after_id", type_=table.c.id.type)
        )
        query = query.where(_after(table.c.created_at, table.c.id, cursor))
    return query.order_by(table.c.created_at.desc(), table.c.id.desc()).limit(
        bindparam("limit", type_=Integer())
    )


def _after(moment: Any, row_id: Any, after: Any) -> Any:
    # One row-value comparison, not "moment < after OR (moment = after AND id < after_id)":
    # the database reads it as a range on the (..., created_at, id) index and seeks to the
    # cursor, so a page deep in the list costs as little as the first. ``after`` is a plain
    # tuple of values (they take the columns' types) or a tuple_ of typed bind parameters.
    return tuple_(moment, row_id) < after


def list_executions(
    engine: Engine, *, task_id: str, limit: int, cursor: str | None = None,
    tenant_id: str | None = None,
) -> tuple[Sequence[TaskExecution], str | None]:
    """A task's executions, newest scheduled first, and the next page's cursor; with
    ``tenant_id``, only the rows of that tenant (the task's own)."""
    query = select(TaskExecution).where(col(TaskExecution.task_id) == task_id)
    if tenant_id is not None:
        query = query.where(col(TaskExecution.tenant_id) == tenant_id)
    query = _newest_first(
        query, col(TaskExecution.scheduled_at), col(TaskExecution.id), cursor, limit
    )
    rows = _fetch(engine, query)
    return rows[:limit], _next_cursor(rows, limit, lambda r: (r.scheduled_at, r.id))


R = TypeVar("R")


def _newest_first(query: Any, moment: Any, row_id: Any, cursor: str | None, limit: int) -> Any:
    """Order newest first and start after the cursor's row; one row more than a page."""
    if cursor is not None:
        after, after_id = decode_cursor(cursor)
        query = query.where(_after(moment, row_id, (after, after_id)))
    return query.order_by(moment.desc(), row_id.desc()).limit(limit + 1)


def _fetch(engine: Engine, query: Any) -> list[Any]:
    with Session(engine) as session:
        rows = list(session.scalars(query))
        for row in rows:
            session.expunge(row)
    return rows


def _next_cursor(rows: Sequence[R], limit: int, key: Callable[[R], tuple[datetime, str]]) -> str | None:
    """The cursor of the next page, or None when these rows end the list."""
    if len(rows) <= limit or limit == 0:
        return None
    return encode_cursor(*key(rows[limit - 1]))


def get_execution(engine: Engine, execution_id: str) -> TaskExecution | None:
    """One execution row by id."""
    with Session(engine) as session:
        row = session.get(TaskExecution, execution_id)
        if row is not None:
            session.expunge(row)
        return row


def scheduled_runs_executed(engine: Engine, task_id: str) -> int:
    """How many of a task's scheduled runs ran (max_runs counts these, not manual ones): the
    more of the count its workflow last wrote on the task row and the rows of such runs. Each
    may miss some: the row's count a run ended since, the rows a run that a backfill ran
    again (its row took the backfill's trigger)."""
    with Session(engine) as session:
        query = select(func.count()).select_from(TaskExecution).where(
            col(TaskExecution.task_id) == task_id,
            col(TaskExecution.trigger).in_((Trigger.SCHEDULE, Trigger.CATCHUP)),
            col(TaskExecution.status).in_(RUN_OUTCOMES),
        )
        counted = session.scalar(select(Task.executed).where(col(Task.id) == task_id))
        return max(int(session.scalar(query) or 0), counted or 0)


def mark_task(engine: Engine, task_id: str, *, status: str, reason: str,
              seen_version: int | None = None) -> bool:
    """Set a task's status directly (used when its workflow closed without writing its end):
    it will not run again, so it shows no next run. With ``seen_version``, only a row no
    workflow has written since it was read at that version (a new run of the task may have
    started meanwhile). True if the row was marked."""
    task = TASK_TABLE
    query = update(task).where(task.c.id == task_id)
    if seen_version is not None:
        query = query.where(task.c.state_version == seen_version)
    with engine.begin() as connection:
        result = connection.execute(query.values(
            status=status, status_reason=reason, updated_at=utcnow(), next_run_at=None))
    return bool(result.rowcount)


def list_dead_letters(
    engine: Engine, *, tenant_id: str | None, limit: int, cursor: str | None = None
) -> tuple[list[tuple[TaskExecution, str]], str | None]:
    """Open dead letters (runs that exhausted their retries) with their task's name, newest first."""
    query = (
        select(TaskExecution, Task.name)
        # A run is listed only under its own task's tenant.
        .join(Task, and_(col(Task.id) == col(TaskExecution.task_id),
                         col(Task.tenant_id) == col(TaskExecution.tenant_id)))
        .where(col(TaskExecution.dead_letter) == DeadLetter.OPEN)
    )
    if tenant_id is not None:
        query = query.where(col(TaskExecution.tenant_id) == tenant_id)
    query = _newest_first(
        query, col(TaskExecution.scheduled_at), col(TaskExecution.id), cursor, limit
    )
    with Session(engine) as session:
        rows = [(execution, name) for execution, name in session.execute(query).all()]
        for execution, _ in rows:
            session.expunge(execution)
    return rows[:limit], _next_cursor(rows, limit, lambda r: (r[0].scheduled_at, r[0].id))


def set_dead_letter(engine: Engine, execution_id: str, *, state: DeadLetter,
                    expect: DeadLetter = DeadLetter.OPEN) -> bool:
    """Move a dead letter from ``expect`` to ``state``; False when it was not in ``expect``."""
    with engine.begin() as connection:
        result = connection.execute(
            update(TaskExecution)
            .where(col(TaskExecution.id) == execution_id, col(TaskExecution.dead_letter) == expect)
            .values(dead_letter=state)
        )
    return bool(result.rowcount)
