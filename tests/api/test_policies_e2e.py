"""Policies end to end on the real dev server: dead letters and replay, notifications,
circuit breaker, drift, jitter, and runs dispatched ahead of their instant."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from api.temporal import TemporalGateway
from store.tasks import get_execution, list_executions
from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso, wait_for_status
from tests.faults.processes import free_port
from tests.target import TargetServer, hook_comes_up


async def _until(check, timeout: float = 40) -> Any:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


def _events(target: TargetServer, path: str = "/notify") -> list[str]:
    return [r.json()["event"] for r in target.received if r.path == path]


async def test_failed_run_is_dead_lettered_notified_and_replayed_with_the_same_key(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "always-500", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "http", "url": target.url("/status/500")},
            "retry_policy": {"max_attempts": 2, "initial_interval_seconds": 0.2},
            "notify": {"url": target.url("/notify"), "events": ["failed", "dead_lettered", "completed"]},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        final = await wait_for_status(api, task_id, {"FAILED"})
        execution_id = final["last_run"]["execution_id"]
        await _until(lambda: asyncio.sleep(0, len(_events(target)) >= 2))
        assert sorted(_events(target)) == ["dead_lettered", "failed"]

        letters = (await api.get("/dead-letters")).json()["items"]
        mine = [d for d in letters if d["id"] == execution_id]
        assert mine and mine[0]["task_name"] == "always-500" and mine[0]["attempts"] == 2
        assert mine[0]["http_status"] == 500 and mine[0]["dead_letter"] == "open"
        async with stack.client("t2") as other:
            assert execution_id not in {d["id"] for d in (await other.get("/dead-letters")).json()["items"]}
            assert (await other.post(f"/dead-letters/{execution_id}/replay")).status_code == 404

        replayed = await api.post(f"/dead-letters/{execution_id}/replay")
        assert replayed.status_code == 202, replayed.text
        # Sent again before the replay's run starts (the task's workflow queues it once), or
        # refused once it has: either way the job runs once more, not twice (four calls).
        assert (await api.post(f"/dead-letters/{execution_id}/replay")).status_code in (202, 404, 409)

        async def four_calls() -> bool:
            return len([r for r in target.received if r.path == "/status/500"]) >= 4
        await _until(four_calls)
        keys = {r.headers["Idempotency-Key"] for r in target.received if r.path == "/status/500"}
        assert keys == {execution_id}  # the replay is the same run: the same key
        await wait_for_status(api, task_id, {"FAILED"})

        async def open_again() -> list[dict[str, Any]]:
            items = (await api.get("/dead-letters")).json()["items"]
            return [d for d in items if d["id"] == execution_id and d["attempts"] == 2]
        await _until(open_again)
        assert len([r for r in target.received if r.path == "/status/500"]) == 4
        dismissed = await api.delete(f"/dead-letters/{execution_id}")
        assert dismissed.status_code == 204
        assert execution_id not in {d["id"] for d in (await api.get("/dead-letters")).json()["items"]}
        history = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        assert [(h["id"], h["status"], h["dead_letter"]) for h in history] == [(execution_id, "FAILED", "dismissed")]


async def test_replay_of_a_dead_letter_that_now_succeeds_completes_the_task(stack: Stack) -> None:
    port = free_port()  # nothing listens here yet: the run fails
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "flaky", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "http", "url": f"http://127.0.0.1:{port}/hook"},
            "retry_policy": {"max_attempts": 1},
        })
        task_id = created.json()["task_id"]
        final = await wait_for_status(api, task_id, {"FAILED"})
        execution_id = final["last_run"]["execution_id"]
        # The target comes up; the same run, replayed, now succeeds.
        async with hook_comes_up(port) as seen:
            assert (await api.post(f"/dead-letters/{execution_id}/replay")).status_code == 202
            done = await wait_for_status(api, task_id, {"COMPLETED"})
        assert done["last_run"]["execution_id"] == execution_id
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        # The replay is the same run again: its row keeps its trigger and says it was replayed,
        # and the task counts one run, the one that now succeeded.
        assert [(r["id"], r["status"], r["trigger"], r["dead_letter"]) for r in runs] == [
            (execution_id, "COMPLETED", "schedule", "replayed")]
        assert (done["run_count"], done["success_count"], done["failure_count"]) == (1, 1, 0)
        assert seen == [execution_id]
        assert execution_id not in {d["id"] for d in (await api.get("/dead-letters")).json()["items"]}


async def test_circuit_breaker_auto_pauses_and_resume_clears(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "breaker", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/status/404")},
            "retry_policy": {"max_attempts": 1}, "max_consecutive_failures": 3,
            "notify": {"url": target.url("/notify"), "events": ["auto_paused"]},
        })
        task_id = created.json()["task_id"]
        paused = await wait_for_status(api, task_id, {"PAUSED"}, timeout=40)
        assert "3 consecutive failed runs" in paused["status_reason"]
        assert paused["consecutive_failures"] == 3 and paused["next_run_at"] is None
        await _until(lambda: asyncio.sleep(0, "auto_paused" in _events(target)))
        note = next(r.json() for r in target.received if r.path == "/notify")
        assert note["task_id"] == task_id and note["task_name"] == "breaker" and "3 consecutive" in note["detail"]
        failures = len([r for r in target.received if r.path == "/status/404"])
        await asyncio.sleep(2.5)
        assert len([r for r in target.received if r.path == "/status/404"]) == failures  # no runs while paused
        resumed = await api.post(f"/tasks/{task_id}/resume")
        assert resumed.json()["status"] == "PENDING" and resumed.json()["consecutive_failures"] == 0
        await api.patch("/task/cancel", json={"task_id": task_id})


async def test_drift_is_flagged_counted_and_notified(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "drifty", "schedule_type": "once", "run_at": iso(datetime.now(UTC) - timedelta(seconds=30)),
            "missed_run_policy": "single_catchup",
            "job_details": {"type": "handler", "name": "noop"},
            "drift_threshold_seconds": 5,
            "notify": {"url": target.url("/notify"), "events": ["drift", "completed"]},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        await wait_for_status(api, task_id, {"COMPLETED"})
        run = (await api.get(f"/tasks/{task_id}/executions")).json()["items"][0]
        assert run["drifted"] is True and run["lateness_ms"] >= 29_000
        await _until(lambda: asyncio.sleep(0, sorted(_events(target)) == ["completed", "drift"]))


async def test_jitter_spreads_runs_and_next_run_at_shows_the_planned_instant(stack: Stack) -> None:
    async with stack.client() as api:
        # An hourly minute half an hour away: no fire comes while the test runs.
        now = datetime.now(UTC)
        minute = (now.minute + 30) % 60
        base = now.replace(minute=minute, second=0, microsecond=0)
        base += timedelta(hours=1) if base <= now else timedelta(0)
        task_ids = []
        for n in range(20):
            created = await api.post("/task/recurring", json={
                "task_name": f"herd-{n}", "schedule_type": "cron", "cron": f"{minute} * * * *",
                "job_details": {"type": "handler", "name": "noop"}, "jitter_seconds": 60,
            })
            task_ids.append(created.json()["task_id"])
        planned = []
        for task_id in task_ids:
            async def shown() -> str | None:
                body = (await api.get(f"/tasks/{task_id}")).json()
                return body["next_run_at"] if body.get("updated_at") != body.get("created_at") else None
            planned.append(datetime.fromisoformat(await _until(shown)))
            await api.patch("/task/cancel", json={"task_id": task_id})
    offsets = [(p - base).total_seconds() for p in planned]
    assert all(0 <= o < 60 for o in offsets), offsets
    assert len({round(o) for o in offsets}) >= 10  # spread over the minute, not one instant


async def test_cancel_during_the_lead_withdraws_the_waiting_run(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        # 8 s: inside the 10 s lead (sent at once), and far enough that the cancel comes while
        # the run may still be withdrawn (more than 3 s before its instant).
        run_at = datetime.now(UTC) + timedelta(seconds=8)
        created = await api.post("/task/create", json={
            "task_name": "withdrawn", "schedule_type": "once", "run_at": iso(run_at),
            "job_details": {"type": "http", "url": target.url("/never")},
        })
        task_id = created.json()["task_id"]
        handle = stack.env.client.get_workflow_handle(f"task-{task_id}")

        async def dispatched() -> bool:
            history = await handle.fetch_history()
            return any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events)
        await _until(dispatched, timeout=10)  # the run went out ahead of its instant
        assert (await api.patch("/task/cancel", json={"task_id": task_id})).status_code == 202
        await wait_for_status(api, task_id, {"CANCELLED"})
    await asyncio.sleep(max(0.0, (run_at - datetime.now(UTC)).total_seconds()) + 1.5)
    assert [r for r in target.received if r.path == "/never"] == []  # past the instant: nothing sent
    rows, _ = list_executions(stack.engine, task_id=task_id, limit=5)
    # It never ran: its fire is recorded as skipped because the task was cancelled.
    assert [(r.status, r.reason, r.started_at) for r in rows] == [("SKIPPED", "cancelled", None)]


async def test_pause_during_the_lead_withdraws_and_resume_runs_on_time(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        run_at = datetime.now(UTC) + timedelta(seconds=8)  # as in the cancel test above
        created = await api.post("/task/create", json={
            "task_name": "pause-lead", "schedule_type": "once", "run_at": iso(run_at),
            "job_details": {"type": "http", "url": target.url("/later")},
        })
        task_id = created.json()["task_id"]
        handle = stack.env.client.get_workflow_handle(f"task-{task_id}")

        async def dispatched() -> bool:
            history = await handle.fetch_history()
            return any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events)
        await _until(dispatched, timeout=10)
        assert (await api.post(f"/tasks/{task_id}/pause")).json()["status"] == "PAUSED"
        await asyncio.sleep(max(0.0, (run_at - datetime.now(UTC)).total_seconds()) + 1.5)
        assert [r for r in target.received if r.path == "/later"] == []
        assert (await api.post(f"/tasks/{task_id}/resume")).status_code == 202
        done = await wait_for_status(api, task_id, {"COMPLETED"})
        assert done["run_count"] == 1
    assert len([r for r in target.received if r.path == "/later"]) == 1


async def test_spread_runs_start_on_their_instant(stack: Stack) -> None:
    """With dispatch ahead, runs start within milliseconds of their time (executions table)."""
    async with stack.client() as api:
        start = datetime.now(UTC) + timedelta(seconds=3)
        ids = []
        for n in range(10):
            created = await api.post("/task/create", json={
                "task_name": f"spread-{n}", "schedule_type": "once",
                "run_at": iso(start + timedelta(milliseconds=300 * n)),
                "job_details": {"type": "handler", "name": "noop"},
            })
            ids.append(created.json()["task_id"])
        for task_id in ids:
            await wait_for_status(api, task_id, {"COMPLETED"})
    lateness = []
    for task_id in ids:
        rows, _ = list_executions(stack.engine, task_id=task_id, limit=1)
        lateness.append(rows[0].lateness_ms)
    assert all(value is not None and value >= 0 for value in lateness)
    assert sorted(lateness)[len(lateness) // 2] < 250, lateness  # median well under the engine's ~1 s floor


async def test_a_broken_webhook_never_blocks_or_fails_the_task(stack: Stack, target: TargetServer) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "loud", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "handler", "name": "noop"},
            "notify": {"url": target.url("/status/500"), "events": ["completed"]},
        })
        task_id = created.json()["task_id"]
        # The run and the task's end are recorded while the webhook keeps failing.
        done = await wait_for_status(api, task_id, {"COMPLETED"}, timeout=20)
        assert done["success_count"] == 1
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        assert [r["status"] for r in runs] == ["COMPLETED"]

    async def retried() -> bool:
        return len([r for r in target.received if r.path == "/status/500"]) >= 2
    await _until(retried, timeout=30)  # delivery is retried on its own


@ON_BOTH_DATABASES
async def test_a_replay_whose_api_died_before_temporal_is_sent_by_the_retry(
    stack: Stack, target: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API process dies between marking the dead letter replayed and reaching Temporal
    # (no undo runs). The client's retry, under its key or without one, sends the replay.
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "always-500", "schedule_type": "once", "run_at": iso(datetime.now(UTC)),
            "job_details": {"type": "http", "url": target.url("/status/500")},
            "retry_policy": {"max_attempts": 1}})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        execution_id = (await wait_for_status(api, task_id, {"FAILED"}))["last_run"]["execution_id"]

        async def listed() -> bool:
            return any(d["id"] == execution_id for d in (await api.get("/dead-letters")).json()["items"])
        await _until(listed)

        def calls() -> int:
            return len([r for r in target.received if r.path == "/status/500"])

        async def dies(*args: Any, **kwargs: Any) -> None:
            raise asyncio.CancelledError  # the process is gone: no Temporal call, no undo

        alive = TemporalGateway.replay_ended
        monkeypatch.setattr(TemporalGateway, "replay_ended", dies)
        key = {"Idempotency-Key": "replay-1"}
        try:
            died = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
            assert died.status_code == 500, died.text
        except httpx.HTTPError:
            pass  # or the connection drops
        monkeypatch.setattr(TemporalGateway, "replay_ended", alive)
        row = get_execution(stack.engine, execution_id)
        assert row is not None and (row.status, row.dead_letter) == ("FAILED", "replayed")

        retried = await api.post(f"/dead-letters/{execution_id}/replay", headers=key)
        assert retried.status_code == 202, retried.text
        await _until(lambda: asyncio.sleep(0, calls() == 2))
        await _until(listed)  # the replay failed again: its letter is open again
        assert calls() == 2


async def test_a_replay_of_a_task_that_ran_its_max_runs_keeps_them_counted(
    stack: Stack, target: TargetServer
) -> None:
    # The task ran both runs max_runs allows and ended; the replay of its last run restarts its
    # workflow from the row, and an update meanwhile must not find runs left to plan.
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "two runs", "schedule_type": "interval", "interval_seconds": 1, "max_runs": 2,
            "job_details": {"type": "http", "url": target.url("/slow/5"), "timeout_seconds": 2},
            "retry_policy": {"max_attempts": 1}, "max_consecutive_failures": 5,
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        final = await wait_for_status(api, task_id, {"FAILED", "COMPLETED"}, timeout=60)
        assert final["run_count"] == 2, final
        execution_id = final["last_run"]["execution_id"]
        assert (await api.post(f"/dead-letters/{execution_id}/replay")).status_code == 202
        later = iso(datetime.now(UTC) + timedelta(days=30))
        updated = await api.post("/task/update", json={"task_id": task_id, "end_date": later})
        assert updated.status_code == 202, updated.text
        assert updated.json()["next_run_at"] is None, updated.json()
        done = await wait_for_status(api, task_id, {"FAILED", "COMPLETED"}, timeout=60)
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
    ran = [r for r in runs if r["status"] != "SKIPPED"]  # a 2 s run skips the fire after it
    assert done["next_run_at"] is None and len(ran) == 2, runs
