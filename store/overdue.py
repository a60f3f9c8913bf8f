"""The alarm of a run that did not come: which tasks have a run overdue, which alarms may clear,
and the conditional writes that raise and clear them (one replica wins each)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Exists,
    Float,
    and_,
    case,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from scheduling.policy import overdue_after
from scheduling.status import ExecutionStatus, TaskStatus
from store.models import EXECUTION_TABLE, TASK_TABLE

# A task in these states has no run to wait for: it is never overdue.
AT_REST = (TaskStatus.PAUSED, TaskStatus.CANCELLED, TaskStatus.COMPLETED, TaskStatus.FAILED)
# The most tasks one pass looks at: a pass stays short whatever the backlog; the next takes more.
BATCH = 500


@dataclass(frozen=True)
class Alarm:
    """A task whose run at ``run_at`` is (or was) overdue."""

    task_id: str
    tenant_id: str
    name: str
    spec: dict[str, object]
    run_at: datetime
    since: datetime | None = None
    outcome: str | None = None  # how a cleared alarm ended: started, skipped: <reason>, paused...


def _watched() -> ColumnElement[Any]:
    """The run the check watches: the sooner of the task's next run and its oldest run that
    its workflow reports neither started nor decided (sent ahead to a worker, or queued)."""
    task = TASK_TABLE
    return case((and_(task.c.unstarted_at.is_not(None),
                      or_(task.c.next_run_at.is_(None), task.c.unstarted_at < task.c.next_run_at)),
                 task.c.unstarted_at), else_=task.c.next_run_at)


class _epoch_seconds(FunctionElement[float]):  # noqa: N801 (a SQL function)
    """An instant as seconds since the epoch, in SQL (SQLite keeps instants as text)."""

    type = Float()
    inherit_cache = True


@compiles(_epoch_seconds)
def _epoch_postgresql(element: _epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(EXTRACT(EPOCH FROM {compiler.process(element.clauses, **kw)}) AS DOUBLE PRECISION)"


@compiles(_epoch_seconds, "sqlite")
def _epoch_sqlite(element: _epoch_seconds, compiler: SQLCompiler, **kw: Any) -> str:
    return f"((julianday({compiler.process(element.clauses, **kw)}) - 2440587.5) * 86400.0)"


def _came(run_at: Any) -> Exists:
    """The run of the task's ``run_at`` instant has started, or its fire was decided."""
    execution = EXECUTION_TABLE
    return exists().where(
        execution.c.task_id == TASK_TABLE.c.id,
        or_(execution.c.scheduled_at == run_at, execution.c.instant == run_at),
        or_(execution.c.started_at.is_not(None), execution.c.status != ExecutionStatus.RUNNING),
    )


def overdue_runs(engine: Engine, now: datetime, default_seconds: float,
                 least_seconds: float) -> list[Alarm]:
    """Tasks without an alarm whose watched run (``_watched``) has neither started nor been
    decided within its overdue bound (``least_seconds`` is the smallest bound any task may have)."""
    task = TASK_TABLE
    # Past the default bound, or past the least one with a bound of its own: a backlog of runs
    # late by less than the default never hides a task whose own bound is shorter.
    own = task.c.spec["overdue_after_seconds"].as_float()
    watched = _watched()

    def before(cutoff: datetime) -> ColumnElement[bool]:
        # Each column on its own, so that each of their indexes serves the read.
        return or_(task.c.next_run_at <= cutoff, task.c.unstarted_at <= cutoff)

    due = or_(before(now - timedelta(seconds=default_seconds)),
              and_(own.is_not(None), before(now - timedelta(seconds=least_seconds))))
    # Each task's own bound (policy.overdue_after) before the batch is cut: runs late by less
    # than their long bounds, however many, never fill it ahead of another task's overdue run.
    past_bound = _epoch_seconds(watched) + func.coalesce(own, default_seconds) <= now.timestamp()
    query = (
        select(task.c.id, task.c.tenant_id, task.c.name, task.c.spec, watched.label("run_at"))
        .where(task.c.overdue_since.is_(None), task.c.status.not_in(AT_REST), due, past_bound,
               ~_came(watched))
        .order_by(watched).limit(BATCH)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [Alarm(r.id, r.tenant_id, r.name, r.spec, _utc(r.run_at)) for r in rows
            if _utc(r.run_at) + overdue_after(r.spec, default_seconds) <= now]


def _utc(moment: datetime) -> datetime:
    """An instant read through an expression, not its column, may come back naive (SQLite)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def raise_alarm(engine: Engine, alarm: Alarm, now: datetime) -> bool:
    """Mark the task overdue unless another replica did, or its run came meanwhile; True when
    this call raised it (and so tells)."""
    task = TASK_TABLE
    with engine.begin() as connection:
        result = connection.execute(
            update(task)
            .where(task.c.id == alarm.task_id, task.c.overdue_since.is_(None),
                   _watched() == alarm.run_at, task.c.status.not_in(AT_REST),
                   ~_came(alarm.run_at))
            .values(overdue_since=now, overdue_run_at=alarm.run_at)
        )
    return bool(result.rowcount)


def recovered_runs(engine: Engine) -> list[Alarm]:
    """Alarms whose run has started or been decided, or whose task came to rest or moved on."""
    task, execution = TASK_TABLE, EXECUTION_TABLE
    run_at = task.c.overdue_run_at
    came = _came(run_at)
    watched = _watched()
    moved = or_(task.c.status.in_(AT_REST), watched.is_(None), watched != run_at)
    # What became of the run, for the notification: its row's status and reason, if any.
    fate = (
        select(func.min(execution.c.status + ":" + func.coalesce(execution.c.reason, "")))
        .where(execution.c.task_id == task.c.id,
               or_(execution.c.scheduled_at == run_at, execution.c.instant == run_at))
        .scalar_subquery()
    )
    query = (
        select(task.c.id, task.c.tenant_id, task.c.name, task.c.spec, run_at,
               task.c.overdue_since, task.c.status, fate.label("fate"))
        .where(task.c.overdue_since.is_not(None), or_(came, moved))
        .limit(BATCH)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [Alarm(r.id, r.tenant_id, r.name, r.spec, r.overdue_run_at, r.overdue_since,
                  _outcome(r.status, r.fate)) for r in rows]


def _outcome(status: str, fate: str | None) -> str:
    if fate:
        run_status, _, reason = fate.partition(":")
        if run_status == ExecutionStatus.SKIPPED:
            return f"skipped: {reason}" if reason else "skipped"
        return "started"
    if status in AT_REST:
        return status.lower()
    return "rescheduled"


def clear_alarm(engine: Engine, alarm: Alarm) -> bool:
    """Clear the alarm unless another replica did; True when this call cleared it (and tells)."""
    task = TASK_TABLE
    with engine.begin() as connection:
        result = connection.execute(
            update(task)
            .where(and_(task.c.id == alarm.task_id, task.c.overdue_since == alarm.since))
            .values(overdue_since=None, overdue_run_at=None)
        )
    return bool(result.rowcount)

