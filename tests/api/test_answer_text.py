"""What a target answers is recorded as both databases store text: a NUL byte in its body,
which PostgreSQL refuses in a text column, stood still the run's row and its task's (every
write of them retried forever); it is recorded as U+FFFD."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.api.test_e2e import iso, wait_for_status
from tests.target import TargetServer

pytestmark = ON_BOTH_DATABASES


async def test_an_answer_with_a_nul_byte_is_recorded_and_the_task_ends(
    stack: Stack, target: TargetServer
) -> None:
    run_at = iso(datetime.now(UTC) + timedelta(seconds=2))
    async with stack.client() as api:
        ids = {}
        for code in (200, 500):
            created = await api.post("/task/create", json={
                "task_name": f"nul-{code}", "schedule_type": "once", "run_at": run_at,
                "job_details": {"type": "http", "url": target.url(f"/nul/{code}"), "method": "GET"},
                "retry_policy": {"max_attempts": 1},
            })
            assert created.status_code == 201, created.text
            ids[code] = created.json()["task_id"]
        for code, wanted in ((200, "COMPLETED"), (500, "FAILED")):
            final = await wait_for_status(api, ids[code], {"COMPLETED", "FAILED"})
            assert (final["status"], final["run_count"]) == (wanted, 1), final
            [run] = (await api.get(f"/tasks/{ids[code]}/executions")).json()["items"]
            assert (run["status"], run["http_status"]) == (wanted, code), run
            assert run["response_snippet"] == "ok\ufffdthen more", run
