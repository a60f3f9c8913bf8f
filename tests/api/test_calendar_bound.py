"""A tenant holds at most MAX_TENANT_CALENDARS calendars: past it a create is 403 and stores
nothing. A deleted calendar counts until a create purges it, an hour after its delete, unless a
task not yet ended still excludes it (one created as the calendar was deleted)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlmodel import select

from api.calendars import PURGE_DELETED_AFTER
from scheduling.calendars import MAX_TENANT_CALENDARS
from store.keys import create_key
from store.models import Calendar
from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

BODY = {"name": "closed", "dates": ["2030-12-24"]}


def _tenant(stack: Stack) -> tuple[str, httpx.AsyncClient]:
    tenant = f"cal-{uuid.uuid4().hex[:8]}"
    _, key = create_key(stack.engine, tenant)
    return tenant, httpx.AsyncClient(base_url=stack.base_url, timeout=30,
                                     headers={"Authorization": f"Bearer {key}"})


def _held(stack: Stack, tenant: str) -> set[str]:
    with Session(stack.engine) as session:
        return set(session.scalars(select(Calendar.id).where(Calendar.tenant_id == tenant)))


async def test_a_tenant_past_its_calendars_is_refused_until_deleted_ones_are_purged(
    stack: Stack
) -> None:
    tenant, http = _tenant(stack)
    now = datetime.now(UTC)
    with Session(stack.engine) as session:  # all but one, stored as a create stores them
        session.add_all(Calendar(id=uuid.uuid4().hex, tenant_id=tenant, name=f"c{i}",
                                 dates=[], created_at=now, updated_at=now)
                        for i in range(MAX_TENANT_CALENDARS - 1))
        session.commit()
    async with http:
        last = await http.post("/calendars", json=BODY)
        assert last.status_code == 201, last.text
        refused = await http.post("/calendars", json=BODY)
        assert refused.status_code == 403, refused.text
        assert f"holds {MAX_TENANT_CALENDARS} calendars" in refused.json()["detail"]
        assert len(_held(stack, tenant)) == MAX_TENANT_CALENDARS  # the refused one stored nothing

        # Two deleted: one that a task still excludes, one that none does.
        kept, gone = last.json()["calendar_id"], sorted(_held(stack, tenant))[0]
        task = await http.post("/task/create", json={
            "task_name": "payroll", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 10 15 * *", "timezone": "Europe/Berlin",
            "exclude_calendars": [{"calendar_id": kept}]})
        assert task.status_code == 201, task.text
        with Session(stack.engine) as session:  # deleted as the task was created
            session.execute(update(Calendar).where(Calendar.id == kept).values(deleted_at=now))
            session.commit()
        assert (await http.delete(f"/calendars/{gone}")).status_code == 204
        # Deleted, they still count until they are purged.
        assert (await http.post("/calendars", json=BODY)).status_code == 403

        with Session(stack.engine) as session:  # an hour on
            session.execute(update(Calendar).where(Calendar.id.in_([kept, gone])).values(
                deleted_at=now - PURGE_DELETED_AFTER - timedelta(seconds=1)))
            session.commit()
        again = await http.post("/calendars", json=BODY)
        assert again.status_code == 201, again.text
        held = _held(stack, tenant)
        assert gone not in held and kept in held  # the one its task excludes stays
        assert len(held) == MAX_TENANT_CALENDARS
