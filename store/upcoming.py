"""Queries of which tasks run next when: a tenant's at given instants (previews), and every
tenant's in one second (the herd a new task joins)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from scheduling.policy import herd_second
from store.models import Task
from store.quotas import ACTIVE_STATUSES


def tasks_running_next_at(
    engine: Engine, tenant_id: str, instants: Sequence[datetime], *, besides: str | None = None
) -> int:
    """How many active tasks of the tenant (but ``besides``) have their next run at one of
    ``instants``."""
    if not instants:
        return 0
    query = select(func.count()).select_from(Task).where(
        col(Task.tenant_id) == tenant_id, col(Task.status).in_(ACTIVE_STATUSES),
        col(Task.next_run_at).in_(list(instants)),
    )
    if besides is not None:
        query = query.where(col(Task.id) != besides)
    with Session(engine) as session:
        return int(session.exec(query).one())


def tasks_due_in_second(engine: Engine, at: datetime, *, besides: str | None = None) -> int:
    """How many tasks, of every tenant (but ``besides``), have their next run in ``at``'s whole
    second: the herd a task due then joins. Its workflow dispatches further ahead by their
    number; no tenant is shown it. Only a task that will run shows a next run (a paused,
    cancelled or ended one shows none), so a create's count reads the index alone: a herd's
    creates stay cheap."""
    second = herd_second(at)
    query = select(func.count()).select_from(Task).where(
        col(Task.next_run_at) >= second, col(Task.next_run_at) < second + timedelta(seconds=1),
    )
    if besides is not None:
        query = query.where(col(Task.id) != besides)
    with Session(engine) as session:
        return int(session.exec(query).one())
