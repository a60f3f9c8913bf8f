"""The task page shows the calendars the task excludes, by name, and what a fire on them does."""

from __future__ import annotations

from tests.api.conftest import Stack
from tests.ui.tasks import sign_in


async def test_the_task_page_names_its_calendars(stack: Stack) -> None:
    async with stack.client("t1") as api:
        skip = (await api.post("/calendars", json={"name": "<b>shutdown</b>", "dates": ["2030-01-02"]})).json()
        shift = (await api.post("/calendars", json={"name": "bavaria",
                                                    "holidays": {"country": "DE", "subdivision": "BY"}})).json()
        task = (await api.post("/task/create", json={
            "task_name": "payroll", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 9 15 * *", "timezone": "Europe/Berlin",
            "exclude_calendars": [{"calendar_id": skip["calendar_id"]},
                                  {"calendar_id": shift["calendar_id"], "shift": True}]})).json()
        plain = (await api.post("/task/create", json={
            "task_name": "plain", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 9 15 * *"})).json()
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{task['task_id']}")).text
        without = (await browser.get(f"/ui/tasks/{plain['task_id']}")).text
    shown = page.split('<dd id="calendars">', 1)[1].split("</dd>", 1)[0]
    assert "&lt;b&gt;shutdown&lt;/b&gt;</span> <span class=\"muted\">(skip)</span>" in shown
    assert "bavaria</span> <span class=\"muted\">(shift to the next business day)</span>" in shown
    assert 'id="calendars"' not in without


async def test_a_dates_task_shows_its_dates(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = (await api.post("/task/create", json={
            "task_name": "reminders", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "dates", "dates": ["2030-01-02T09:00:00Z", "2030-01-01T09:00:00Z"]})).json()
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{task['task_id']}")).text
    assert "2 dates, the last at 2030-01-02" in page
