"""Queries for previews: which of a tenant's tasks run next at given instants."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

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
