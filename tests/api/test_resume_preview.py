"""The upcoming fires of a paused task show what each resume choice would do, and a resume
right after does exactly that: through the real API, worker and dev server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_policies_e2e import _until

pytestmark = ON_BOTH_DATABASES

EVERY = 4  # seconds between fires (the preview and the resume come in one gap)
FINAL = {"COMPLETED", "FAILED", "SKIPPED", "CANCELLED"}


async def _paused_across_fires(api: Any, **fields: Any) -> str:
    """A task paused at once and left paused across four fires; returns just after a fire, so
    no other comes due before the resume that follows."""
    created = await api.post("/task/recurring", json={
        "task_name": "paused", "job_details": {"type": "handler", "name": "noop"},
        "schedule_type": "interval", "interval_seconds": EVERY, **fields})
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
    first = datetime.fromisoformat(created.json()["next_run_at"])
    fourth = first + timedelta(seconds=3 * EVERY)
    await asyncio.sleep((fourth - datetime.now(UTC)).total_seconds() + 0.3)
    return task_id


async def _rows(api: Any, task_id: str) -> dict[datetime, dict[str, Any]]:
    rows = (await api.get(f"/tasks/{task_id}/executions", params={"limit": 500})).json()["items"]
    return {datetime.fromisoformat(row["scheduled_at"]): row for row in rows}


async def _check_resume_does_what_it_showed(api: Any, task_id: str, missed: str) -> dict[str, Any]:
    shown = await api.get(f"/tasks/{task_id}/upcoming")
    assert shown.status_code == 200, shown.text
    preview = shown.json()["on_resume"]
    assert preview is not None and set(preview) == {"as_of", "skip", "policy"}
    assert (await api.post(f"/tasks/{task_id}/resume", json={"missed": missed})).status_code == 202
    choice: dict[str, Any] = preview[missed]
    fires = {datetime.fromisoformat(f["scheduled_at"]): f for f in choice["fires"]}
    # (the first fire may have run: a run sent ahead of its instant can be too near to withdraw)
    assert len(fires) >= 3 and choice["more"] == 0
    assert choice["runs"] + choice["skipped"] == len(fires)

    async def all_decided() -> bool:
        rows = await _rows(api, task_id)
        return all(at in rows and rows[at]["status"] in FINAL for at in fires)
    await _until(all_decided)
    rows = await _rows(api, task_id)
    for at, fire in fires.items():
        row = rows[at]
        if fire["runs"]:
            assert (row["status"], row["trigger"]) == ("COMPLETED", fire["trigger"]), (at, row)
        else:
            assert (row["status"], row["reason"]) == ("SKIPPED", fire["skipped"]), (at, row)
    # No fire of the pause was decided that the preview did not list.
    assert {at for at in rows if min(fires) <= at <= max(fires)} == set(fires)
    await api.patch("/task/cancel", json={"task_id": task_id})
    return choice


async def test_a_resume_with_policy_or_with_skip_does_what_the_preview_showed(stack: Stack) -> None:
    """Both choices at once, on two tasks paused side by side."""
    async def with_policy(api: Any) -> None:
        task_id = await _paused_across_fires(api, missed_run_policy="catchup", max_catchup_runs=2)
        choice = await _check_resume_does_what_it_showed(api, task_id, "policy")
        decided = [(f["trigger"], f["skipped"]) for f in choice["fires"]]
        assert decided[-3:] == [("catchup", None), ("catchup", None), ("schedule", None)]
        assert set(decided[:-3]) <= {(None, "catchup_cap")}

    async def with_skip(api: Any) -> None:
        await asyncio.sleep(EVERY / 2)  # its preview and resume fall between the other's
        task_id = await _paused_across_fires(api, missed_run_policy="catchup")
        choice = await _check_resume_does_what_it_showed(api, task_id, "skip")
        assert {f["skipped"] for f in choice["fires"]} == {"paused"} and choice["runs"] == 0

    async with stack.client("t1") as api, asyncio.TaskGroup() as both:
        both.create_task(with_policy(api))
        both.create_task(with_skip(api))


async def test_only_a_paused_task_shows_a_resume_and_only_to_its_tenant(stack: Stack) -> None:
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "active", "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "interval", "interval_seconds": 3600})
        task_id = created.json()["task_id"]
        assert (await api.get(f"/tasks/{task_id}/upcoming")).json()["on_resume"] is None
        assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
        shown = (await api.get(f"/tasks/{task_id}/upcoming")).json()["on_resume"]
        assert shown["policy"] == {"missed": "policy", "runs": 0, "skipped": 0, "fires": [], "more": 0,
                                   "complete": True}
        assert (await api.get(f"/tasks/{task_id}")).json()["status"] == "PAUSED"  # a read only
    async with stack.client("t2") as other:
        assert (await other.get(f"/tasks/{task_id}/upcoming")).status_code == 404
    async with stack.client("t1") as api:
        await api.patch("/task/cancel", json={"task_id": task_id})
