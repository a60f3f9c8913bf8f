"""The page of a paused task shows what resuming it now would do, for each choice."""

from __future__ import annotations

import asyncio

from tests.api.conftest import Stack
from tests.ui.tasks import create, sign_in


async def test_a_paused_task_page_shows_each_resume_choice(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = await create(api, "ui-resume", schedule_type="interval", interval_seconds=1,
                            missed_run_policy="catchup", max_catchup_runs=2)
        assert (await api.post(f"/tasks/{task['task_id']}/pause")).status_code == 202
        await asyncio.sleep(5.5)
        async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
            page = (await browser.get(f"/ui/tasks/{task['task_id']}")).text
        await api.patch("/task/cancel", json={"task_id": task["task_id"]})
    table = page.split('<table id="on-resume">', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[2:]
    assert len(rows) >= 3 and all("skipped: paused" in row for row in rows)
    assert "runs (catchup)" in rows[-2] and "runs (schedule)" in rows[-1]
    assert "skipped: catchup_cap" in rows[0]
    assert 'id="on-resume-summary"' in page


async def test_an_active_task_page_shows_no_resume_choice(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = await create(api, "ui-active", schedule_type="interval", interval_seconds=3600)
        async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
            page = (await browser.get(f"/ui/tasks/{task['task_id']}")).text
        await api.patch("/task/cancel", json={"task_id": task["task_id"]})
    assert '<table id="upcoming">' in page and 'id="on-resume"' not in page
