"""Idempotency keys of create requests."""

from __future__ import annotations

from sqlalchemy import Engine, update
from sqlalchemy.orm import Session
from sqlmodel import col, select

from store.models import IDEMPOTENCY_TABLE, IdempotencyRecord
from store.tasks import _insert


def claim_key(engine: Engine, tenant_id: str, key: str, request_hash: str, task_id: str) -> IdempotencyRecord:
    """Record the key unless it is known; returns the record that holds it (ours or earlier)."""
    stmt = _insert(engine, IDEMPOTENCY_TABLE).values(
        tenant_id=tenant_id, key=key, request_hash=request_hash, task_id=task_id, completed=False
    ).on_conflict_do_nothing(index_elements=["tenant_id", "key"])
    with engine.begin() as connection:
        connection.execute(stmt)
    with Session(engine) as session:
        row = session.scalar(
            select(IdempotencyRecord).where(
                col(IdempotencyRecord.tenant_id) == tenant_id, col(IdempotencyRecord.key) == key
            )
        )
        assert row is not None
        session.expunge(row)
        return row


def complete_key(engine: Engine, tenant_id: str, key: str) -> None:
    """Mark the key's task as created."""
    with engine.begin() as connection:
        connection.execute(
            update(IdempotencyRecord)
            .where(col(IdempotencyRecord.tenant_id) == tenant_id, col(IdempotencyRecord.key) == key)
            .values(completed=True)
        )
