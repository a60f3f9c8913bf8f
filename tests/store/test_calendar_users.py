"""Which of a tenant's tasks exclude a calendar, on SQLite and PostgreSQL: only the tasks not yet
ended whose spec excludes it, found without reading every spec of the tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from store.calendars import add_calendar, calendars_held, delete_calendar, tasks_using
from store.models import Calendar, TaskSnapshot
from store.tasks import save_snapshot

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _task(engine: Engine, task_id: str, *, tenant: str = "t1", status: str = "PENDING",
          **spec: Any) -> None:
    save_snapshot(engine, TaskSnapshot(
        task_id=task_id, tenant_id=tenant, name=task_id, schedule_type="cron",
        spec={"cron": "0 10 * * *", **spec}, status=status, next_run_at=None,
        created_at=T0, updated_at=T0, state_version=1))


def _calendar(engine: Engine, calendar_id: str) -> Calendar:
    return add_calendar(engine, Calendar(id=calendar_id, tenant_id="t1", name=calendar_id,
                                         created_at=T0, updated_at=T0))


def test_only_the_tenants_tasks_not_yet_ended_that_exclude_a_calendar_use_it(any_engine: Engine) -> None:
    used, other = _calendar(any_engine, "cal-used"), _calendar(any_engine, "cal-other")
    _task(any_engine, "excludes", exclude_calendars=[{"calendar_id": used.id}])
    _task(any_engine, "ended", status="COMPLETED", exclude_calendars=[{"calendar_id": used.id}])
    # Names the calendar in its body only: the text matches, the spec does not exclude it.
    _task(any_engine, "names", job_details={"type": "http", "body": {"note": used.id}},
          exclude_calendars=[{"calendar_id": other.id}])
    _task(any_engine, "theirs", tenant="t2", exclude_calendars=[{"calendar_id": used.id}])
    assert tasks_using(any_engine, "t1", used.id) == ["excludes"]
    assert tasks_using(any_engine, "t1", other.id) == ["names"]
    assert tasks_using(any_engine, "t1", "no-such%calendar_") == []
    # Deleted calendars no task not yet ended excludes are purged; the rest stay counted.
    now = T0 + timedelta(days=1)
    spare = _calendar(any_engine, "cal-spare")
    for calendar in (used, spare):
        assert delete_calendar(any_engine, "t1", calendar.id, now=T0)
    assert calendars_held(any_engine, "t1", purge_deleted_before=now) == 2  # used, other
