"""The /ui pages over real HTTP: sign-in, tenant isolation, escaping, the task list and page."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select, update

from store.models import TASK_TABLE
from tests.api.conftest import Stack, serve_api
from tests.ui.tasks import XSS_NAME, create, ran_and_paused, sign_in


@pytest.fixture(scope="module")
async def seeded(stack: Stack) -> AsyncIterator[dict[str, Any]]:
    """t1: a task that ran and is paused, a cron task, one with a hostile name; t2: one task."""
    async with stack.client("t1") as t1, stack.client("t2") as t2:
        yield {
            "ran": await ran_and_paused(t1, "ui-every-second"),
            "cron": await create(t1, "ui-nightly"),
            "xss": await create(t1, XSS_NAME),
            "other": await create(t2, "t2-secret-task"),
        }


async def test_pages_without_a_cookie_redirect_to_login(stack: Stack, seeded: dict[str, Any]) -> None:
    async with stack.client(None) as anonymous:
        for path in ("/ui", f"/ui/tasks/{seeded['cron']['task_id']}"):
            answer = await anonymous.get(path)
            assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
        anonymous.cookies.set("ts_ui_key", "tsk_not-a-key", domain="127.0.0.1", path="/ui")
        assert (await anonymous.get("/ui")).headers["location"] == "/ui/login"
        form = await anonymous.get("/ui/login")
        assert form.status_code == 200 and 'name="key"' in form.text


async def test_login_refuses_an_unknown_key(stack: Stack) -> None:
    async with stack.client(None) as anonymous:
        answer = await anonymous.post("/ui/login", data={"key": "tsk_wrong"})
        assert answer.status_code == 401
        assert "unknown or revoked" in answer.text
        assert "set-cookie" not in answer.headers


async def test_login_sets_an_httponly_strict_cookie_and_logout_clears_it(stack: Stack) -> None:
    async with stack.client(None) as anonymous:
        answer = await anonymous.post("/ui/login", data={"key": stack.keys["t1"]})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        assert (await browser.get("/ui")).status_code == 200
        out = await browser.post("/ui/logout")
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert (await browser.get("/ui")).status_code == 303


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                                     {"Origin": "https://evil.example"}])
async def test_sign_in_and_out_from_another_site_are_refused(stack: Stack, headers: dict[str, str]) -> None:
    # A page elsewhere could sign the visitor in under its own key, or out.
    async with stack.client(None) as anonymous:
        answer = await anonymous.post("/ui/login", data={"key": stack.keys["t1"]}, headers=headers)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers
        out = await anonymous.post("/ui/logout", headers=headers)
        assert out.status_code == 403 and "set-cookie" not in out.headers
        same = await anonymous.post("/ui/login", data={"key": stack.keys["t1"]},
                                    headers={"Sec-Fetch-Site": "same-origin",
                                             "Origin": stack.base_url})
        assert same.status_code == 303, same.text


async def test_the_sign_in_cookie_is_secure_in_production_behind_a_plain_http_hop(stack: Stack) -> None:
    # TLS ends at a proxy: the API sees http, and still marks the cookie Secure.
    production = {"env": "production", "metrics_token": "m" * 32,
                  "signing_key": Fernet.generate_key().decode(), "temporal_task_queue": stack.task_queue}
    async with serve_api(stack.env, stack.engine, **production) as base_url:
        async with httpx.AsyncClient(base_url=base_url) as anonymous:
            answer = await anonymous.post("/ui/login", data={"key": stack.keys["t1"]})
    assert answer.status_code == 303, answer.text
    assert "secure" in answer.headers["set-cookie"].lower()


async def test_task_list_shows_the_tenants_tasks_and_filters_by_status(
    stack: Stack, seeded: dict[str, Any]
) -> None:
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        listing = await browser.get("/ui")
        assert listing.status_code == 200
        assert listing.headers["content-type"].startswith("text/html")
        for name in ("ui-every-second", "ui-nightly"):
            assert name in listing.text
        assert f'/ui/tasks/{seeded["ran"]["task_id"]}' in listing.text
        assert "t2-secret-task" not in listing.text
        assert "cron 0 3 * * * (Europe/Berlin)" in listing.text
        assert "every 1s, fixed_rate" in listing.text

        paused = (await browser.get("/ui", params={"status": "paused"})).text
        assert "ui-every-second" in paused and "ui-nightly" not in paused
        assert 'class="on">Paused<' in paused
        assert "No completed tasks" in (await browser.get("/ui?status=COMPLETED")).text


async def test_task_page_shows_run_history_and_lateness_chart(stack: Stack, seeded: dict[str, Any]) -> None:
    task_id = seeded["ran"]["task_id"]
    async with stack.client("t1") as api:
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
    started = [r for r in runs if r["started_at"]]
    assert len(started) >= 4
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{task_id}")).text
    assert "ui-every-second" in page and "PAUSED" in page and "handler noop" in page
    history = page.split('<table id="runs">', 1)[1].split("</table>", 1)[0]
    assert history.count("<tr>") == len(runs) + 1  # header row + one per execution
    chart = page.split('<svg id="lateness"', 1)[1].split("</svg>", 1)[0]
    assert chart.count("<rect ") == len(started)
    assert re.search(r"\d+ runs · median [\d,.]+ (µs|ms|s) · p95", page)
    assert '<th class="num">Jitter</th><th class="num">Late</th>' in history
    assert "started" in chart and "late (COMPLETED, schedule)" in chart


async def test_other_tenants_task_is_not_found(stack: Stack, seeded: dict[str, Any]) -> None:
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        answer = await browser.get(f"/ui/tasks/{seeded['other']['task_id']}")
        assert answer.status_code == 404
        assert "No such task" in answer.text and "t2-secret-task" not in answer.text
        assert (await browser.get("/ui/tasks/does-not-exist")).status_code == 404
    async with sign_in(stack.base_url, stack.keys["t2"]) as other:
        assert (await other.get(f"/ui/tasks/{seeded['other']['task_id']}")).status_code == 200


async def test_user_data_is_escaped_and_no_script_may_run(stack: Stack, seeded: dict[str, Any]) -> None:
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        for path in ("/ui", f"/ui/tasks/{seeded['xss']['task_id']}"):
            answer = await browser.get(path)
            assert answer.status_code == 200
            assert XSS_NAME not in answer.text and escaped in answer.text
            assert "<script" not in answer.text
            assert "default-src 'none'" in answer.headers["content-security-policy"]
            assert answer.headers["cache-control"] == "no-store"


async def test_task_page_shows_the_schedule_in_words_and_the_upcoming_fires(stack: Stack, seeded: dict[str, Any]) -> None:
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{seeded['cron']['task_id']}")).text
    assert "<dt>In words</dt><dd>At 03:00, every day, in Europe/Berlin</dd>" in page
    upcoming = page.split('<table id="upcoming">', 1)[1].split("</table>", 1)[0]
    assert upcoming.count("T03:00:00+0") == 5  # the next five fires, in Berlin time


async def test_a_task_whose_stored_spec_this_release_refuses_still_has_its_page(stack: Stack) -> None:
    # A spec an older release stored and this one refuses (a job header now reserved): its
    # previews answer 409, and its page shows it without them, never a 500.
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "old spec", "job_details": {"type": "http", "url": "https://example.com/hook"},
            "schedule_type": "interval", "interval_seconds": 3600})
        task_id = created.json()["task_id"]
        with stack.engine.begin() as connection:
            row = connection.execute(select(TASK_TABLE.c.spec).where(TASK_TABLE.c.id == task_id)).one()
            spec = {**row.spec, "job_details": {**row.spec["job_details"], "headers": {"traceparent": "x"}}}
            connection.execute(update(TASK_TABLE).where(TASK_TABLE.c.id == task_id).values(spec=spec))
        upcoming = await api.get(f"/tasks/{task_id}/upcoming")
        assert upcoming.status_code == 409 and "not valid in this release" in upcoming.text, upcoming.text
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = await browser.get(f"/ui/tasks/{task_id}")
    assert page.status_code == 200 and "old spec" in page.text
