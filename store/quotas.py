"""Per-tenant quotas: overrides stored per tenant, defaults from settings."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import Engine, func
from sqlalchemy.orm import Session
from sqlmodel import col, select

from store.models import Task, TenantQuota, utcnow

ACTIVE_STATUSES = ("PENDING", "RUNNING", "PAUSED")


@dataclass(frozen=True)
class Quota:
    """The limits one tenant works within."""

    max_active_tasks: int = 10_000
    min_interval_seconds: float = 1.0
    allow_seconds_cron: bool = False
    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 8 * 1024


def quota_for(engine: Engine, tenant_id: str, defaults: Quota) -> Quota:
    """The tenant's quota: its stored overrides on top of the defaults."""
    with Session(engine) as session:
        row = session.get(TenantQuota, tenant_id)
    if row is None:
        return defaults
    overrides = {
        name: getattr(row, name)
        for name in ("max_active_tasks", "min_interval_seconds", "allow_seconds_cron",
                     "max_body_bytes", "max_header_bytes")
        if getattr(row, name) is not None
    }
    return replace(defaults, **overrides)


def set_quota(engine: Engine, tenant_id: str, **limits: object) -> None:
    """Store overrides for a tenant (None removes an override)."""
    with Session(engine) as session:
        row = session.get(TenantQuota, tenant_id) or TenantQuota(tenant_id=tenant_id)
        for name, value in limits.items():
            setattr(row, name, value)
        row.updated_at = utcnow()
        session.add(row)
        session.commit()


def count_active_tasks(engine: Engine, tenant_id: str) -> int:
    """Tasks of the tenant that are not finished."""
    with Session(engine) as session:
        return int(session.scalar(
            select(func.count()).select_from(Task).where(
                col(Task.tenant_id) == tenant_id, col(Task.status).in_(ACTIVE_STATUSES)
            )
        ) or 0)


def quota_and_active(engine: Engine, tenant_id: str, defaults: Quota) -> tuple[Quota, int]:
    """The tenant's quota and its active task count, in one round trip to a thread."""
    return quota_for(engine, tenant_id, defaults), count_active_tasks(engine, tenant_id)
