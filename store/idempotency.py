"""Idempotency keys: the requests seen with one, per tenant, and what they answered."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, delete, update
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
    row = find_key(engine, tenant_id, key)
    assert row is not None
    return row


def find_key(engine: Engine, tenant_id: str, key: str) -> IdempotencyRecord | None:
    """The tenant's record of the key, if it was seen."""
    with Session(engine) as session:
        row = session.scalar(
            select(IdempotencyRecord).where(
                col(IdempotencyRecord.tenant_id) == tenant_id, col(IdempotencyRecord.key) == key
            )
        )
        if row is not None:
            session.expunge(row)
        return row


def answer_key(engine: Engine, tenant_id: str, key: str, response: dict[str, Any]) -> dict[str, Any]:
    """Keep the operation's answer unless one is kept already; returns the kept answer."""
    with engine.begin() as connection:
        connection.execute(
            update(IdempotencyRecord)
            .where(
                col(IdempotencyRecord.tenant_id) == tenant_id,
                col(IdempotencyRecord.key) == key,
                col(IdempotencyRecord.response).is_(None),
            )
            .values(response=response, completed=True)
        )
    row = find_key(engine, tenant_id, key)
    # A record is never deleted; should it be missing, the answer is still this one.
    return row.response if row is not None and row.response is not None else response


def release_key(engine: Engine, tenant_id: str, key: str, request_hash: str) -> None:
    """Forget the key of a request that was refused before it acted (nothing was answered)."""
    with engine.begin() as connection:
        connection.execute(
            delete(IdempotencyRecord).where(
                col(IdempotencyRecord.tenant_id) == tenant_id,
                col(IdempotencyRecord.key) == key,
                col(IdempotencyRecord.request_hash) == request_hash,
                col(IdempotencyRecord.response).is_(None),
            )
        )


def complete_key(engine: Engine, tenant_id: str, key: str) -> None:
    """Mark the key's task as created."""
    with engine.begin() as connection:
        connection.execute(
            update(IdempotencyRecord)
            .where(col(IdempotencyRecord.tenant_id) == tenant_id, col(IdempotencyRecord.key) == key)
            .values(completed=True)
        )
