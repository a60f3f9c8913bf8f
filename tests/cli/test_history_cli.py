"""`task-scheduler tasks history <id>` against a real API: the versions and what changed."""

from __future__ import annotations

import asyncio

from tests.api.conftest import Stack
from tests.cli.test_ops_cli import Cli, cli, create, stack

__all__ = ["cli", "stack"]  # the fixtures this module uses


async def test_history_prints_each_version_with_its_changes(cli: Cli, stack: Stack) -> None:
    task_id = await create(stack, "cli-versioned")
    async with stack.client() as api:
        changed = await api.post("/task/update", json={"task_id": task_id, "cron": "0 5 * * *"})
        assert changed.status_code == 202, changed.text
        deadline = asyncio.get_running_loop().time() + 15
        while len((await api.get(f"/tasks/{task_id}/versions")).json()["items"]) < 2:
            assert asyncio.get_running_loop().time() < deadline, "the versions were not written"
            await asyncio.sleep(0.1)

    code, out, err = await cli("tasks", "history", task_id)
    assert code == 0, err
    header, newest, first = out.strip().splitlines()
    assert header.split()[:5] == ["VERSION", "AT", "ACTION", "BY", "CHANGES"]
    assert newest.split()[0] == "2" and " update " in newest
    assert 'cron: "0 3 * * *" -> "0 5 * * *"' in newest
    assert first.split()[0] == "1" and " create " in first and first.endswith("first version")

    page = await cli.json("tasks", "history", task_id, "--limit", "1")
    assert [v["version"] for v in page["items"]] == [2] and page["next_cursor"]
    code, _, err = await cli("tasks", "history", "no-such-task")
    assert code == 1 and "404" in err
