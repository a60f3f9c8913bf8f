"""`task-scheduler calendars ...` against a real API (uvicorn, worker, dev server)."""

from __future__ import annotations

from tests.api import conftest as api_conftest
from tests.api.conftest import Stack
from tests.cli.test_ops_cli import Cli

stack = api_conftest.stack  # the real API + worker + dev server, one per module


async def test_calendars_create_list_get_replace_delete(stack: Stack) -> None:
    cli = Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["t1"])
    made = await cli.json("calendars", "create", "--name", "bavaria", "--date", "2026-12-24",
                          "--date", "2026-12-31", "--country", "DE", "--subdivision", "BY")
    cid = made["calendar_id"]
    assert made["dates"] == ["2026-12-24", "2026-12-31"]
    code, out, _ = await cli("calendars", "list")
    assert code == 0 and cid in out and "bavaria" in out
    code, out, _ = await cli("calendars", "get", cid)
    assert code == 0 and "DE BY" in out and "2026-12-24, 2026-12-31" in out
    replaced = await cli.json("calendars", "replace", cid, "--name", "shutdown", "--date", "2027-01-04")
    assert (replaced["name"], replaced["dates"], replaced["holidays"]) == ("shutdown", ["2027-01-04"], None)
    code, out, err = await cli("calendars", "create", "--name", "x", "--country", "XX")
    assert code == 1 and "422" in err and out == ""
    # Another tenant's key sees no such calendar.
    other = Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["t2"])
    code, _, err = await other("calendars", "delete", cid)
    assert code == 1 and "404" in err
    code, out, _ = await cli("calendars", "delete", cid)
    assert code == 0 and f"deleted {cid}" in out
    code, _, err = await cli("calendars", "get", cid)
    assert code == 1 and "404" in err


async def test_tasks_list_shows_a_dates_schedule(stack: Stack) -> None:
    async with stack.client("t1") as api:
        made = await api.post("/task/create", json={
            "task_name": "cli-dates", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "dates", "dates": ["2030-01-02T09:00:00Z", "2030-01-01T09:00:00Z"]})
    assert made.status_code == 201, made.text
    cli = Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["t1"])
    code, out, _ = await cli("tasks", "list", "--name", "cli-dates")
    assert code == 0 and "2 dates to 2030-01-02 09:00:00" in out, out
