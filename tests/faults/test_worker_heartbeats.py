"""/checkHealth tells the truth about workers: killed ones are reported down within seconds
(not the minute that Temporal keeps listing their pollers), started ones up again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.faults.conftest import Stack, wait_healthy

# A worker's heartbeats stop with it; /checkHealth calls it down once the last is 8 s old. The
# pollers Temporal lists stay for more than a minute, so within this bound only the heartbeats
# can have said it.
DOWN_WITHIN = 30.0


async def wait_down(base: str, workers: str, timeout: float = DOWN_WITHIN) -> dict[str, Any]:
    """Wait until /checkHealth answers 503 with this workers check; its body."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            answer = await http.get(f"{base}/checkHealth")
            body: dict[str, Any] = answer.json()
            if answer.status_code == 503 and body["checks"]["workers"] == workers:
                return body
            assert time.monotonic() < deadline, f"still {answer.status_code}: {answer.text}"
            await asyncio.sleep(0.3)


async def test_check_health_follows_workers_going_and_coming(stack: Stack) -> None:
    fleet = stack.fleet
    fleet.start_worker("workflows", worker_role="workflows")
    fleet.start_worker("jobs", worker_role="jobs")
    base = await fleet.start_api("api")
    healthy = await wait_healthy(base)
    assert healthy["checks"]["workers"] == f"up: 1 on {stack.queue}, 1 on {stack.queue}-jobs"

    fleet.kill("jobs")  # SIGKILL: no goodbye to Temporal
    down = await wait_down(base, f"down: no live worker on {stack.queue}-jobs")
    assert down["down"] == ["workers"]

    fleet.start_worker("jobs", worker_role="jobs")
    await wait_healthy(base)

    fleet.kill("jobs")
    fleet.kill("workflows")
    # Each worker's heartbeats stopped at their own phase: one queue may be reported first.
    down = await wait_down(base, f"down: no live worker on {stack.queue}, {stack.queue}-jobs")
    assert down["checks"]["database"] == "up" and down["checks"]["temporal"] == "up"

    fleet.start_worker("workflows", worker_role="workflows")
    fleet.start_worker("jobs", worker_role="jobs")
    healthy = await wait_healthy(base)
    assert healthy["status"] == "ok"
