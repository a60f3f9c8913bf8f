"""API keys: created once, stored as SHA-256 hashes, looked up per request."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import Connection, Engine, Table, bindparam
from sqlalchemy.orm import Session
from sqlmodel import col, select

from store.models import ApiKey, utcnow

KEY_PREFIX = "tsk_"
# What `task-scheduler dev` stores is marked, so that an API outside dev can refuse it: the
# keys it generates start with DEV_KEY_PREFIX, and the rows it writes have ids that start with
# DEV_KEY_ID_PREFIX (which also marks a key chosen with SCHEDULER_DEV_API_KEY).
DEV_KEY_PREFIX = KEY_PREFIX + "dev_"
DEV_KEY_ID_PREFIX = "dev-"
KEY_TABLE: Table = ApiKey.__table__  # type: ignore[attr-defined]
# Built once: the lookup runs on every request, and building a statement costs more than
# running it.
_ACTIVE_KEY = select(KEY_TABLE.c.id, KEY_TABLE.c.tenant_id, KEY_TABLE.c.is_admin).where(
    KEY_TABLE.c.key_hash == bindparam("key_hash"), KEY_TABLE.c.revoked_at.is_(None)
)


class ActiveKey(NamedTuple):
    """Whose an unrevoked key is."""

    id: str
    tenant_id: str
    is_admin: bool


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(engine: Engine, tenant_id: str, *, admin: bool = False, key: str | None = None,
               key_id: str | None = None) -> tuple[ApiKey, str]:
    """Store a new key (or the given one) for a tenant; returns the row and the plain key."""
    plain = key or new_key()
    row = ApiKey(
        id=key_id or uuid.uuid4().hex,
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


def new_key() -> str:
    """A fresh random key; never one that reads as a dev key (a 1 in 64**4 draw)."""
    while (plain := KEY_PREFIX + secrets.token_urlsafe(32)).startswith(DEV_KEY_PREFIX):
        pass
    return plain


def ensure_dev_key(engine: Engine, tenant_id: str, key: str) -> None:
    """Make sure the dev launcher's admin key exists, marked as a dev key (idempotent)."""
    with Session(engine) as session:
        if session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key))) is not None:
            return
    create_key(engine, tenant_id, admin=True, key=key, key_id=DEV_KEY_ID_PREFIX + uuid.uuid4().hex)


def is_dev_key(found: ActiveKey, key: str) -> bool:
    """Whether a key is one `task-scheduler dev` made or stored (refused outside dev)."""
    return found.id.startswith(DEV_KEY_ID_PREFIX) or key.startswith(DEV_KEY_PREFIX)


def find_active_key(engine: Engine, key: str) -> ActiveKey | None:
    """The unrevoked key matching a presented key (read afresh: a revocation counts at once)."""
    with engine.connect() as connection:
        return active_key(connection, key)


def active_key(connection: Connection, key: str) -> ActiveKey | None:
    """``find_active_key`` on a connection the caller holds."""
    row = connection.execute(_ACTIVE_KEY, {"key_hash": hash_key(key)}).first()
    return None if row is None else ActiveKey(row.id, row.tenant_id, bool(row.is_admin))


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
