"""A calendar deleted while a task that excludes it is being created or changed: the create (or
update) checked it a moment before and the delete saw no task row naming it, so both succeed.
The task still skips the calendar's dates; the calendar is gone for the tenant."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.temporal import TemporalGateway
from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES


def _calendar() -> dict[str, Any]:
    today = datetime.now(UTC).date()
    return {"name": "shutdown", "dates": [(today + timedelta(days=d)).isoformat() for d in (-1, 0, 1)]}


def _task(**extra: Any) -> dict[str, Any]:
    return {"task_name": "every-second", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 1, "timezone": "UTC", **extra}


async def _first_runs(http: Any, task_id: str) -> list[dict[str, Any]]:
    for _ in range(300):
        items = (await http.get(f"/tasks/{task_id}/executions")).json()["items"]
        if len(items) >= 2:
            return items
        await asyncio.sleep(0.1)
    raise AssertionError("no runs")


async def test_a_calendar_deleted_while_a_task_is_created_still_excludes_its_dates(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack.client("t1") as http, stack.client("t1") as other:
        calendar_id = (await http.post("/calendars", json=_calendar())).json()["calendar_id"]
        original = TemporalGateway.start_task
        deleted: list[int] = []

        async def start_task(self: TemporalGateway, **kwargs: Any) -> Any:
            # The create has checked the calendar; the delete lands before its row.
            deleted.append((await other.delete(f"/calendars/{calendar_id}")).status_code)
            return await original(self, **kwargs)

        monkeypatch.setattr(TemporalGateway, "start_task", start_task)
        made = await http.post("/task/create", json=_task(exclude_calendars=[{"calendar_id": calendar_id}]))
        monkeypatch.setattr(TemporalGateway, "start_task", original)
        assert (made.status_code, deleted) == (201, [204]), made.text
        task_id = made.json()["task_id"]
        runs = await _first_runs(http, task_id)
        # The task keeps the deleted calendar through a change that adds another; a change (or
        # its preview) naming a calendar the tenant does not have is refused.
        other_id = (await http.post("/calendars", json=_calendar())).json()["calendar_id"]
        both = [{"calendar_id": calendar_id}, {"calendar_id": other_id}]
        unknown = [{"calendar_id": calendar_id}, {"calendar_id": "no-such-calendar"}]
        preview = await http.post("/task/preview", json={"task_id": task_id, "exclude_calendars": unknown})
        assert preview.status_code == 404, preview.text
        changed = await http.post("/task/update", json={"task_id": task_id, "exclude_calendars": both})
        assert changed.status_code == 202, changed.text
        await http.patch("/task/cancel", json={"task_id": task_id})
        assert {(r["status"], r["reason"]) for r in runs} == {("SKIPPED", "calendar")}
        assert (await http.get(f"/calendars/{calendar_id}")).status_code == 404
        assert calendar_id not in {c["calendar_id"] for c in (await http.get("/calendars")).json()["items"]}
        assert (await http.put(f"/calendars/{calendar_id}", json=_calendar())).status_code == 404
        assert (await http.delete(f"/calendars/{calendar_id}")).status_code == 404
        page = (await http.get(f"/tasks/{task_id}")).json()
        assert [c["calendar_id"] for c in page["schedule"]["exclude_calendars"]] == [calendar_id, other_id]
        # A new task cannot take the deleted calendar.
        refused = await http.post("/task/create", json=_task(exclude_calendars=[{"calendar_id": calendar_id}]))
        assert refused.status_code == 404, refused.text


async def test_a_calendar_deleted_while_a_task_is_changed_to_exclude_it_still_excludes_its_dates(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack.client("t1") as http, stack.client("t1") as other:
        calendar_id = (await http.post("/calendars", json=_calendar())).json()["calendar_id"]
        made = await http.post("/task/create", json=_task(
            start_date=(datetime.now(UTC) + timedelta(seconds=12)).isoformat()))
        assert made.status_code == 201, made.text
        task_id = made.json()["task_id"]
        original = TemporalGateway.update
        deleted: list[int] = []

        async def update(self: TemporalGateway, *args: Any, **kwargs: Any) -> Any:
            deleted.append((await other.delete(f"/calendars/{calendar_id}")).status_code)
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(TemporalGateway, "update", update)
        changed = await http.post("/task/update", json={
            "task_id": task_id, "exclude_calendars": [{"calendar_id": calendar_id}]})
        monkeypatch.setattr(TemporalGateway, "update", original)
        assert (changed.status_code, deleted) == (202, [204]), changed.text
        runs = await _first_runs(http, task_id)
        await http.patch("/task/cancel", json={"task_id": task_id})
        assert {(r["status"], r["reason"]) for r in runs} == {("SKIPPED", "calendar")}
