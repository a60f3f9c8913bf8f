"""The task page of a task the circuit breaker auto-paused shows when its probe runs."""

from __future__ import annotations

from tests.api.conftest import Stack
from tests.api.test_e2e import wait_for_status
from tests.target import TargetServer
from tests.ui.tasks import sign_in


async def test_task_page_shows_the_next_probe(stack: Stack, target: TargetServer) -> None:
    async with stack.client("t1") as api:
        created = await api.post("/task/recurring", json={
            "task_name": "ui-healing", "schedule_type": "interval", "interval_seconds": 1,
            "job_details": {"type": "http", "url": target.url("/status/503")},
            "retry_policy": {"max_attempts": 1}, "max_consecutive_failures": 1,
            "auto_resume_after_seconds": 3600,
        })
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        paused = await wait_for_status(api, task_id, {"PAUSED"}, timeout=40)
        plain = (await api.post("/task/recurring", json={
            "task_name": "ui-plain", "schedule_type": "interval", "interval_seconds": 3600,
            "job_details": {"type": "handler", "name": "noop"}})).json()
    assert paused["next_probe_at"] is not None
    async with sign_in(stack.base_url, stack.keys["t1"]) as browser:
        page = (await browser.get(f"/ui/tasks/{task_id}")).text
        other = (await browser.get(f"/ui/tasks/{plain['task_id']}")).text
    assert '<dt>Next probe</dt><dd id="next-probe">' in page and "success resumes the task" in page
    assert "Next probe" not in other
    async with stack.client("t1") as api:
        for task in (task_id, plain["task_id"]):
            await api.patch("/task/cancel", json={"task_id": task})
