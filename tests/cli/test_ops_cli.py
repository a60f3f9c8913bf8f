"""`task-scheduler tasks ...` and `dead-letters ...` against a real API (uvicorn, worker, dev server).

The command runs as a child process, as from an operator's shell: the API and worker under
test share this process and log to its stdout, which would mix with the command's output.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cli import ops
from tests.api import conftest as api_conftest
from tests.api.conftest import Stack

stack = api_conftest.stack  # the real API + worker + dev server, one per module


class Cli:
    """Runs `task-scheduler` with the given environment; returns exit code, stdout, stderr."""

    def __init__(self, **env: str) -> None:
        self.env = {**os.environ, **env}

    async def __call__(self, *argv: str) -> tuple[int, str, str]:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli.main", *argv, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), timeout=60)
        assert child.returncode is not None
        return child.returncode, out.decode(), err.decode()

    async def json(self, *argv: str) -> Any:
        code, out, err = await self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def cli(stack: Stack) -> Cli:
    """The CLI pointed at the stack with tenant t1's key, through the environment."""
    return Cli(SCHEDULER_API_URL=stack.base_url, SCHEDULER_API_KEY=stack.keys["t1"])


async def create(stack: Stack, name: str, tenant: str = "t1") -> str:
    async with stack.client(tenant) as api:
        answer = await api.post("/task/create", json={
            "task_name": name, "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
        })
    assert answer.status_code == 201, answer.text
    task_id: str = answer.json()["task_id"]
    return task_id


async def test_list_and_get_print_tables_and_json(cli: Cli, stack: Stack) -> None:
    first, second = await create(stack, "cli-report"), await create(stack, "cli-cleanup")
    code, out, err = await cli("tasks", "list")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["TASK", "NAME", "STATUS", "SCHEDULE", "NEXT", "RUN", "LAST",
                              "RUNS/OK/FAIL/SKIP"]
    assert any(r.startswith(second) and "cli-cleanup" in r and "cron 0 3 * * * Europe/Berlin" in r
               for r in rows)

    page = await cli.json("tasks", "list", "--name", "cli-report")
    assert [t["task_id"] for t in page["items"]] == [first]

    one = await cli.json("tasks", "list", "--limit", "1")
    assert len(one["items"]) == 1 and one["next_cursor"]
    code, out, _ = await cli("tasks", "list", "--limit", "1")
    assert out.rstrip().endswith(f"more: --cursor {one['next_cursor']}")
    rest = await cli.json("tasks", "list", "--cursor", one["next_cursor"])
    assert one["items"][0]["task_id"] not in {t["task_id"] for t in rest["items"]}

    code, out, _ = await cli("tasks", "get", first)
    assert code == 0
    assert f"task:      {first}" in out and "name:      cli-report" in out and "status:    PENDING" in out
    assert (await cli.json("tasks", "get", first))["task_name"] == "cli-report"


async def test_pause_resume_trigger_executions_cancel(cli: Cli, stack: Stack) -> None:
    task_id = await create(stack, "cli-lifecycle")
    code, out, err = await cli("tasks", "pause", task_id, "--reason", "maintenance")
    assert code == 0, err
    assert out.startswith("pause accepted\n") and "status:    PAUSED (maintenance)" in out
    paused = await cli.json("tasks", "list", "--status", "paused")
    assert task_id in {t["task_id"] for t in paused["items"]}
    assert (await cli.json("tasks", "resume", task_id))["status"] == "PENDING"
    paused = await cli.json("tasks", "list", "--status", "paused")
    assert task_id not in {t["task_id"] for t in paused["items"]}

    code, _, err = await cli("tasks", "trigger", task_id)
    assert code == 0, err
    deadline = asyncio.get_running_loop().time() + 30
    while not (runs := await cli.json("tasks", "executions", task_id))["items"] or (
            runs["items"][0]["status"] != "COMPLETED"):
        assert asyncio.get_running_loop().time() < deadline, runs
        await asyncio.sleep(0.2)
    code, out, _ = await cli("tasks", "executions", task_id)
    header, row = out.splitlines()
    assert header.split()[:4] == ["EXECUTION", "SCHEDULED", "TRIGGER", "STATUS"]
    assert row.startswith(runs["items"][0]["id"]) and " manual " in row and " COMPLETED " in row

    code, out, err = await cli("tasks", "cancel", task_id, "--reason", "done")
    assert code == 0, err
    assert out.startswith(f"cancel accepted\ntask:      {task_id}\n")
    while (await cli.json("tasks", "get", task_id))["status"] != "CANCELLED":
        assert asyncio.get_running_loop().time() < deadline + 30, "the cancel did not land"
        await asyncio.sleep(0.2)
    code, _, err = await cli("tasks", "pause", task_id)
    assert code == 1 and "409: task" in err and "can no longer change" in err


async def test_resume_takes_what_to_do_with_the_fires_of_the_pause(cli: Cli, stack: Stack) -> None:
    task_id = await create(stack, "cli-resume")
    code, _, err = await cli("tasks", "pause", task_id)
    assert code == 0, err
    code, _, err = await cli("tasks", "resume", task_id, "--missed", "later")
    assert code == 2 and "invalid choice" in err
    assert (await cli.json("tasks", "get", task_id))["status"] == "PAUSED"
    code, out, err = await cli("tasks", "resume", task_id, "--missed", "policy")
    assert code == 0, err
    assert out.startswith("resume accepted\n") and "status:    PENDING" in out
    await cli("tasks", "cancel", task_id)


