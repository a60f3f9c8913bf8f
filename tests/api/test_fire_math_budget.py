"""Listing fires costs the API CPU, a sparse cron's most: a tenant that keeps asking for them,
well inside its read limit, is refused once it has used its share (429 with Retry-After), and
another tenant's previews and every plain read go on."""

from __future__ import annotations

import uuid

import httpx

from store.keys import create_key
from tests.api.conftest import Stack
from tests.ui.tasks import sign_in

SPARSE = {"task_name": "leap Mondays", "job_details": {"type": "handler", "name": "noop"},
          "schedule_type": "cron", "cron": "0 0 29 2 1#5", "timezone": "UTC"}


def _client(stack: Stack, *, admin: bool = False) -> httpx.AsyncClient:
    """A client of a tenant of its own (with an admin key: one that may act on any tenant's
    tasks): the budget it spends is no other test's."""
    _, key = create_key(stack.engine, f"fm-{uuid.uuid4().hex[:8]}", admin=admin)
    return httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"},
                             timeout=60)


async def _spend(heavy: httpx.AsyncClient, task_id: str) -> list[httpx.Response]:
    """Ask for the task's 1,000 next fires until refused; every answer."""
    answers = []
    for _ in range(60):  # refused long before the 60th
        answer = await heavy.get(f"/tasks/{task_id}/upcoming", params={"limit": 1000})
        answers.append(answer)
        if answer.status_code != 200:
            break
    return answers


async def test_a_tenant_listing_fires_past_its_cpu_share_is_refused_and_others_go_on(
    stack: Stack
) -> None:
    async with _client(stack) as heavy, _client(stack) as other:
        created = await heavy.post("/task/recurring", json=SPARSE)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        theirs = await other.post("/task/recurring", json=SPARSE)
        assert theirs.status_code == 201, theirs.text

        answers = await _spend(heavy, task_id)
        refused = answers[-1]
        # A new task's preview draws on the same budget (a moment's refill may let one of them
        # in, the first or, on a loaded machine, the second).
        previews = [await heavy.post("/task/preview", params={"limit": 1000}, json=SPARSE)
                    for _ in range(2)]
        assert 429 in [p.status_code for p in previews], [p.status_code for p in previews]
        assert refused.status_code == 429, [a.status_code for a in answers]
        assert len(answers) > 1  # the first ones were answered
        assert int(refused.headers["Retry-After"]) >= 1
        assert "listing fires" in refused.json()["detail"]
        # Another tenant's preview, and the heavy tenant's plain reads, are not refused.
        assert (await other.get(f"/tasks/{theirs.json()['task_id']}/upcoming",
                                params={"limit": 1000})).status_code == 200
        assert (await heavy.get(f"/tasks/{task_id}")).status_code == 200


async def test_the_task_page_says_so_when_the_budget_holds_its_fires_back(stack: Stack) -> None:
    async with _client(stack) as heavy:
        created = await heavy.post("/task/recurring", json=SPARSE)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        key = heavy.headers["Authorization"].removeprefix("Bearer ")
        spent = "used its share of this API process&#39;s CPU for listing fires"
        async with sign_in(stack.base_url, key) as browser:
            # The budget refills as time passes (by a refused request just under zero, within
            # a fraction of a second): spent again before each page.
            pages = []
            for _ in range(4):
                assert (await _spend(heavy, task_id))[-1].status_code == 429
                pages.append(await browser.get(f"/ui/tasks/{task_id}"))
                if spent in pages[-1].text:
                    break
    assert all(page.status_code == 200 for page in pages), pages[-1].text
    assert spent in pages[-1].text, [page.status_code for page in pages]
    assert '<table id="upcoming">' not in pages[-1].text
    assert not any("cannot be asked" in page.text for page in pages)


async def test_a_create_whose_calendar_check_lists_fires_draws_on_the_budget(stack: Stack) -> None:
    # Checking that calendars leave a run lists up to 366 fires: a sparse cron's, refused 422
    # each time, took 2 s of the API's CPU a create and no budget counted it.
    body = {**SPARSE, "max_runs": 300}
    async with _client(stack) as heavy, _client(stack) as other:
        fires = await heavy.post("/task/preview", params={"limit": 300}, json=body)
        assert fires.status_code == 200, fires.text
        dates = sorted({fire["scheduled_at"][:10] for fire in fires.json()["fires"]})
        calendar = await heavy.post("/calendars", json={"name": "every one", "dates": dates})
        assert calendar.status_code == 201, calendar.text
        excluded = {**body, "exclude_calendars": [{"calendar_id": calendar.json()["calendar_id"]}]}
        answers = []
        for _ in range(60):  # refused long before the 60th
            answers.append(await heavy.post("/task/create", json=excluded))
            if answers[-1].status_code != 422:
                break
        assert answers[0].status_code == 422, answers[0].text
        assert "exclude_calendars" in answers[0].json()["detail"]
        assert answers[-1].status_code == 429, [a.status_code for a in answers]
        assert "listing fires" in answers[-1].json()["detail"]
        # Another tenant's same create is still judged on its calendars, not refused.
        theirs = await other.post("/calendars", json={"name": "every one", "dates": dates})
        assert theirs.status_code == 201, theirs.text
        answer = await other.post("/task/create", json={
            **body, "exclude_calendars": [{"calendar_id": theirs.json()["calendar_id"]}]})
        assert answer.status_code == 422, answer.text


async def test_an_admin_keys_look_at_another_tenants_task_spends_its_own_budget(
    stack: Stack
) -> None:
    # The task's tenant paid: an operator's polling left the tenant's own previews refused.
    async with _client(stack) as owner, _client(stack, admin=True) as admin:
        created = await owner.post("/task/recurring", json=SPARSE)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        answers = await _spend(admin, task_id)
        assert answers[-1].status_code == 429, [a.status_code for a in answers]
        mine = await owner.get(f"/tasks/{task_id}/upcoming", params={"limit": 1000})
        assert mine.status_code == 200, mine.text


async def test_an_admin_keys_preview_of_a_calendar_change_spends_its_own_budget(
    stack: Stack
) -> None:
    # The calendar check of a previewed change listed the task's fires on its tenant's budget.
    async with _client(stack) as owner, _client(stack, admin=True) as admin:
        created = await owner.post("/task/recurring", json={**SPARSE, "max_runs": 30})
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        calendar = await owner.post("/calendars", json={"name": "one", "dates": ["2030-01-01"]})
        assert calendar.status_code == 201, calendar.text
        change = {"task_id": task_id,
                  "exclude_calendars": [{"calendar_id": calendar.json()["calendar_id"]}]}
        answers = []
        for _ in range(60):  # refused long before the 60th
            answers.append(await admin.post("/task/preview", params={"limit": 1}, json=change))
            if answers[-1].status_code != 200:
                break
        assert answers[0].status_code == 200, answers[0].text
        assert answers[-1].status_code == 429, [a.status_code for a in answers]
        mine = await owner.post("/task/preview", params={"limit": 1}, json=change)
        assert mine.status_code == 200, mine.text
