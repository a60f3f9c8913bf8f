"""API keys: created once, stored as SHA-256 hashes, looked up per request."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session
from sqlmodel import col, select

from store.models import ApiKey, utcnow

KEY_PREFIX = "tsk_"


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(engine: Engine, tenant_id: str, *, admin: bool = False, key: str | None = None) -> tuple[ApiKey, str]:
    """Store a new key (or the given one) for a tenant; returns the row and the plain key."""
    plain = key or KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        id=uuid.uuid4().hex,
        tenant_id=tenant_id,
        key_hash=hash_key(plain),
        prefix=plain[:8],
        is_admin=admin,
    )
    with Session(engine) as session:
        session.add(row)
        session.commit()
        session.refresh(row)
        session.expunge(row)
    return row, plain


def ensure_key(engine: Engine, tenant_id: str, key: str, *, admin: bool) -> None:
    """Make sure the given key exists (idempotent; used for the dev key)."""
    with Session(engine) as session:
        if session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key))) is not None:
            return
    create_key(engine, tenant_id, admin=admin, key=key)


def find_active_key(engine: Engine, key: str) -> ApiKey | None:
    """The unrevoked key row matching a presented key."""
    with Session(engine) as session:
        row = session.scalar(
            select(ApiKey).where(ApiKey.key_hash == hash_key(key), col(ApiKey.revoked_at).is_(None))
        )
        if row is not None:
            session.expunge(row)
        return row


def list_keys(engine: Engine, tenant_id: str | None = None) -> Sequence[ApiKey]:
    """Keys, optionally of one tenant, oldest first."""
    query = select(ApiKey).order_by(col(ApiKey.created_at))
    if tenant_id is not None:
        query = query.where(ApiKey.tenant_id == tenant_id)
    with Session(engine) as session:
        rows = list(session.scalars(query))
        for row in rows:
            session.expunge(row)
        return rows


def revoke_key(engine: Engine, key_id: str) -> bool:
    """Revoke a key by id; False when there is no such active key."""
    with Session(engine) as session:
        row = session.get(ApiKey, key_id)
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = utcnow()
        session.add(row)
        session.commit()
        return True
