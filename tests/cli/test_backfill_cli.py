"""`task-scheduler tasks backfill` against a real API (uvicorn, worker, dev server)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tests.api import conftest as api_conftest
from tests.api.conftest import Stack
from tests.api.test_e2e import iso
from tests.cli.test_ops_cli import Cli, cli, create

stack = api_conftest.stack  # the real API + worker + dev server, one per module
__all__ = ["cli"]


async def test_backfill_dry_run_then_run_and_get_shows_its_progress(cli: Cli, stack: Stack) -> None:
    task_id = await create(stack, "nightly")  # cron 0 3 * * * Europe/Berlin
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    window = ["--start", iso(end - timedelta(days=3)), "--end", iso(end)]
    code, out, err = await cli("tasks", "backfill", task_id, *window, "--dry-run")
    assert code == 0, err
    assert out.startswith("dry run: 3 of 3 instants would run"), out
    assert out.count(f"{task_id}:") == 3 and "run" in out

    code, out, err = await cli("tasks", "backfill", task_id, *window, "--mode", "missing")
    assert code == 0, err
    assert out.startswith("backfill accepted: 3 of 3 instants run"), out

    async def done() -> str:
        for _ in range(150):
            task = await cli.json("tasks", "get", task_id)
            if task["backfill"]["status"] == "done":
                return str((await cli("tasks", "get", task_id))[1])
            await asyncio.sleep(0.2)
        raise AssertionError("the backfill did not finish")
    shown = await done()
    assert "backfill:  done: 3 of 3 started, 0 left (missing" in shown, shown
    runs = await cli.json("tasks", "executions", task_id)
    assert sorted(r["trigger"] for r in runs["items"]) == ["backfill"] * 3

    code, _, err = await cli("tasks", "backfill", task_id, "--start", iso(end), "--end",
                             iso(end - timedelta(days=1)))
    assert code == 1 and "422: start must be before end" in err, err


async def test_a_kept_instant_says_why(cli: Cli, stack: Stack) -> None:
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    excluded = (end - timedelta(days=2)).date()
    async with stack.client() as api:
        made = await api.post("/calendars", json={"name": "cli day off", "dates": [excluded.isoformat()]})
        assert made.status_code == 201, made.text
        calendar_id = made.json()["calendar_id"]
        answer = await api.post("/task/create", json={
            "task_name": "cli-off", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
            "exclude_calendars": [{"calendar_id": calendar_id}]})
        assert answer.status_code == 201, answer.text
    task_id = answer.json()["task_id"]
    code, out, err = await cli("tasks", "backfill", task_id, "--start", iso(end - timedelta(days=3)),
                               "--end", iso(end), "--dry-run")
    assert code == 0, err
    assert out.startswith("dry run: 2 of 3 instants would run"), out
    assert "WHY" in out.splitlines()[1]
    (kept,) = [line for line in out.splitlines() if f"{task_id}:{excluded.isoformat()}" in line]
    assert " keep " in kept and calendar_id in kept, out
