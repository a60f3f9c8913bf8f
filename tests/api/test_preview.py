"""Previews through the real API, worker and dev server: a new task, a change and a saved task
show the fires the workflow will run, validated as create and update, and nothing is saved."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from store.quotas import set_quota
from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

NOOP = {"type": "handler", "name": "noop"}


def berlin_0230(**extra: Any) -> dict[str, Any]:
    """A daily 02:30 Berlin task from the Saturday before the 2035 spring change."""
    return {"task_name": "night", "job_details": NOOP, "schedule_type": "cron",
            "cron": "30 2 * * *", "timezone": "Europe/Berlin",
            "start_date": "2035-03-24T00:00:00Z", **extra}


async def count_tasks(stack: Stack, tenant: str) -> int:
    async with stack.client(tenant) as api:
        return len((await api.get("/tasks", params={"limit": 500})).json()["items"])


async def test_a_new_task_previews_its_fires_and_saves_nothing(stack: Stack) -> None:
    before = await count_tasks(stack, "t1")
    async with stack.client() as api:
        answer = await api.post("/task/preview", params={"limit": 3}, json=berlin_0230())
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["description"] == ("At 02:30, every day, in Europe/Berlin, "
                                       "from 2035-03-24T01:00:00+01:00")
        assert [f["local"] for f in body["fires"]] == [
            "2035-03-24T02:30:00+01:00", "2035-03-25T03:00:00+02:00", "2035-03-26T02:30:00+02:00"]
        assert [f["scheduled_at"] for f in body["fires"]] == [f["instant"] for f in body["fires"]]
        assert body["fires"][1]["note"] == (
            "02:30 does not exist on 2035-03-25 in Europe/Berlin: runs at 03:00")
        assert body["fires"][0]["note"] is None and body["fires"][0]["skipped"] is None
        assert any("daylight saving" in w for w in body["warnings"])
        assert len((await api.post("/task/preview", json=berlin_0230())).json()["fires"]) == 10
    assert await count_tasks(stack, "t1") == before

    async with stack.client() as api:
        created = await api.post("/task/create", json=berlin_0230())
        assert created.status_code == 201, created.text
        task = created.json()
        assert task["description"] == body["description"]
        assert (await api.get(f"/tasks/{task['task_id']}")).json()["description"] == body["description"]
        saved = await api.get(f"/tasks/{task['task_id']}/upcoming", params={"limit": 3})
        assert saved.status_code == 200, saved.text
        assert saved.json()["fires"] == body["fires"]
        first = saved.json()["fires"][0]["scheduled_at"]
        assert datetime.fromisoformat(first) == datetime.fromisoformat(task["next_run_at"])


async def test_gap_skip_lists_no_fire_for_a_time_that_does_not_exist(stack: Stack) -> None:
    async with stack.client() as api:
        body = (await api.post("/task/preview", params={"limit": 2}, json=berlin_0230(
            dst_policy={"gap": "skip", "repeated": "first"}))).json()
    assert [f["local"] for f in body["fires"]] == ["2035-03-24T02:30:00+01:00",
                                                   "2035-03-26T02:30:00+02:00"]
    assert "2035-03-25 02:30 do not exist in Europe/Berlin: no run then (dst_policy.gap is skip)" \
        in body["warnings"]


async def test_bad_input_is_refused_as_create_refuses_it(stack: Stack) -> None:
    before = await count_tasks(stack, "t1")
    async with stack.client() as api:
        for body, params in [
            (berlin_0230(dst_policy={"gap": "later"}), {}),
            (berlin_0230(dst_policy={"repeated": "twice"}), {}),
            (berlin_0230(timezone="Mars/Olympus"), {}),
            (berlin_0230(end_date="2020-01-01T00:00:00Z"), {}),
            (berlin_0230(), {"limit": 1001}),
            (berlin_0230(), {"limit": 0}),
        ]:
            previewed = await api.post("/task/preview", params=params, json=body)
            assert previewed.status_code == 422, (body, previewed.text)
            if not params:
                created = await api.post("/task/create", json=body)
                assert created.status_code == 422
                assert created.json()["detail"] == previewed.json()["detail"]
    assert await count_tasks(stack, "t1") == before


async def test_the_quota_refuses_a_preview_as_it_refuses_a_create(stack: Stack) -> None:
    set_quota(stack.engine, "t2", max_active_tasks=0)
    try:
        async with stack.client("t2") as api:
            previewed = await api.post("/task/preview", json=berlin_0230())
            created = await api.post("/task/create", json=berlin_0230())
        assert previewed.status_code == created.status_code == 403
        assert previewed.json()["detail"] == created.json()["detail"]
    finally:
        set_quota(stack.engine, "t2", max_active_tasks=1000)


async def test_a_change_previews_fires_before_and_after_and_changes_nothing(stack: Stack) -> None:
    async with stack.client() as api:
        created = (await api.post("/task/create", json={
            "task_name": "ten", "job_details": NOOP, "schedule_type": "cron", "cron": "0 10 * * *",
            "timezone": "Europe/Berlin"})).json()
        task_id = created["task_id"]
        answer = await api.post("/task/preview", params={"limit": 2},
                                json={"task_id": task_id, "cron": "0 11 * * 1-5"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["description"] == "At 11:00, Monday through Friday, in Europe/Berlin"
        assert body["before"]["description"] == "At 10:00, every day, in Europe/Berlin"
        assert all(f["local"][11:16] == "10:00" for f in body["before"]["fires"])
        assert all(f["local"][11:16] == "11:00" for f in body["fires"])
        assert all(datetime.fromisoformat(f["local"]).weekday() < 5 for f in body["fires"])
        assert (await api.get(f"/tasks/{task_id}")).json()["schedule"]["cron"] == "0 10 * * *"
        refused = await api.post("/task/preview", json={"task_id": task_id, "cron": "61 * * * *"})
        assert refused.status_code == 422
        misfit = await api.post("/task/preview", json={"task_id": task_id, "interval_seconds": 60})
        assert misfit.status_code == 409
    async with stack.client("t2") as other:
        assert (await other.post("/task/preview", json={"task_id": task_id, "cron": "0 9 * * *"})
                ).status_code == 404
        assert (await other.get(f"/tasks/{task_id}/upcoming")).status_code == 404


async def test_jitter_is_known_once_the_task_has_an_id(stack: Stack) -> None:
    body = berlin_0230(jitter_seconds=30, task_name="jittered")
    async with stack.client() as api:
        new = (await api.post("/task/preview", params={"limit": 3}, json=body)).json()
        assert all(f["instant"] is None for f in new["fires"])
        assert any("jitter" in w for w in new["warnings"])
        task_id = (await api.post("/task/create", json=body)).json()["task_id"]
        saved = (await api.get(f"/tasks/{task_id}/upcoming", params={"limit": 3})).json()
    assert [f["scheduled_at"] for f in saved["fires"]] == [f["scheduled_at"] for f in new["fires"]]
    for fire in saved["fires"]:
        offset = datetime.fromisoformat(fire["instant"]) - datetime.fromisoformat(fire["scheduled_at"])
        assert timedelta(0) <= offset < timedelta(seconds=30)
    assert len({f["instant"][17:] for f in saved["fires"]}) > 1  # offsets differ per fire


async def test_other_tasks_at_the_same_instant_are_a_warning(stack: Stack) -> None:
    herd = {"task_name": "herd", "job_details": NOOP, "schedule_type": "cron", "cron": "17 4 * * *"}
    async with stack.client("t2") as api:
        alone = (await api.post("/task/preview", json=herd)).json()
        assert not any("other task" in w for w in alone["warnings"])
        for _ in range(2):
            assert (await api.post("/task/create", json=herd)).status_code == 201
        crowded = (await api.post("/task/preview", json=herd)).json()
        assert "2 other tasks of this tenant run next at one of these instants " \
               "(set jitter_seconds to spread them)" in crowded["warnings"]
    async with stack.client("t1") as api:  # another tenant's tasks are not counted
        assert not any("other task" in w for w in (await api.post("/task/preview", json=herd)).json()["warnings"])


async def test_a_new_schedule_that_never_fires_before_its_end_is_refused_as_create_refuses_it(
    stack: Stack,
) -> None:
    end = "2031-03-21T00:00:00Z"  # three weeks without a 29 February, whenever the test runs
    async with stack.client() as api:
        answer = await api.post("/task/preview", json={
            "task_name": "never", "job_details": NOOP, "schedule_type": "cron", "cron": "0 0 29 2 *",
            "start_date": "2031-03-01T00:00:00Z", "end_date": end})
    assert answer.status_code == 422 and answer.json()["field"] == "end_date", answer.text
    assert answer.json()["detail"] == (f"end_date: the schedule has no fire before end_date "
                                       f"{end.replace('Z', '+00:00')}: the task would have nothing to run")


async def test_the_openapi_document_shows_the_preview_with_examples(stack: Stack) -> None:
    async with stack.client() as api:
        spec = (await api.get("/openapi.json")).json()
    post = spec["paths"]["/task/preview"]["post"]
    assert "change" in post["requestBody"]["content"]["application/json"]["examples"]
    assert post["responses"]["200"]["content"]["application/json"]["example"]["fires"]
    assert "/tasks/{task_id}/upcoming" in spec["paths"]


async def test_dst_policy_is_kept_shown_and_changed_like_any_field(stack: Stack) -> None:
    async with stack.client() as api:
        created = await api.post("/task/create", json=berlin_0230(
            task_name="dst", dst_policy={"gap": "skip", "repeated": "both"}))
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        assert created.json()["schedule"]["dst_policy"] == {"gap": "skip", "repeated": "both"}
        refused = await api.post("/task/update", json={"task_id": task_id, "dst_policy": {"gap": "never"}})
        assert refused.status_code == 422 and "dst_policy.gap" in refused.json()["detail"]
        updated = await api.post("/task/update", json={"task_id": task_id, "dst_policy": {"gap": "shift"}})
        assert updated.status_code == 202, updated.text
        shown = (await api.get(f"/tasks/{task_id}")).json()["schedule"]["dst_policy"]
        assert shown == {"gap": "shift", "repeated": "first"}  # a new policy, whole
        upcoming = (await api.get(f"/tasks/{task_id}/upcoming", params={"limit": 2})).json()
        assert upcoming["fires"][1]["local"] == "2035-03-25T03:00:00+02:00"


async def test_a_run_sent_ahead_of_its_instant_is_still_upcoming(stack: Stack) -> None:
    # With the 10 s lead, the first run of a task due in 10.5 s is sent to its jobs worker at
    # once and waits there: it is still the first upcoming fire.
    start = (datetime.now(UTC) + timedelta(seconds=10.5)).replace(microsecond=0)
    async with stack.client() as api:
        created = await api.post("/task/recurring", json={
            "task_name": "ahead", "job_details": NOOP, "schedule_type": "interval",
            "interval_seconds": 3600, "start_date": start.isoformat()})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        handle = stack.env.client.get_workflow_handle(f"task-{task_id}")
        for _ in range(100):
            history = await handle.fetch_history()
            if any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the run was not sent ahead")
        fires = (await api.get(f"/tasks/{task_id}/upcoming", params={"limit": 2})).json()["fires"]
        assert datetime.now(UTC) < start, "the test ran too slowly"
    assert [datetime.fromisoformat(f["scheduled_at"]) for f in fires] == [start, start + timedelta(hours=1)]
