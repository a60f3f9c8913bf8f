"""Bad input gets a 4xx naming the field, and changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import ON_BOTH_DATABASES, Stack

pytestmark = ON_BOTH_DATABASES

FUTURE = (datetime.now(UTC) + timedelta(days=1)).isoformat()
AGO = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
SOON = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
LATER = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
LATEST = (datetime.now(UTC) + timedelta(hours=3)).isoformat()
GOOD: dict[str, Any] = {
    "task_name": "valid",
    "job_details": {"type": "http", "url": "https://example.com/hook"},
    "schedule_type": "cron",
    "cron": "0 10 * * *",
    "timezone": "Europe/Berlin",
}


def with_(**changes: Any) -> dict[str, Any]:
    body = {**GOOD, **changes}
    return {k: v for k, v in body.items() if v is not ...}


BAD_BODIES = [
    ("bad cron", with_(cron="61 25 * * *"), "cron"),
    ("cron with 4 fields", with_(cron="* * * *"), "cron"),
    ("cron on 30 February", with_(cron="0 0 30 2 *"), "cron"),
    ("unknown time zone", with_(timezone="Mars/Olympus_Mons"), "timezone"),
    ("end before start", with_(start_date="2030-01-02T00:00:00Z", end_date="2030-01-01T00:00:00Z"), "end_date"),
    ("run_at in the past", {**with_(cron=...), "schedule_type": "once",
                            "run_at": (datetime.now(UTC) - timedelta(minutes=5)).isoformat()}, "run_at"),
    ("run_at past its catch-up window", {**with_(cron=...), "schedule_type": "once",
                                         "run_at": (datetime.now(UTC) - timedelta(minutes=5)).isoformat(),
                                         "missed_run_policy": "catchup", "catchup_window_seconds": 60},
     "run_at"),
    ("run_at without offset", {**with_(cron=...), "schedule_type": "once", "run_at": "2030-01-01T10:00:00"}, "run_at"),
    ("unknown field", with_(colour="blue"), "colour"),
    ("negative jitter", with_(jitter_seconds=-1), "jitter_seconds"),
    ("notify to a file url", with_(notify={"url": "file:///tmp/x"}), "notify.url"),
    ("unknown notify event", with_(notify={"url": "https://e.com/h", "events": ["exploded"]}), "notify.events"),
    ("missing task_name", with_(task_name=...), "task_name"),
    ("missing job_details", with_(job_details=...), "job_details"),
    ("missing cron", with_(cron=...), "cron"),
    ("wrong type", with_(task_name=["a"]), "task_name"),
    ("wrong schedule_type", with_(schedule_type="weekly"), "schedule_type"),
    ("unknown handler", with_(job_details={"type": "handler", "name": "no-such-handler"}), "job_details.name"),
    ("non-http url", with_(job_details={"type": "http", "url": "ftp://example.com/x"}), "url"),
    ("file url", with_(job_details={"type": "http", "url": "file:///etc/passwd"}), "url"),
    ("unknown job type", with_(job_details={"type": "shell", "command": "rm -rf /"}), "job_details"),
    ("cloud metadata target", with_(job_details={"type": "http", "url": "http://169.254.169.254/latest/meta-data"}), "job_details.url"),
    ("private network target", with_(job_details={"type": "http", "url": "http://10.0.0.1:8080/admin"}), "job_details.url"),
    ("loopback not allowlisted", with_(job_details={"type": "http", "url": "http://127.0.0.2/"}), "job_details.url"),
    ("name over 200", with_(task_name="x" * 201), "task_name"),
    ("negative interval", {**with_(cron=...), "schedule_type": "interval", "interval_seconds": -5}, "interval_seconds"),
    ("zero interval", {**with_(cron=...), "schedule_type": "interval", "interval_seconds": 0}, "interval_seconds"),
    ("reserved header", with_(job_details={"type": "http", "url": "https://e.com", "headers": {"Idempotency-Key": "x"}}), "headers"),
    ("cron fields on once", {**GOOD, "schedule_type": "once", "run_at": FUTURE}, "cron: does not apply"),
    ("run_at as a number", {**with_(cron=...), "schedule_type": "once", "run_at": 1893456000}, "run_at"),
    ("jitter as a string", with_(jitter_seconds="5"), "jitter_seconds"),
    ("retry maximum below initial", with_(retry_policy={"initial_interval_seconds": 600}), "maximum_interval_seconds"),
    ("interval below a microsecond", {**with_(cron=...), "schedule_type": "interval", "interval_seconds": 1e-9}, "interval_seconds"),
    ("retry attempts zero", with_(retry_policy={"max_attempts": 0}), "max_attempts"),
    ("a directory for a time zone", with_(timezone="America"), "timezone"),
    ("no fire before end_date", with_(cron="0 0 29 2 *", end_date=SOON), "end_date"),
    ("run_at after end_date", {**with_(cron=...), "schedule_type": "once", "run_at": LATER,
                               "end_date": SOON}, "end_date"),
    ("an interval's first fire after end_date", {**with_(cron=...), "schedule_type": "interval",
                                                 "interval_seconds": 86400, "start_date": AGO,
                                                 "end_date": SOON}, "end_date"),
    ("dates all after end_date", {**with_(cron=...), "schedule_type": "dates", "dates": [LATER],
                                  "end_date": SOON}, "end_date"),
    ("run_at before start_date", {**with_(cron=...), "schedule_type": "once", "run_at": LATER,
                                  "start_date": LATEST}, "run_at"),
    ("a date before start_date", {**with_(cron=...), "schedule_type": "dates",
                                  "dates": [LATEST, LATER], "start_date": LATEST}, "dates"),
    ("a cron whose only time in its window is a skipped daylight saving gap",
     with_(cron="30 2 * * *", dst_policy={"gap": "skip"}, start_date="2031-03-30T00:00:00Z",
           end_date="2031-03-30T01:45:00Z"), "end_date"),
    ("a cron whose every time falls in a skipped daylight saving gap",
     with_(cron="30 2 * 3 0#2", timezone="America/New_York", dst_policy={"gap": "skip"}), "dst_policy.gap"),
    ("every second of a skipped daylight saving gap",
     with_(cron="* * 2 * 3 0#2", timezone="America/New_York", dst_policy={"gap": "skip"}), "dst_policy.gap"),
    ("a random cron time", with_(cron="R R * * *"), "cron"),
    ("the host's own time zone", with_(timezone="localtime"), "timezone"),
    ("a zone file that is no IANA zone", with_(timezone="Factory"), "timezone"),
    ("a zone with leap seconds", with_(timezone="right/UTC"), "timezone"),
    ("retry intervals Temporal reads as 0",
     with_(retry_policy={"initial_interval_seconds": 4e-7, "maximum_interval_seconds": 1e-6}), "initial_interval_seconds"),
    ("a cool-down Temporal reads as 0", with_(auto_resume_after_seconds=1e-300), "auto_resume_after_seconds"),
    ("a workflow job timeout Temporal reads as none",
     with_(job_details={"type": "workflow", "workflow_type": "W", "execution_timeout_seconds": 1e-7}),
     "execution_timeout_seconds"),
    ("a hashed cron time", with_(cron="H 9 * * *"), "cron"),
    # A handler's own check of its arguments (the built-in sleep's), run at create.
    ("sleep for a word", with_(job_details={"type": "handler", "name": "sleep", "args": {"seconds": "soon"}}),
     "job_details.args"),
    ("sleep past a day", with_(job_details={"type": "handler", "name": "sleep", "args": {"seconds": 100000}}),
     "job_details.args"),
    ("sleep backwards", with_(job_details={"type": "handler", "name": "sleep", "args": {"seconds": -5}}),
     "job_details.args"),
]


async def _tenant_state(stack: Stack) -> tuple[int, int]:
    async with stack.client("t2") as api:
        rows = len((await api.get("/tasks", params={"limit": 500})).json()["items"])
    workflows = await stack.env.client.count_workflows("TenantId = 't2'")
    return rows, workflows.count


@pytest.mark.parametrize(("case", "body", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
async def test_bad_create_body_is_a_4xx_naming_the_field(stack: Stack, case: str, body: dict[str, Any], field: str) -> None:
    before = await _tenant_state(stack)
    async with stack.client("t2") as api:
        response = await api.post("/task/create", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in problem["detail"], problem
    assert "Traceback" not in response.text
    assert await _tenant_state(stack) == before


async def test_malformed_json_and_wrong_content(stack: Stack) -> None:
    before = await _tenant_state(stack)
    async with stack.client("t2") as api:
        broken = await api.post("/task/create", content=b'{"task_name": "x",', headers={"Content-Type": "application/json"})
        assert broken.status_code == 422 and "JSON" in broken.json()["detail"]
        assert broken.json()["field"] == "body"
        not_object = await api.post("/task/create", json=["a", "b"])
        assert 400 <= not_object.status_code < 500
        empty = await api.post("/task/create")
        assert 400 <= empty.status_code < 500
    assert await _tenant_state(stack) == before


async def test_recurring_endpoint_refuses_once(stack: Stack) -> None:
    async with stack.client("t2") as api:
        response = await api.post("/task/recurring", json={**with_(cron=...), "schedule_type": "once", "run_at": FUTURE})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "schedule_type"
    assert response.json()["detail"] == "schedule_type: 'once' is not one of 'cron', 'interval'"


async def test_body_that_is_not_utf8_is_a_422_like_any_bad_body(stack: Stack) -> None:
    async with stack.client("t2") as api:
        for method, path in (("PATCH", "/task/cancel"), ("POST", "/task/update"), ("POST", "/task/create")):
            response = await api.request(method, path, content=b"\xff\xfe{",
                                         headers={"Content-Type": "application/json"})
            assert response.status_code == 422, (path, response.text)
            assert response.json()["field"] == "body" and "JSON" in response.json()["detail"]


async def test_bad_update_changes_nothing(stack: Stack) -> None:
    async with stack.client("t1") as api:
        task = (await api.post("/task/recurring", json=GOOD)).json()
        for change, field in (({"timezone": "Nowhere/Land"}, "timezone"), ({"cron": "x"}, "cron"), ({"cron": "0 0 31 4 *"}, "cron"),
                              ({"end_date": "2001-01-01T00:00:00Z"}, "end_date"), ({"bogus": 1}, "bogus"),
                              ({"priority": None}, "priority"), ({"max_catchup_runs": "3"}, "max_catchup_runs"),
                              ({"job_details": {"type": "handler", "name": "sleep", "args": {"seconds": True}}},
                               "job_details.args")):
            response = await api.post("/task/update", json={"task_id": task["task_id"], **change})
            assert response.status_code == 422, response.text
            assert field in response.json()["detail"]
        # A valid change that does not fit this task (a cron task has no interval) is a conflict.
        misfit = await api.post("/task/update", json={"task_id": task["task_id"], "interval_seconds": 5})
        assert misfit.status_code == 409, misfit.text
        assert "interval_seconds does not apply to schedule_type 'cron'" in misfit.json()["detail"]
        after = (await api.get(f"/tasks/{task['task_id']}")).json()
        assert after["schedule"] == task["schedule"] and after["next_run_at"] == task["next_run_at"]
        missing = await api.post("/task/update", json={"task_id": "does-not-exist", "cron": "* * * * *"})
        assert missing.status_code == 404
        wrong_name = await api.patch("/task/cancel", json={"task_id": task["task_id"], "task_name": "other"})
        assert wrong_name.status_code == 409 and "task_name" in wrong_name.json()["detail"]
        assert (await api.get(f"/tasks/{task['task_id']}")).json()["status"] == "PENDING"


async def test_a_bad_field_is_named_where_its_name_is_also_a_schedule_type_or_a_union(
    stack: Stack
) -> None:
    # An update's cron and dates were taken for the tags of the create body's schedule types,
    # and a plain union's member type was left in the path.
    async with stack.client("t1") as api:
        task = (await api.post("/task/recurring", json=GOOD)).json()
        for change, field in (({"cron": 123}, "cron"), ({"dates": ["x"]}, "dates.0"),
                              ({"interval": 5}, "interval"), ({"once": {}}, "once")):
            for path in ("/task/update", "/task/preview"):
                response = await api.post(path, json={"task_id": task["task_id"], **change})
                assert response.status_code == 422, response.text
                assert response.json()["field"] == field, (path, response.json())
                assert response.json()["detail"].startswith(f"{field}: "), response.json()
        calendar = await api.post("/calendars", json={"name": "c", "dates": ["2031-02-30"]})
        assert calendar.status_code == 422 and calendar.json()["field"] == "dates.0", calendar.text
        listing = await api.get("/tasks", params={"status": "paused"})
        assert listing.status_code == 422 and listing.json()["field"] == "status", listing.text
        assert "[" not in listing.json()["detail"].split(":")[0], listing.json()
        # Inside a create body the tags still go: job_details.url, not job_details.http.url.
        bad_url = await api.post("/task/create", json={
            **GOOD, "job_details": {"type": "http", "url": "not a url"}})
        assert bad_url.status_code == 422 and bad_url.json()["field"] == "job_details.url", bad_url.text


async def test_an_update_that_would_leave_the_task_no_run_is_refused_and_changes_nothing(
    stack: Stack,
) -> None:
    # Daily at an hour 5-6 h from now, so that half an hour before its next fire is never past
    # (a fixed midnight failed from 23:30 UTC on).
    hour = (datetime.now(UTC) + timedelta(hours=6)).hour
    async with stack.client("t2") as api:
        created = await api.post("/task/create", json=with_(cron=f"0 {hour} * * *", timezone="UTC"))
        assert created.status_code == 201, created.text
        task_id, next_run = created.json()["task_id"], created.json()["next_run_at"]
        next_fire = datetime.fromisoformat(next_run)
        try:
            ends_first = (next_fire - timedelta(minutes=30)).isoformat()
            previewed = await api.post("/task/preview", json={"task_id": task_id, "end_date": ends_first})
            assert previewed.status_code == 422 and previewed.json()["field"] == "end_date", previewed.text
            refused = await api.post("/task/update", json={"task_id": task_id, "end_date": ends_first})
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == "end_date"
            assert "nothing to run" in refused.json()["detail"]
            kept = (await api.get(f"/tasks/{task_id}")).json()
            assert (kept["next_run_at"], kept["schedule"]["end_date"]) == (next_run, None)
            # An end after its next fire leaves it that run: accepted.
            ends_after = (next_fire + timedelta(minutes=30)).isoformat()
            taken = await api.post("/task/update", json={"task_id": task_id, "end_date": ends_after})
            assert taken.status_code == 202, taken.text
            assert taken.json()["next_run_at"] == next_run
        finally:
            await api.patch("/task/cancel", json={"task_id": task_id})


async def test_an_update_to_skip_the_only_times_a_cron_names_is_refused(stack: Stack) -> None:
    # 02:30 on the second Sunday of March never exists in New York: under gap "shift" it runs
    # at 03:00; "skip" would leave it no run ever.
    gap_only = with_(cron="30 2 * 3 0#2", timezone="America/New_York")
    async with stack.client("t2") as api:
        created = await api.post("/task/create", json=gap_only)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        try:
            change = {"task_id": task_id, "dst_policy": {"gap": "skip"}}
            previewed = await api.post("/task/preview", json=change)
            assert previewed.status_code == 422 and previewed.json()["field"] == "dst_policy.gap", previewed.text
            refused = await api.post("/task/update", json=change)
            assert refused.status_code == 422 and refused.json()["field"] == "dst_policy.gap", refused.text
            assert "never run" in refused.json()["detail"]
            kept = (await api.get(f"/tasks/{task_id}")).json()
            assert kept["schedule"]["dst_policy"]["gap"] == "shift"
            assert kept["next_run_at"] == created.json()["next_run_at"]
        finally:
            await api.patch("/task/cancel", json={"task_id": task_id})


async def test_a_number_that_is_not_finite_is_refused_as_such(stack: Stack) -> None:
    before = await _tenant_state(stack)
    async with stack.client("t2") as api:
        for number in (b"NaN", b"Infinity"):
            body = (b'{"task_name": "n", "job_details": {"type": "handler", "name": "noop"}, '
                    b'"schedule_type": "interval", "interval_seconds": ' + number + b"}")
            response = await api.post("/task/create", content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 422, response.text
            assert "interval_seconds" in response.json()["detail"]
            assert "finite" in response.json()["detail"], response.text
    assert await _tenant_state(stack) == before
