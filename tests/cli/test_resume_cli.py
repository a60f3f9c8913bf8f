"""`tasks show` of a paused task prints what resuming it now would do, for each --missed."""

from __future__ import annotations

import asyncio

from tests.api import conftest as api_conftest
from tests.api.conftest import Stack
from tests.cli.test_ops_cli import Cli, cli  # noqa: F401 - the fixture

stack = api_conftest.stack  # the real API + worker + dev server, one per module


async def test_show_of_a_paused_task_prints_each_resume_choice(cli: Cli, stack: Stack) -> None:  # noqa: F811
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "cli-resume-view", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 1, "missed_run_policy": "skip"})
        task_id = created.json()["task_id"]
        assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
        await asyncio.sleep(3.5)
        code, out, err = await cli("tasks", "show", task_id, "--limit", "2")
        shown = await cli.json("tasks", "show", task_id)
        await api.patch("/task/cancel", json={"task_id": task_id})
    assert code == 0, err
    lines = out.split("if resumed now (", 1)[1].splitlines()
    assert lines[1].startswith("  --missed skip:") and "skipped: paused" in lines[1]
    assert lines[2].startswith("  --missed policy:") and "skipped: missed" in lines[2]
    assert lines[3].endswith("skipped: missed") and lines[4].endswith("runs (schedule)")
    assert "older not listed" in lines[5]
    assert shown["upcoming"]["on_resume"]["policy"]["runs"] == 1


async def test_show_of_an_active_task_prints_no_resume(cli: Cli, stack: Stack) -> None:  # noqa: F811
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "cli-active", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600})
        task_id = created.json()["task_id"]
        code, out, err = await cli("tasks", "show", task_id)
        await api.patch("/task/cancel", json={"task_id": task_id})
    assert code == 0, err
    assert "if resumed now" not in out
