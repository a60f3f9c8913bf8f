"""Backfill through the API, on the real worker and dev server, SQLite and PostgreSQL: the
modes pick the right past instants, a dry run changes nothing, the runs happen oldest first
under the ids their instants always have (trigger backfill), overlap holds, pause and cancel
stop a backfill, a second one is refused, bad ranges get a 4xx, instants the workflow has not
decided and (for missing) instants on excluded dates are kept."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine

from scheduling.status import execution_id
from store.models import ExecutionRecord
from store.tasks import get_execution, list_executions, write_record
from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso
from tests.target import TargetServer

pytestmark = ON_BOTH_DATABASES

YEARLY = {"schedule_type": "cron", "cron": "0 0 1 1 *", "timezone": "UTC"}
RANGE = {"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}


def new_year(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


async def _until(check, timeout: float = 60) -> Any:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


async def _yearly(api: httpx.AsyncClient, url: str, **extra: Any) -> str:
    """A task that fires every New Year (never during a test): its past instants are 2020-2025."""
    created = await api.post("/task/create", json={
        "task_name": "yearly", **YEARLY, "job_details": {"type": "http", "url": url}, **extra})
    assert created.status_code == 201, created.text
    return str(created.json()["task_id"])


def _seed(engine: Engine, task_id: str) -> None:
    """The rows earlier runs left: 2021 COMPLETED, 2022 FAILED and dead-lettered, 2023 SKIPPED."""
    def row(year: int, status: str, **fields: Any) -> ExecutionRecord:
        return ExecutionRecord(id=execution_id(task_id, new_year(year)), task_id=task_id,
                               tenant_id="t1", scheduled_at=new_year(year), status=status,
                               finished_at=new_year(year) + timedelta(seconds=1), **fields)
    rows = [row(2021, "COMPLETED", attempts=1, http_status=200),
            row(2022, "FAILED", attempts=3, error="HttpStatus: answered 500", dead_letter="open"),
            row(2023, "SKIPPED", reason="missed")]
    with engine.begin() as connection:
        write_record(engine, rows, None)(connection)


async def _done(api: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get(f"/tasks/{task_id}")).json()
        backfill = body["backfill"]
        return body if backfill is not None and backfill["status"] != "running" else None
    result: dict[str, Any] = await _until(finished)
    return result


def _keys(target: TargetServer, path: str) -> list[str | None]:
    return [r.key for r in target.received if r.path == path]


async def test_dry_run_lists_each_mode_and_changes_nothing(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        task_id = await _yearly(api, target.url("/dry"))
        _seed(stack.engine, task_id)
        before = list_executions(stack.engine, task_id=task_id, limit=20)[0]
        picked = {}
        for mode in ("missing", "failed", "all"):
            answer = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": mode, "dry_run": True})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert [i["scheduled_at"][:4] for i in body["instants"]] == [str(y) for y in range(2020, 2026)]
            assert [i["execution_id"] for i in body["instants"]] == [
                execution_id(task_id, new_year(y)) for y in range(2020, 2026)]
            picked[mode] = [i["scheduled_at"][:4] for i in body["instants"] if i["action"] == "run"]
            assert body["to_run"] == len(picked[mode])
        assert picked == {"missing": ["2020", "2023", "2024", "2025"], "failed": ["2022"],
                          "all": [str(y) for y in range(2020, 2026)]}
        shown = (await api.get(f"/tasks/{task_id}")).json()
    assert shown["backfill"] is None and shown["run_count"] == 0
    assert list_executions(stack.engine, task_id=task_id, limit=20)[0] == before
    assert _keys(target, "/dry") == []


async def test_runs_oldest_first_under_their_ids_with_trigger_backfill(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        task_id = await _yearly(api, target.url("/fill"), max_runs=1)
        _seed(stack.engine, task_id)
        answer = await api.post(f"/tasks/{task_id}/backfill", json=RANGE)
        assert answer.status_code == 202, answer.text
        assert answer.json()["to_run"] == 4
        shown = await _done(api, task_id)
        missing = [execution_id(task_id, new_year(y)) for y in (2020, 2023, 2024, 2025)]
        assert _keys(target, "/fill") == missing  # oldest first, each under its own id
        assert shown["backfill"] | {"asked_at": None} == {
            "mode": "missing", "start": RANGE["start"], "end": RANGE["end"], "total": 4,
            "started": 4, "left": 0, "status": "done", "reason": None, "asked_at": None}
        # Not counted against max_runs: the schedule goes on.
        assert shown["status"] == "PENDING" and shown["next_run_at"] is not None, shown
        for run_id in missing:
            row = get_execution(stack.engine, run_id)
            assert row is not None and (row.status, row.trigger) == ("COMPLETED", "backfill"), row
        skipped_before = get_execution(stack.engine, missing[1])
        assert skipped_before is not None and skipped_before.reason == "backfilled; before: SKIPPED (missed)"
        kept = get_execution(stack.engine, execution_id(task_id, new_year(2021)))
        assert kept is not None and (kept.status, kept.trigger) == ("COMPLETED", "schedule")

        # failed: the dead-lettered run again, same id; its row now says how it went and before.
        failed = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": "failed"})
        assert failed.status_code == 202, failed.text
        await _until(lambda: _status_is(api, task_id, "done", started=1))
        rerun_id = execution_id(task_id, new_year(2022))
        assert _keys(target, "/fill")[4:] == [rerun_id]
        rerun = get_execution(stack.engine, rerun_id)
        assert rerun is not None
        assert (rerun.status, rerun.trigger, rerun.error, rerun.dead_letter) == ("COMPLETED", "backfill", None, None)
        assert rerun.reason == "backfilled; before: FAILED (HttpStatus: answered 500)"
        letters = (await api.get("/dead-letters")).json()["items"]
        assert rerun_id not in [d["id"] for d in letters]

        # all: every instant again, each under the same Idempotency-Key as before.
        again = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": "all"})
        assert again.status_code == 202, again.text
        await _until(lambda: _status_is(api, task_id, "done", started=6))
    every = [execution_id(task_id, new_year(y)) for y in range(2020, 2026)]
    assert _keys(target, "/fill")[5:] == every


async def _status_is(api: httpx.AsyncClient, task_id: str, status: str, *, started: int) -> bool:
    backfill = (await api.get(f"/tasks/{task_id}")).json()["backfill"]
    return bool(backfill and backfill["status"] == status and backfill["started"] == started)


async def test_second_backfill_is_409_and_pause_stops_it(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        task_id = await _yearly(api, target.url("/slow/1"))
        first = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": "all"})
        assert first.status_code == 202, first.text
        second = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": "all"})
        assert second.status_code == 409, second.text
        assert "running already" in second.json()["detail"]
        await _until(lambda: asyncio.sleep(0, bool(_keys(target, "/slow/1"))))
        paused = await api.post(f"/tasks/{task_id}/pause", json={"reason": "hold"})
        assert paused.status_code == 202, paused.text
        shown = await _done(api, task_id)
        assert (shown["backfill"]["status"], shown["backfill"]["reason"]) == ("stopped", "paused")
        started = shown["backfill"]["started"]
        assert started < 6 and shown["backfill"]["left"] == 6 - started

        async def settled() -> bool:
            rows, _ = list_executions(stack.engine, task_id=task_id, limit=20)
            return bool(rows) and all(r.status != "RUNNING" for r in rows)
        await _until(settled)
        refused = await api.post(f"/tasks/{task_id}/backfill", json=RANGE)
        assert refused.status_code == 409 and "paused" in refused.json()["detail"], refused.text
    # The instants left did not run; their rows stay as they were (none).
    assert len(_keys(target, "/slow/1")) == started
    rows, _ = list_executions(stack.engine, task_id=task_id, limit=20)
    assert len(rows) == started and all(r.trigger == "backfill" for r in rows)


async def test_cancel_stops_a_backfill_and_its_running_run(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        task_id = await _yearly(api, target.url("/hang"))
        assert (await api.post(f"/tasks/{task_id}/backfill", json=RANGE)).status_code == 202
        await _until(lambda: asyncio.sleep(0, bool(_keys(target, "/hang"))))
        cancelled = await api.patch("/task/cancel", json={"task_id": task_id})
        assert cancelled.status_code == 202, cancelled.text
        shown = await _done(api, task_id)
    assert (shown["backfill"]["status"], shown["backfill"]["reason"]) == ("stopped", "cancelled")
    assert (shown["backfill"]["started"], shown["backfill"]["left"]) == (1, 5)
    [row] = list_executions(stack.engine, task_id=task_id, limit=20)[0]
    assert (row.status, row.trigger) == ("CANCELLED", "backfill")
    assert len(_keys(target, "/hang")) == 1


async def test_overlap_policy_decides_the_fires_that_meet_a_backfill(stack: Stack, target: TargetServer) -> None:
    # Fires every 3 s, each run 1 s; four past instants of 2 s... a fire that comes while a
    # backfill run is going is SKIPPED overlap (overlap_policy skip), and no two runs overlap.
    origin = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=120)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "fast", "schedule_type": "interval", "interval_seconds": 3,
            "start_date": iso(origin), "overlap_policy": "skip",
            "job_details": {"type": "http", "url": target.url("/slow/2.5")}})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        answer = await api.post(f"/tasks/{task_id}/backfill", json={
            "start": iso(origin), "end": iso(origin + timedelta(seconds=12))})
        assert answer.status_code == 202, answer.text
        assert answer.json()["to_run"] == 4
        await _done(api, task_id)
        await api.patch("/task/cancel", json={"task_id": task_id})

        async def settled() -> bool:
            rows, _ = list_executions(stack.engine, task_id=task_id, limit=200)
            return all(r.status != "RUNNING" for r in rows)
        await _until(settled)
    rows, _ = list_executions(stack.engine, task_id=task_id, limit=200)
    backfilled = [r for r in rows if r.trigger == "backfill"]
    assert sorted(r.scheduled_at for r in backfilled) == [origin + timedelta(seconds=s) for s in (0, 3, 6, 9)]
    assert any(r.status == "SKIPPED" and r.reason == "overlap" for r in rows), [
        (r.trigger, r.status, r.reason) for r in rows]
    ran = sorted((r.started_at, r.finished_at) for r in rows
                 if r.started_at is not None and r.finished_at is not None)
    for (_, end), (start, _) in zip(ran, ran[1:], strict=False):
        assert start >= end - timedelta(milliseconds=50), "two runs of the task overlapped"


async def test_bad_ranges_and_tasks_get_a_4xx(stack: Stack, target: TargetServer) -> None:
    now = datetime.now(UTC)
    async with stack.client() as api:
        task_id = await _yearly(api, target.url("/never"))
        path = f"/tasks/{task_id}/backfill"
        cases = {
            "end must not be in the future": {"start": RANGE["start"], "end": iso(now + timedelta(hours=1))},
            "start must be before end": {"start": RANGE["end"], "end": RANGE["start"]},
            "time zone": {"start": "2020-01-01T00:00:00", "end": RANGE["end"]},
            "mode": {**RANGE, "mode": "some"},
            # 0 is not false: a body that is not what the document says changes nothing.
            "valid boolean": {**RANGE, "dry_run": 0},
        }
        for words, body in cases.items():
            answer = await api.post(path, json=body)
            assert answer.status_code == 422 and words in answer.text, (words, answer.text)
        # These two fire on their own (every minute): their runs go elsewhere, and they end here.
        minutely = await api.post("/task/create", json={
            "task_name": "m", "schedule_type": "cron", "cron": "* * * * *",
            "job_details": {"type": "http", "url": target.url("/minutely")}})
        many = await api.post(f"/tasks/{minutely.json()['task_id']}/backfill", json={
            "start": iso(now - timedelta(days=1)), "end": iso(now - timedelta(minutes=1))})
        assert many.status_code == 422 and "more than 1000" in many.text, many.text
        delay = await api.post("/task/create", json={
            "task_name": "d", "schedule_type": "interval", "interval_seconds": 60,
            "interval_mode": "fixed_delay", "job_details": {"type": "http", "url": target.url("/delay")}})
        fixed = await api.post(f"/tasks/{delay.json()['task_id']}/backfill", json=RANGE)
        assert fixed.status_code == 409 and "fixed_delay" in fixed.text, fixed.text
        for other_task in (minutely, delay):
            await api.patch("/task/cancel", json={"task_id": other_task.json()["task_id"]})
        assert (await api.post("/tasks/nosuchtask/backfill", json=RANGE)).status_code == 404
        async with stack.client("t2") as other:
            assert (await other.post(path, json={**RANGE, "dry_run": True})).status_code == 404
        await api.patch("/task/cancel", json={"task_id": task_id})
        ended = await api.post(path, json=RANGE)
        assert ended.status_code == 409, ended.text
    assert _keys(target, "/never") == []


async def test_instants_are_the_ones_the_workflow_fired(stack: Stack, target: TargetServer) -> None:
    # A fixed-rate interval counts from its workflow's anchor: the backfill's instants of a range
    # are exactly the fires whose rows the workflow wrote, under the same ids.
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "every-second", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/tick")}})
        assert created.status_code == 201, created.text
        task = created.json()
        origin = datetime.fromisoformat(task["created_at"])

        async def past_the_range() -> bool:  # a run after the range has started
            rows, _ = list_executions(stack.engine, task_id=task["task_id"], limit=50)
            return any(r.scheduled_at >= origin + timedelta(seconds=4) for r in rows)
        await _until(past_the_range)
        answer = await api.post(f"/tasks/{task['task_id']}/backfill", json={
            "start": iso(origin), "end": iso(origin + timedelta(seconds=3.5)), "mode": "all",
            "dry_run": True})
        await api.patch("/task/cancel", json={"task_id": task["task_id"]})
    assert answer.status_code == 200, answer.text
    rows, _ = list_executions(stack.engine, task_id=task["task_id"], limit=50)
    fired = sorted(r.id for r in rows if r.scheduled_at < origin + timedelta(seconds=3.5))
    assert sorted(i["execution_id"] for i in answer.json()["instants"]) == fired
    assert len(fired) == 3


async def test_missing_keeps_the_instants_on_excluded_dates(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        made = await api.post("/calendars", json={"name": "new year 2024", "dates": ["2024-01-01"]})
        assert made.status_code == 201, made.text
        calendar_id = made.json()["calendar_id"]
        task_id = await _yearly(api, target.url("/cal"), exclude_calendars=[{"calendar_id": calendar_id}])
        skipped = ExecutionRecord(id=execution_id(task_id, new_year(2023)), task_id=task_id,
                                  tenant_id="t1", scheduled_at=new_year(2023), status="SKIPPED",
                                  reason="calendar", finished_at=new_year(2023))
        with stack.engine.begin() as connection:
            write_record(stack.engine, [skipped], None)(connection)
        dry = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "dry_run": True})
        assert dry.status_code == 200, dry.text
        instants = {i["scheduled_at"][:4]: i for i in dry.json()["instants"]}
        assert [y for y, i in instants.items() if i["action"] == "run"] == ["2020", "2021", "2022", "2025"]
        assert instants["2023"]["action"] == instants["2024"]["action"] == "keep"
        assert "calendars" in instants["2023"]["reason"] and calendar_id in instants["2024"]["reason"]
        assert instants["2020"]["reason"] is None
        # The other modes pick by the rows alone.
        every = await api.post(f"/tasks/{task_id}/backfill", json={**RANGE, "mode": "all", "dry_run": True})
        assert every.json()["to_run"] == 6, every.text
        answer = await api.post(f"/tasks/{task_id}/backfill", json=RANGE)
        assert answer.status_code == 202 and answer.json()["to_run"] == 4, answer.text
        await _done(api, task_id)
    assert _keys(target, "/cal") == [execution_id(task_id, new_year(y)) for y in (2020, 2021, 2022, 2025)]


async def test_instants_the_workflow_has_not_decided_are_kept(stack: Stack, target: TargetServer) -> None:
    # Paused at once: the fires inside the pause wait for the resume, which decides them.
    start = datetime.now(UTC) - timedelta(seconds=5)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "every second", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/undecided")}})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        paused = await api.post(f"/tasks/{task_id}/pause", json={"reason": "hold"})
        assert paused.status_code == 202, paused.text
        await asyncio.sleep(5)
        body = {"start": iso(start), "end": iso(datetime.now(UTC) - timedelta(seconds=0.5)), "dry_run": True}
        answer = await api.post(f"/tasks/{task_id}/backfill", json=body)
        assert answer.status_code == 200, answer.text
    instants = answer.json()["instants"]
    undecided = [i for i in instants if i["current"] is None]
    assert len(undecided) >= 2, instants
    assert answer.json()["to_run"] == 0
    assert all(i["action"] == "keep" and "not decided" in i["reason"] for i in undecided), undecided