async def test_errors_print_the_detail_and_exit_1(cli: Cli, stack: Stack) -> None:
    code, out, err = await cli("tasks", "get", "no-such-task")
    assert (code, out) == (1, "") and err.strip() == "error: 404: no task no-such-task"

    other = await create(stack, "t2-only", tenant="t2")
    code, _, err = await cli("tasks", "executions", other)
    assert code == 1 and f"no task {other}" in err

    code, _, err = await cli("tasks", "list", "--key", "tsk_wrong")
    assert code == 1 and "401: the API key is unknown or revoked" in err
    code, _, err = await cli("tasks", "list", "--limit", "0")
    assert code == 1 and "422: limit" in err
    code, _, err = await cli("tasks", "list", "--url", "http://127.0.0.1:9")
    assert code == 1 and "cannot reach the API at http://127.0.0.1:9" in err


async def test_usage_errors_exit_2(cli: Cli, tmp_path: Path) -> None:
    code, _, err = await cli("tasks", "get")
    assert code == 2 and "the following arguments are required: task_id" in err
    code, _, err = await cli("tasks", "list", "--status", "SLEEPING")
    assert code == 2 and "invalid choice" in err
    del cli.env["SCHEDULER_API_KEY"]
    cli.env["SCHEDULER_DATA_DIR"] = str(tmp_path)
    code, _, err = await cli("tasks", "list")
    assert code == 2 and "no API key" in err and str(tmp_path / "dev_api_key") in err


async def test_the_dev_key_file_is_the_default_key(cli: Cli, stack: Stack, tmp_path: Path) -> None:
    task_id = await create(stack, "cli-dev-key", tenant="t2")
    (tmp_path / "dev_api_key").write_text(stack.keys["t2"] + "\n")
    del cli.env["SCHEDULER_API_KEY"]
    cli.env["SCHEDULER_DATA_DIR"] = str(tmp_path)
    assert (await cli.json("tasks", "get", task_id))["tenant_id"] == "t2"


async def test_replaying_an_unknown_dead_letter_fails_cleanly(cli: Cli) -> None:
    code, out, err = await cli("dead-letters", "replay", "no-task:2026-01-01T00:00:00Z")
    assert (code, out) == (1, "") and err.startswith("error: 404")


@pytest.fixture
async def dead_letter_api() -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in answering the dead-letter endpoints as the API contract describes them."""
    seen: list[str] = []
    run = {"id": "abc:2026-01-01T03:00:00Z", "task_id": "abc", "task_name": "nightly",
           "scheduled_at": "2026-01-01T03:00:00Z", "trigger": "schedule", "status": "FAILED",
           "reason": None, "attempts": 3, "started_at": "2026-01-01T03:00:00.120000Z",
           "finished_at": "2026-01-01T03:00:02Z", "http_status": 503, "response_snippet": None,
           "error": "HTTP 503 after 3 attempts"}

    async def listing(request: web.Request) -> web.Response:
        seen.append(f"GET {request.path_qs} {request.headers['Authorization']}")
        return web.json_response({"items": [run], "next_cursor": "c2"})

    async def replay(request: web.Request) -> web.Response:
        seen.append(f"POST {request.raw_path} {request.match_info['execution_id']}")
        return web.json_response({**run, "status": "RUNNING", "trigger": "manual"}, status=202)

    app = web.Application()
    app.router.add_get("/dead-letters", listing)
    app.router.add_post("/dead-letters/{execution_id}/replay", replay)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_dead_letter_commands_call_the_contracted_endpoints(
    dead_letter_api: tuple[str, list[str]],
) -> None:
    url, seen = dead_letter_api
    cli = Cli()
    code, out, err = await cli("dead-letters", "list", "--url", url, "--key", "k1", "--limit", "5")
    assert code == 0, err
    header, row, more = out.splitlines()
    assert header.split()[:3] == ["TASK", "EXECUTION", "SCHEDULED"]
    assert row.split()[:2] == ["nightly", "abc:2026-01-01T03:00:00Z"]
    assert "120ms" in row and "HTTP 503 after 3 attempts" in row and more == "more: --cursor c2"
    code, out, _ = await cli("dead-letters", "replay", "abc:2026-01-01T03:00:00Z", "--url", url,
                             "--key", "k1", "--json")
    assert code == 0 and json.loads(out)["status"] == "RUNNING"
    assert seen == ["GET /dead-letters?limit=5 Bearer k1",
                    "POST /dead-letters/abc%3A2026-01-01T03%3A00%3A00Z/replay abc:2026-01-01T03:00:00Z"]


async def test_show_prints_the_schedule_in_words_and_the_upcoming_fires(cli: Cli, stack: Stack) -> None:
    task_id = await create(stack, "cli-show")
    code, out, err = await cli("tasks", "show", task_id, "--limit", "3")
    assert code == 0, err
    assert "in words:  At 03:00, every day, in Europe/Berlin" in out
    fires = [line for line in out.splitlines() if "T03:00:00+0" in line]
    assert len(fires) == 3
    shown = await cli.json("tasks", "show", task_id, "--limit", "2")
    assert shown["task"]["description"] == "At 03:00, every day, in Europe/Berlin"
    assert len(shown["upcoming"]["fires"]) == 2
    code, _, err = await cli("tasks", "show", task_id, "--limit", "0")
    assert code == 1 and "limit" in err


def test_a_runs_lateness_counts_from_its_instant_not_its_jittered_schedule() -> None:
    run = {"id": "t:1", "task_id": "t", "scheduled_at": "2026-12-07T10:00:00+00:00",
           "instant": "2026-12-07T10:04:00+00:00", "started_at": "2026-12-07T10:04:00.050000+00:00",
           "finished_at": "2026-12-07T10:04:01.050000+00:00", "trigger": "schedule",
           "status": "COMPLETED", "attempts": 1, "http_status": 200}
    table = ops._runs_table({"items": [run], "next_cursor": None})
    assert " 50ms " in table and "240050ms" not in table, table
