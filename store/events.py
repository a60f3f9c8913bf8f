"""Queries of the task history: events appended by the workflow, read newest first."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, Engine
from sqlmodel import col, select

from store.models import EVENT_TABLE, TaskEvent, TaskEventRecord
from store.tasks import _dialect_insert, _fetch, _newest_first, _next_cursor


def append_events(connection: Connection, events: Sequence[TaskEventRecord]) -> None:
    """Insert events by id; one already there (a retried or replayed write) is left as it is."""
    if not events:
        return
    stmt = _dialect_insert(connection.dialect.name, EVENT_TABLE).on_conflict_do_nothing(
        index_elements=["id"])
    connection.execute(stmt, [event.model_dump() for event in events])


def with_events(write: Callable[[Connection], None],
                events: Sequence[TaskEventRecord]) -> Callable[[Connection], None]:
    """A batch write, then the task's events in the same transaction."""

    def write_both(connection: Connection) -> None:
        write(connection)
        append_events(connection, events)

    return write_both


def record_event(engine: Engine, event: TaskEventRecord) -> None:
    """Append one event outside a workflow (the reconciler's repairs)."""
    with engine.begin() as connection:
        append_events(connection, [event])


def list_events(
    engine: Engine, *, task_id: str, tenant_id: str, limit: int, cursor: str | None = None,
    versions_only: bool = False,
) -> tuple[Sequence[TaskEvent], str | None]:
    """A task's events, newest first, and the next page's cursor; ``versions_only``: only the
    events that made a spec version (they carry the spec after them)."""
    query = select(TaskEvent).where(col(TaskEvent.task_id) == task_id,
                                    col(TaskEvent.tenant_id) == tenant_id)
    if versions_only:
        query = query.where(col(TaskEvent.spec).is_not(None))
    query = _newest_first(query, col(TaskEvent.at), col(TaskEvent.id), cursor, limit)
    rows = _fetch(engine, query)
    return rows[:limit], _next_cursor(rows, limit, lambda r: (r.at, r.id))


def read_version(engine: Engine, *, task_id: str, tenant_id: str, version: int) -> TaskEvent | None:
    """The event that made a version of a task's spec (the newest, should two claim it)."""
    query = select(TaskEvent).where(
        col(TaskEvent.task_id) == task_id, col(TaskEvent.tenant_id) == tenant_id,
        col(TaskEvent.spec_version) == version, col(TaskEvent.spec).is_not(None),
    ).order_by(col(TaskEvent.at).desc()).limit(1)
    rows = _fetch(engine, query)
    return rows[0] if rows else None
