"""The task page shows the task's latest backfill and the runs it made."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

from tests.api.conftest import Stack
from tests.api.test_e2e import iso
from tests.ui.tasks import create, sign_in


async def test_task_page_shows_the_backfill_and_its_runs(stack: Stack) -> None:
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    async with stack.client("t1") as api:
        task = await create(api, "ui-backfilled")  # cron 0 3 * * * Europe/Berlin
        answer = await api.post(f"/tasks/{task['task_id']}/backfill", json={
            "start": iso(end - timedelta(days=2)), "end": iso(end)})
        assert answer.status_code == 202, answer.text
        for _ in range(150):
            backfill = (await api.get(f"/tasks/{task['task_id']}")).json()["backfill"]
            if backfill["status"] == "done":
                break
            await asyncio.sleep(0.2)
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{task['task_id']}")).text
    shown = re.search(r'<dd id="backfill">(.*?)</dd>', page, re.S)
    assert shown is not None, page
    assert "done" in shown.group(1) and "2 of 2 started, 0 left" in shown.group(1)
    assert page.count("<td>backfill</td>") == 2
