"""Tasks that fire faster than the dispatch lead: their fires go out together as one series
(one activity for many runs) and keep every guarantee of single runs. Real dev server, worker,
API and HTTP target."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from activities.contracts import RUN_JOB, RUN_SERIES
from store.tasks import list_executions
from tests.api.conftest import Stack
from tests.api.test_e2e import iso, wait_for_status
from tests.target import TargetServer


def _whole_second(after: float) -> datetime:
    moment = datetime.now(UTC) + timedelta(seconds=after)
    return moment.replace(microsecond=0) + timedelta(seconds=1)


async def _rows(stack: Stack, task_id: str) -> list[Any]:
    rows, _ = list_executions(stack.engine, task_id=task_id, limit=200)
    return sorted(rows, key=lambda r: r.scheduled_at)


async def _activities(stack: Stack, task_id: str) -> Counter[str]:
    history = await stack.env.client.get_workflow_handle(f"task-{task_id}").fetch_history()
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    )


async def test_every_fire_of_a_1s_interval_runs_once_from_one_series(
    stack: Stack, target: TargetServer
) -> None:
    start = _whole_second(3)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "every-second", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=7)),
            "job_details": {"type": "http", "url": target.url("/tick")},
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        done = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"}, timeout=40)
    assert done["status"] == "COMPLETED"
    rows = await _rows(stack, task_id)
    expected = [start + timedelta(seconds=n) for n in range(8)]
    assert [r.scheduled_at.replace(tzinfo=UTC) for r in rows] == expected
    assert {r.status for r in rows} == {"COMPLETED"}
    assert all(r.started_at is not None and r.lateness_ms is not None for r in rows)
    assert done["run_count"] == 8 and done["success_count"] == 8
    # One request per run, each with its own key (the execution id).
    keys = Counter(r.key for r in target.received if r.path == "/tick")
    assert sorted(keys) == sorted(r.id for r in rows) and set(keys.values()) == {1}
    # The eight runs went out as one series, not eight activities.
    activities = await _activities(stack, task_id)
    assert activities[RUN_SERIES] == 1 and activities[RUN_JOB] == 0, activities


async def test_a_run_still_going_makes_the_series_skip_the_overlapping_fires(stack: Stack) -> None:
    start = _whole_second(3)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "slow-every-second", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=5)),
            "job_details": {"type": "handler", "name": "sleep", "args": {"seconds": 2.5}},
        })
        task_id = created.json()["task_id"]
        done = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"}, timeout=40)
    rows = await _rows(stack, task_id)
    assert len(rows) == 6  # every fire accounted for
    ran = [r for r in rows if r.status == "COMPLETED"]
    skipped = [r for r in rows if r.status == "SKIPPED"]
    assert [r.reason for r in skipped] == ["overlap"] * len(skipped) and len(skipped) >= 3
    assert len(ran) + len(skipped) == 6
    # Never two runs at once under the skip policy.
    for before, after in zip(ran, ran[1:], strict=False):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at - timedelta(milliseconds=5)
    assert done["success_count"] == len(ran) and done["skipped_count"] == len(skipped)


async def test_pause_withdraws_the_rest_of_a_series_and_resume_goes_on(
    stack: Stack, target: TargetServer
) -> None:
    start = _whole_second(2)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "pause-series", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=16)),
            "job_details": {"type": "http", "url": target.url("/paused-series")},
        })
        task_id = created.json()["task_id"]
        await target.wait_for(3, timeout=20)
        paused = await api.post(f"/tasks/{task_id}/pause")
        assert paused.json()["status"] == "PAUSED"
        paused_at = datetime.now(UTC)
        await asyncio.sleep(5)
        during = [r for r in target.received if r.path == "/paused-series"]
        assert (await api.post(f"/tasks/{task_id}/resume")).status_code == 202
        resumed_at = datetime.now(UTC)
        done = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"}, timeout=40)
    assert done["status"] == "COMPLETED"
    rows = await _rows(stack, task_id)
    assert len(rows) == 17  # every fire from start to end, once
    assert not [r for r in rows if r.status not in ("COMPLETED", "SKIPPED")]
    # The withdrawal reaches the series within its heartbeat (2 s): nothing ran after that
    # until the resume, and the fires inside the pause are recorded as skipped.
    quiet_from = paused_at + timedelta(seconds=3)
    assert not [
        r for r in rows
        if r.status == "COMPLETED"
        and quiet_from <= r.scheduled_at.replace(tzinfo=UTC) < resumed_at - timedelta(seconds=1)
    ]
    assert len([r for r in rows if r.reason == "paused"]) >= 2
    assert len(during) == len([r for r in rows if r.status == "COMPLETED"
                               and r.scheduled_at.replace(tzinfo=UTC) < paused_at + timedelta(seconds=3)])
    keys = Counter(r.key for r in target.received if r.path == "/paused-series")
    assert set(keys.values()) == {1}
    assert len(keys) == done["success_count"]


async def test_cancel_stops_a_series_and_leaves_no_run_unfinished(
    stack: Stack, target: TargetServer
) -> None:
    start = _whole_second(2)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "cancel-series", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=30)),
            "job_details": {"type": "http", "url": target.url("/cancelled-series")},
        })
        task_id = created.json()["task_id"]
        await target.wait_for(2, timeout=20)
        assert (await api.patch("/task/cancel", json={"task_id": task_id})).status_code == 202
        done = await wait_for_status(api, task_id, {"CANCELLED"}, timeout=20)
        sent = len([r for r in target.received if r.path == "/cancelled-series"])
        await asyncio.sleep(3)
    assert len([r for r in target.received if r.path == "/cancelled-series"]) == sent
    rows = await _rows(stack, task_id)
    assert rows and all(r.status in ("COMPLETED", "SKIPPED") for r in rows)
    assert len([r for r in rows if r.status == "COMPLETED"]) == sent == done["success_count"]


async def test_consecutive_failures_stop_the_series_and_pause_the_task(
    stack: Stack, target: TargetServer
) -> None:
    start = _whole_second(2)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "breaker-series", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=20)),
            "max_consecutive_failures": 3,
            "retry_policy": {"max_attempts": 1},
            "job_details": {"type": "http", "url": target.url("/status/500")},
        })
        task_id = created.json()["task_id"]
        paused = await wait_for_status(api, task_id, {"PAUSED"}, timeout=30)
        assert "3 consecutive failed runs" in (paused["status_reason"] or "")
        await asyncio.sleep(3)
        body = (await api.get(f"/tasks/{task_id}")).json()
    rows = await _rows(stack, task_id)
    failed = [r for r in rows if r.status == "FAILED"]
    assert len(failed) == 3 and body["failure_count"] == 3
    assert all(r.dead_letter == "open" and r.attempts == 1 for r in failed)
    assert len([r for r in target.received if r.path == "/status/500"]) == 3


async def test_the_next_series_goes_out_beside_the_running_one_and_respects_its_last_run(
    stack: Stack,
) -> None:
    """35 fires: more than one series. The next is dispatched while the first still runs, and
    a slow run at the boundary still makes the following fire skip (never two at once)."""
    start = _whole_second(2)
    async with stack.client() as api:
        created = await api.post("/task/create", json={
            "task_name": "long-series", "schedule_type": "interval", "interval_seconds": 1,
            "start_date": iso(start), "end_date": iso(start + timedelta(seconds=34)),
            "job_details": {"type": "handler", "name": "sleep", "args": {"seconds": 3.5}},
        })
        task_id = created.json()["task_id"]
        done = await wait_for_status(api, task_id, {"COMPLETED", "FAILED"}, timeout=90)
    rows = await _rows(stack, task_id)
    assert [r.scheduled_at.replace(tzinfo=UTC) for r in rows] == [
        start + timedelta(seconds=n) for n in range(35)
    ]
    ran = [r for r in rows if r.status == "COMPLETED"]
    assert {r.status for r in rows} == {"COMPLETED", "SKIPPED"}
    assert {r.reason for r in rows if r.status == "SKIPPED"} == {"overlap"}
    for before, after in zip(ran, ran[1:], strict=False):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at - timedelta(milliseconds=5), (before.id, after.id)
    assert done["success_count"] == len(ran) and done["run_count"] == 35
    history = await stack.env.client.get_workflow_handle(f"task-{task_id}").fetch_history()
    scheduled, completed = [], []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled.append(event.event_id)
        if event.HasField("activity_task_completed_event_attributes"):
            completed.append(event.event_id)
    assert len(scheduled) >= 2
    assert scheduled[1] < completed[0]  # the second series went out before the first ended
