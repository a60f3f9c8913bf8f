"""The reads a backfill makes: the execution rows of a task's instants."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from store.models import TaskExecution


def rows_by_id(engine: Engine, task_id: str, tenant_id: str,
               ids: Sequence[str]) -> dict[str, TaskExecution]:
    """The execution rows of the task with these ids (its own tenant's only), by id."""
    found: dict[str, TaskExecution] = {}
    with Session(engine) as session:
        for chunk in (ids[i:i + 500] for i in range(0, len(ids), 500)):
            query = select(TaskExecution).where(
                col(TaskExecution.id).in_(chunk), col(TaskExecution.task_id) == task_id,
                col(TaskExecution.tenant_id) == tenant_id)
            for row in session.exec(query).all():
                session.expunge(row)
                found[row.id] = row
    return found
