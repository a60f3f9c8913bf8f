"""Per-tenant quotas: overrides stored per tenant, defaults from settings."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, bindparam, func, select
from sqlalchemy.orm import Session

from config.settings import QuotaSettings
from store.keys import ActiveKey, active_key
from store.models import TASK_TABLE, TenantQuota, utcnow

ACTIVE_STATUSES = ("PENDING", "RUNNING", "PAUSED")
LIMITS = ("max_active_tasks", "min_interval_seconds", "allow_seconds_cron", "max_body_bytes",
          "max_header_bytes", "workflow_types", "workflow_task_queues")
GRANTS = ("workflow_types", "workflow_task_queues")  # lists of names, stored as JSON
QUOTA_TABLE: Table = TenantQuota.__table__  # type: ignore[attr-defined]
# Built once: every create reads both.
_OVERRIDES = select(*(QUOTA_TABLE.c[name] for name in LIMITS)).where(
    QUOTA_TABLE.c.tenant_id == bindparam("tenant_id")
)
_ACTIVE = select(func.count()).select_from(TASK_TABLE).where(
    TASK_TABLE.c.tenant_id == bindparam("tenant_id"), TASK_TABLE.c.status.in_(ACTIVE_STATUSES)
)


_DEFAULT = QuotaSettings()


@dataclass(frozen=True)
class Quota:
    """The limits one tenant works within; the defaults are the settings' (config/settings.py)."""

    max_active_tasks: int = _DEFAULT.max_active_tasks
    min_interval_seconds: float = _DEFAULT.min_interval_seconds
    allow_seconds_cron: bool = _DEFAULT.allow_seconds_cron
    max_body_bytes: int = _DEFAULT.max_body_bytes
    max_header_bytes: int = _DEFAULT.max_header_bytes
    # Granted workflow types and task queues for workflow jobs ("*": all the deployment allows).
    workflow_types: tuple[str, ...] = ()
    workflow_task_queues: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: QuotaSettings) -> Quota:
        """Every tenant's quota unless overridden: the deployment's quota settings."""
        return cls(**settings.model_dump())


def quota_for(engine: Engine, tenant_id: str, defaults: Quota) -> Quota:
    """The tenant's quota: its stored overrides on top of the defaults."""
    with engine.connect() as connection:
        return _quota(connection, tenant_id, defaults)


def _quota(connection: Connection, tenant_id: str, defaults: Quota) -> Quota:
    row = connection.execute(_OVERRIDES, {"tenant_id": tenant_id}).first()
    if row is None:
        return defaults
    overrides: dict[str, Any] = {
        name: tuple(value) if name in GRANTS else value
        for name, value in row._mapping.items() if value is not None
    }
    return replace(defaults, **overrides)


def set_quota(engine: Engine, tenant_id: str, **limits: object) -> None:
    """Store overrides for a tenant (None removes an override)."""
    with Session(engine) as session:
        row = session.get(TenantQuota, tenant_id) or TenantQuota(tenant_id=tenant_id)
        for name, value in limits.items():
            if name in GRANTS and value is not None:
                value = sorted(cast(Iterable[str], value))
            setattr(row, name, value)
        row.updated_at = utcnow()
        session.add(row)
        session.commit()


def _active(connection: Connection, tenant_id: str) -> int:
    return int(connection.execute(_ACTIVE, {"tenant_id": tenant_id}).scalar() or 0)


class ActiveCounts:
    """Active task counts per tenant, remembered for a second by one API process.

    Counting reads every active task of the tenant in the index, on every create. A remembered count, plus the creates this process made since, stands in for it
    while it is well below the tenant's limit; near the limit (and for a refusal) the count is
    always read afresh, so a quota never refuses on a stale count."""

    def __init__(self, ttl_seconds: float = 1.0, headroom: float = 0.9) -> None:
        self._ttl = ttl_seconds
        self._headroom = headroom
        self._counts: dict[str, tuple[float, int]] = {}

    def usable(self, tenant_id: str, quota: Quota) -> int | None:
        """The remembered count, if it is fresh and far enough from the limit to trust."""
        entry = self._counts.get(tenant_id)
        if entry is None or time.monotonic() - entry[0] >= self._ttl:
            return None
        return entry[1] if entry[1] + 1 <= quota.max_active_tasks * self._headroom else None

    def remember(self, tenant_id: str, count: int) -> None:
        self._counts[tenant_id] = (time.monotonic(), count)

    def created(self, tenant_id: str) -> None:
        """One more active task, created by this process."""
        entry = self._counts.get(tenant_id)
        if entry is not None:
            self._counts[tenant_id] = (entry[0], entry[1] + 1)

    def forget(self, tenant_id: str) -> None:
        """A task of the tenant ended or was cancelled: read the count afresh next time."""
        self._counts.pop(tenant_id, None)


def _usage(connection: Connection, tenant_id: str, defaults: Quota,
           counts: ActiveCounts | None) -> tuple[Quota, int]:
    quota = _quota(connection, tenant_id, defaults)
    active = counts.usable(tenant_id, quota) if counts is not None else None
    if active is None:
        active = _active(connection, tenant_id)
        if counts is not None:
            counts.remember(tenant_id, active)
    return quota, active


def key_with_usage(
    engine: Engine, key: str, defaults: Quota, counts: ActiveCounts | None = None
) -> tuple[ActiveKey, Quota, int] | None:
    """The unrevoked key matching a presented key, with its tenant's quota and active task
    count, on one connection (a create needs all three); None for an unknown or revoked key."""
    with engine.connect() as connection:
        found = active_key(connection, key)
        if found is None:
            return None
        return found, *_usage(connection, found.tenant_id, defaults, counts)


def quota_and_active(
    engine: Engine, tenant_id: str, defaults: Quota, counts: ActiveCounts | None = None
) -> tuple[Quota, int]:
    """The tenant's quota and its active task count, in one round trip to a thread."""
    with engine.connect() as connection:
        return _usage(connection, tenant_id, defaults, counts)
