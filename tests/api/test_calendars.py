"""Calendars over the API, on SQLite and PostgreSQL: create, list, read, replace and delete;
bad input is a 422 that stores nothing; another tenant's calendar is a 404 on every path, and
as a task's reference; a calendar that a task not yet ended excludes is not deleted (409)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

BODY: dict[str, Any] = {"name": "bavaria", "dates": ["2026-12-24", "2026-12-31"],
                        "holidays": {"country": "DE", "subdivision": "BY"}}


def cron_task(**extra: Any) -> dict[str, Any]:
    return {"task_name": "payroll", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "cron", "cron": "0 10 15 * *", "timezone": "Europe/Berlin", **extra}


async def test_crud_and_pages(stack: Stack) -> None:
    async with stack.client("t1") as http:
        made = await http.post("/calendars", json=BODY)
        assert made.status_code == 201, made.text
        calendar = made.json()
        cid = calendar["calendar_id"]
        assert calendar["dates"] == BODY["dates"] and calendar["holidays"] == {"country": "DE", "subdivision": "BY"}
        assert (await http.get(f"/calendars/{cid}")).json() == calendar
        second = (await http.post("/calendars", json={"name": "shutdown", "dates": ["2026-12-28"]})).json()
        page = (await http.get("/calendars", params={"limit": 1})).json()
        assert [c["calendar_id"] for c in page["items"]] == [second["calendar_id"]]
        rest = (await http.get("/calendars", params={"limit": 1, "cursor": page["next_cursor"]})).json()
        assert [c["calendar_id"] for c in rest["items"]] == [cid]
        changed = await http.put(f"/calendars/{cid}", json={"name": "bavaria", "dates": ["2027-01-02"]})
        assert changed.status_code == 200, changed.text
        assert changed.json()["dates"] == ["2027-01-02"] and changed.json()["holidays"] is None
        assert (await http.delete(f"/calendars/{second['calendar_id']}")).status_code == 204
        assert (await http.get(f"/calendars/{second['calendar_id']}")).status_code == 404


async def test_bad_input_is_a_422_and_stores_nothing(stack: Stack) -> None:
    async with stack.client("t1") as http:
        before = (await http.get("/calendars", params={"limit": 500})).json()["items"]
        for bad in ({"name": "x", "dates": ["2026-02-30"]},
                    {"name": "x", "dates": [20261224]},
                    {"name": "x", "dates": ["2026-12-24T00:00:00Z"]},
                    {"name": "x", "holidays": {"country": "XX"}},
                    {"name": "x", "holidays": {"country": "DE", "subdivision": "ZZ"}},
                    {"name": "", "dates": []},
                    {"name": "x", "colour": "red"}):
            answer = await http.post("/calendars", json=bad)
            assert answer.status_code == 422, (bad, answer.text)
        assert (await http.get("/calendars", params={"limit": 500})).json()["items"] == before
        assert (await http.get("/calendars", params={"cursor": "nope"})).status_code == 422


async def test_another_tenants_calendar_is_a_404_on_every_path(stack: Stack) -> None:
    async with stack.client("t1") as mine, stack.client("t2") as theirs:
        cid = (await mine.post("/calendars", json=BODY)).json()["calendar_id"]
        assert (await theirs.get(f"/calendars/{cid}")).status_code == 404
        assert (await theirs.put(f"/calendars/{cid}", json=BODY)).status_code == 404
        assert (await theirs.delete(f"/calendars/{cid}")).status_code == 404
        assert cid not in [c["calendar_id"] for c in (await theirs.get("/calendars")).json()["items"]]
        answer = await theirs.post("/task/create", json=cron_task(exclude_calendars=[{"calendar_id": cid}]))
        assert answer.status_code == 404 and "exclude_calendars[0]" in answer.json()["detail"]
        assert (await mine.get(f"/calendars/{cid}")).json()["name"] == "bavaria"


async def test_a_calendar_in_use_is_not_deleted_until_its_tasks_end(stack: Stack) -> None:
    async with stack.client("t1") as http:
        cid = (await http.post("/calendars", json=BODY)).json()["calendar_id"]
        made = await http.post("/task/create", json=cron_task(
            exclude_calendars=[{"calendar_id": cid, "shift": True}]))
        assert made.status_code == 201, made.text
        task = made.json()
        assert task["schedule"]["exclude_calendars"] == [{"calendar_id": cid, "shift": True}]
        refused = await http.delete(f"/calendars/{cid}")
        assert refused.status_code == 409 and task["task_id"] in refused.json()["detail"]
        # An update may not name a calendar the tenant lacks either.
        wrong = await http.post("/task/update", json={
            "task_id": task["task_id"], "exclude_calendars": [{"calendar_id": "missing"}]})
        assert wrong.status_code == 404, wrong.text
        cancelled = await http.patch("/task/cancel", json={"task_id": task["task_id"]})
        assert cancelled.status_code in (200, 202), cancelled.text
        for _ in range(100):  # the row shows the end once the workflow has written it
            if (await http.get(f"/tasks/{task['task_id']}")).json()["status"] == "CANCELLED":
                break
            await asyncio.sleep(0.1)
        assert (await http.delete(f"/calendars/{cid}")).status_code == 204


def dates_task(dates: list[str], **extra: Any) -> dict[str, Any]:
    return {"task_name": "reminders", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "dates", "dates": dates, **extra}


async def test_a_dates_task_is_created_and_bad_dates_are_a_422(stack: Stack) -> None:
    async with stack.client("t1") as http:
        made = await http.post("/task/create", json=dates_task(
            ["2030-01-02T09:00:00+01:00", "2030-01-01T09:00:00Z"]))
        assert made.status_code == 201, made.text
        task = made.json()
        shown = [datetime.fromisoformat(d) for d in task["schedule"]["dates"]]
        assert shown == [datetime(2030, 1, 1, 9, tzinfo=UTC), datetime(2030, 1, 2, 8, tzinfo=UTC)]
        assert datetime.fromisoformat(task["next_run_at"]) == shown[0]
        many = [f"2030-01-01T00:{m // 60:02d}:{m % 60:02d}Z" for m in range(1001)]
        for bad, field in ((dates_task(["2020-01-01T09:00:00Z"]), "dates[0]"),
                           (dates_task([]), "dates"),
                           (dates_task(many), "dates"),
                           (dates_task(["2030-01-01T09:00:00"]), "dates"),
                           (dates_task(["2030-01-01T09:00:00Z"], cron="0 * * * *"), "cron"),
                           ({**cron_task(), "dates": ["2030-01-01T09:00:00Z"]}, "dates")):
            answer = await http.post("/task/create", json=bad)
            assert answer.status_code == 422, (field, answer.text)
            assert field in answer.json()["detail"], answer.text
        await http.patch("/task/cancel", json={"task_id": task["task_id"]})


async def test_the_calendar_endpoints_are_documented_with_examples(stack: Stack) -> None:
    async with stack.client("t1") as http:
        document = (await http.get("/openapi.json")).json()
    paths = document["paths"]
    assert set(paths["/calendars"]) == {"get", "post"}
    assert set(paths["/calendars/{calendar_id}"]) == {"get", "put", "delete"}
    created = paths["/calendars"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert created["holidays and dates"]["value"]["holidays"] == {"country": "DE", "subdivision": "BY"}
    assert "409" in paths["/calendars/{calendar_id}"]["delete"]["responses"]
    schemas = document["components"]["schemas"]
    assert schemas["CalendarOut"]["examples"] and schemas["CalendarPage"]["examples"]
    assert "exclude_calendars" in schemas["CronTask"]["properties"]
    assert "dates" in schemas["DatesTask"]["required"]


async def test_a_method_a_path_does_not_serve_names_all_it_does(stack: Stack) -> None:
    async with stack.client("t1") as http:
        answer = await http.patch("/calendars")
        one = await http.options("/calendars/some-id")
    assert answer.status_code == 405 and answer.headers["Allow"] == "GET, POST"
    assert one.status_code == 405 and one.headers["Allow"] == "DELETE, GET, PUT"


async def test_preview_and_upcoming_show_what_the_calendars_make_of_each_fire(stack: Stack) -> None:
    async with stack.client("t1") as http:
        cid = (await http.post("/calendars", json={"name": "closed", "dates": ["2031-02-15", "2031-03-15"]})
               ).json()["calendar_id"]
        # From a fixed start: the fires stay the same whatever day the test runs.
        start = {"start_date": "2031-01-01T00:00:00Z"}
        skipping = await http.post("/task/preview", json=cron_task(exclude_calendars=[{"calendar_id": cid}], **start),
                                   params={"limit": 4})
        assert skipping.status_code == 200, skipping.text
        by_day = {f["scheduled_at"][:10]: f for f in skipping.json()["fires"]}
        assert by_day["2031-02-15"]["skipped"] == by_day["2031-03-15"]["skipped"] == "calendar"
        assert by_day["2031-01-15"]["skipped"] is None and by_day["2031-04-15"]["skipped"] is None

        shifting = cron_task(exclude_calendars=[{"calendar_id": cid, "shift": True}], **start)
        shown = (await http.post("/task/preview", json=shifting, params={"limit": 4})).json()
        previewed = shown["fires"]
        # A fire the calendar moves is no daylight saving change (no change falls in these days).
        assert not any("daylight saving" in warning for warning in shown["warnings"]), shown
        moved = {f["scheduled_at"][:10]: f for f in previewed}["2031-02-15"]
        assert moved["skipped"] is None and moved["instant"].startswith("2031-02-16T09:00:00")
        assert cid in moved["note"] and "2031-02-16T10:00:00+01:00" in moved["note"]

        made = (await http.post("/task/create", json=shifting)).json()
        upcoming = (await http.get(f"/tasks/{made['task_id']}/upcoming", params={"limit": 4})).json()
        assert [(f["scheduled_at"], f["instant"], f["skipped"]) for f in upcoming["fires"]] == [
            (f["scheduled_at"], f["instant"], f["skipped"]) for f in previewed]
        await http.patch("/task/cancel", json={"task_id": made["task_id"]})


async def test_a_task_whose_calendars_exclude_every_fire_is_a_422_and_stores_nothing(stack: Stack) -> None:
    async with stack.client("t1") as http:
        cid = (await http.post("/calendars", json={
            "name": "closed", "dates": ["2030-01-01", "2030-01-02", "2033-03-01"]})).json()["calendar_id"]
        skip = [{"calendar_id": cid}]
        async def ids() -> set[str]:  # the newest first: a task made here would be among them
            return {t["task_id"] for t in (await http.get("/tasks", params={"limit": 100})).json()["items"]}
        before = await ids()
        never = (
            dates_task(["2030-01-01T09:00:00Z", "2030-01-02T09:00:00Z"], exclude_calendars=skip),
            {"task_name": "once", "job_details": {"type": "handler", "name": "noop"},
             "schedule_type": "once", "run_at": "2030-01-01T09:00:00Z", "exclude_calendars": skip},
            cron_task(cron="0 10 * * *", start_date="2030-01-01T00:00:00Z",
                      end_date="2030-01-02T23:00:00Z", exclude_calendars=skip),
            # One run, the calendars skipping fires years apart: the check reads every year.
            dates_task(["2030-01-01T09:00:00Z", "2033-03-01T09:00:00Z"], exclude_calendars=skip,
                       max_runs=1),
        )
        for body in never:
            for path in ("/task/create", "/task/preview"):
                answer = await http.post(path, json=body)
                assert answer.status_code == 422, (path, answer.text)
                detail = answer.json()["detail"]
                assert detail.startswith("exclude_calendars:") and "2030-01-01" in detail, detail
                assert "nothing to run" in detail and cid in detail, detail
        assert await ids() == before
        # A fire the calendar moves, or one it leaves, runs: those are created.
        runs = (
            {**never[1], "exclude_calendars": [{"calendar_id": cid, "shift": True}]},
            dates_task(["2030-01-01T09:00:00Z", "2030-01-03T09:00:00Z"], exclude_calendars=skip),
            cron_task(cron="0 10 * * *", exclude_calendars=skip),
        )
        for body in runs:
            made = await http.post("/task/create", json=body)
            assert made.status_code == 201, made.text
            await http.patch("/task/cancel", json={"task_id": made.json()["task_id"]})


async def test_a_change_that_leaves_only_excluded_fires_is_a_422_and_changes_nothing(stack: Stack) -> None:
    async with stack.client("t1") as http:
        cid = (await http.post("/calendars", json={"name": "closed", "dates": ["2030-01-01", "2030-01-02"]})
               ).json()["calendar_id"]
        made = await http.post("/task/create", json=dates_task(["2030-01-01T09:00:00Z", "2030-01-03T09:00:00Z"]))
        assert made.status_code == 201, made.text
        task_id = made.json()["task_id"]
        # The calendar leaves it 2030-01-03: accepted.
        calendars = {"task_id": task_id, "exclude_calendars": [{"calendar_id": cid}]}
        changed = await http.post("/task/update", json=calendars)
        assert changed.status_code in (200, 202), changed.text
        # Then dates that the calendar excludes both of: refused, on update and on its preview.
        closed = {"task_id": task_id, "dates": ["2030-01-01T09:00:00Z", "2030-01-02T09:00:00Z"]}
        for path in ("/task/preview", "/task/update"):
            answer = await http.post(path, json=closed)
            assert answer.status_code == 422, (path, answer.text)
            detail = answer.json()["detail"]
            assert detail.startswith("exclude_calendars:") and "nothing to run" in detail, detail
        task = (await http.get(f"/tasks/{task_id}")).json()
        assert [d[:10] for d in task["schedule"]["dates"]] == ["2030-01-01", "2030-01-03"], task
        # A shift calendar moves them instead: accepted.
        moved = await http.post("/task/update", json={
            **closed, "exclude_calendars": [{"calendar_id": cid, "shift": True}]})
        assert moved.status_code in (200, 202), moved.text
        await http.patch("/task/cancel", json={"task_id": task_id})
