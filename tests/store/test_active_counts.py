"""The remembered active count: used while far below the limit, read afresh near it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import Engine

from store.models import TaskSnapshot
from store.quotas import ActiveCounts, Quota, quota_and_active
from store.tasks import save_snapshot


def _add_task(engine: Engine, tenant: str) -> None:
    now = datetime.now(UTC)
    save_snapshot(engine, TaskSnapshot(
        task_id=uuid.uuid4().hex, tenant_id=tenant, name="t", schedule_type="once", spec={},
        status="PENDING", next_run_at=now, created_at=now, updated_at=now,
    ))


def test_far_below_the_limit_the_remembered_count_and_own_creates_stand_in(sqlite_engine: Engine) -> None:
    counts = ActiveCounts(ttl_seconds=60)
    roomy = Quota(max_active_tasks=100)
    _add_task(sqlite_engine, "a")
    _add_task(sqlite_engine, "a")
    assert quota_and_active(sqlite_engine, "a", roomy, counts)[1] == 2
    _add_task(sqlite_engine, "a")  # written by another process: not seen until the count expires
    counts.created("a")  # this process's own create is
    assert quota_and_active(sqlite_engine, "a", roomy, counts)[1] == 3
    counts.forget("a")
    _add_task(sqlite_engine, "a")
    assert quota_and_active(sqlite_engine, "a", roomy, counts)[1] == 4


def test_near_the_limit_the_count_is_always_read_afresh(sqlite_engine: Engine) -> None:
    counts = ActiveCounts(ttl_seconds=60)
    tight = Quota(max_active_tasks=3)
    for _ in range(2):
        _add_task(sqlite_engine, "b")
    assert quota_and_active(sqlite_engine, "b", tight, counts)[1] == 2
    _add_task(sqlite_engine, "b")
    _add_task(sqlite_engine, "b")
    # 2 remembered + 1 would be within the limit, but not within 90% of it: read again.
    assert quota_and_active(sqlite_engine, "b", tight, counts)[1] == 4


def test_a_remembered_count_expires() -> None:
    counts = ActiveCounts(ttl_seconds=0)
    counts.remember("c", 5)
    assert counts.usable("c", Quota(max_active_tasks=1000)) is None
    fresh = ActiveCounts(ttl_seconds=60)
    fresh.remember("c", 5)
    assert fresh.usable("c", Quota(max_active_tasks=1000)) == 5
    assert fresh.usable("other", Quota(max_active_tasks=1000)) is None
