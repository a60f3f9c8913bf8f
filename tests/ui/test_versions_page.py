"""The task page lists the task's spec versions with what changed between them (real HTTP)."""

from __future__ import annotations

import asyncio
import html
import re

from tests.api.conftest import Stack
from tests.ui.tasks import XSS_NAME, create, sign_in


async def test_the_task_page_shows_each_version_and_its_diff(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = await create(api, "ui-versioned")
        task_id = task["task_id"]
        changed = await api.post("/task/update", json={"task_id": task_id, "cron": "0 4 * * *",
                                                       "task_name": XSS_NAME})
        assert changed.status_code == 202, changed.text
        rolled = await api.post(f"/tasks/{task_id}/rollback", json={"version": 1})
        assert rolled.status_code == 202, rolled.text
        deadline = asyncio.get_running_loop().time() + 15
        while len((await api.get(f"/tasks/{task_id}/versions")).json()["items"]) < 3:
            assert asyncio.get_running_loop().time() < deadline, "the versions were not written"
            await asyncio.sleep(0.1)

    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = await browser.get(f"/ui/tasks/{task_id}")
    assert page.status_code == 200
    assert XSS_NAME not in page.text  # the old name is shown escaped
    assert page.text.count('<table id="versions">') == 1  # once, in the page's body
    title = page.text[page.text.index("<title>"):page.text.index("</title>")]
    assert "<table" not in title and "ui-versioned" in title, title
    table = page.text[page.text.index('<table id="versions">'):]
    body = table[table.index("<tbody>"):table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    assert len(rows) == 3
    cells = [[html.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
             for r in rows]
    assert [(c[0], c[2]) for c in cells] == [(["3"], ["rollback"]), (["2"], ["update"]), (["1"], ["create"])]
    newest = " ".join(cells[0][4])
    assert '"0 4 * * *" → "0 3 * * *"' in newest.replace("cron: ", "")
    assert f'"{XSS_NAME}" → "ui-versioned"' in newest
    middle = " ".join(cells[1][4])
    assert '"0 3 * * *" → "0 4 * * *"' in middle and "schedule_type" not in middle
    assert " ".join(cells[2][4]) == "the first version"
