"""Run a task through API, workflow and jobs with tracing on, on a worker that keeps no
workflow in its cache (every workflow task replays the history); print the spans and runs.

Used by test_decision_spans.py in a child process, since a tracer provider is set once per
process. Usage: python -m tests.config.decision_probe <temporal address> <scenario>
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import httpx
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from activities.options import RunOptions
from config.temporal import connect
from config.tracing import setup_tracing
from store.engine import make_engine, migrate
from store.keys import create_key
from tests.api.conftest import serve_api
from tests.conftest import new_worker
from tests.target import TargetServer

Workers = Callable[[], Awaitable[None]]


async def overlapping(api: httpx.AsyncClient, target: TargetServer, workers: Workers) -> str:
    """Fires every second, a job of 2.5 s: runs, and fires skipped by the overlap policy."""
    await workers()
    created = await api.post("/task/create", json={
        "task_name": "overlapping", "schedule_type": "interval", "interval_seconds": 1,
        "job_details": {"type": "http", "url": target.url("/slow/2.5")},
    })
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    await until(api, task_id, {"COMPLETED", "SKIPPED"})
    return task_id


async def paused(api: httpx.AsyncClient, target: TargetServer, workers: Workers) -> str:
    """A run sent ahead of its instant, withdrawn by a pause; its fire, inside the pause, is
    SKIPPED paused when the task is cancelled still paused."""
    await workers()
    run_at = datetime.now(UTC) + timedelta(seconds=8)  # a pause withdraws it 3 s ahead at the latest
    created = await api.post("/task/create", json={
        "task_name": "paused", "schedule_type": "once", "run_at": run_at.isoformat(),
        "job_details": {"type": "http", "url": target.url("/job")},
    })
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    await asyncio.sleep(1)  # the run is sent ahead (the worker's lead is longer)
    assert (await api.post(f"/tasks/{task_id}/pause")).status_code == 202
    # Past the instant, still paused: the cancel that follows records the fire SKIPPED paused.
    await asyncio.sleep((run_at - datetime.now(UTC)).total_seconds() + 1)
    return task_id


async def caught_up(api: httpx.AsyncClient, target: TargetServer, workers: Workers) -> str:
    """Fires every second while no worker runs; a high-priority task catches them up."""
    created = await api.post("/task/create", json={
        "task_name": "catching-up", "schedule_type": "interval", "interval_seconds": 1,
        "priority": "high", "job_details": {"type": "http", "url": target.url("/job")},
    })
    assert created.status_code == 201, created.text
    task_id: str = created.json()["task_id"]
    await asyncio.sleep(3.5)
    await workers()
    for _ in range(300):
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        if sum(r["trigger"] == "catchup" and r["status"] == "COMPLETED" for r in runs) >= 2:
            break
        await asyncio.sleep(0.1)
    return task_id


async def until(api: httpx.AsyncClient, task_id: str, statuses: set[str]) -> None:
    for _ in range(300):
        runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        if statuses <= {r["status"] for r in runs}:
            return
        await asyncio.sleep(0.1)


SCENARIOS = {"overlapping": (overlapping, 0.0), "paused": (paused, 30.0),
             "caught_up": (caught_up, 0.0)}


async def main(address: str, scenario: str) -> None:
    act, lead = SCENARIOS[scenario]
    memory = InMemorySpanExporter()
    assert setup_tracing("probe", None, processors=[SimpleSpanProcessor(memory)])
    client = await connect(address, "default", tracing=True)
    target = TargetServer()
    await target.start()
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/t.db")
        migrate(engine)
        _, key = create_key(engine, "t1")
        queue = f"decisions-{uuid.uuid4()}"

        class Env:  # serve_api wants an object with .client
            pass

        env = Env()
        env.client = client  # type: ignore[attr-defined]
        async with AsyncExitStack() as running:

            async def workers() -> None:
                await running.enter_async_context(new_worker(
                    client, engine, task_queue=queue, max_cached_workflows=0,
                    run_options=RunOptions(lead_seconds=lead)))

            async with serve_api(env, engine, temporal_task_queue=queue) as url:  # type: ignore[arg-type]
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                             timeout=30) as api:
                    task_id = await act(api, target, workers)
                    cancelled = await api.patch("/task/cancel", json={"task_id": task_id})
                    assert cancelled.status_code in (202, 409), cancelled.text
                    runs = (await api.get(f"/tasks/{task_id}/executions")).json()["items"]
        engine.dispose()
    await target.stop()
    spans = [
        {"name": s.name, "trace_id": format(s.context.trace_id, "032x"),
         "parent": format(s.parent.span_id, "016x") if s.parent else None,
         "span_id": format(s.context.span_id, "016x"), "attributes": dict(s.attributes or {})}
        for s in memory.get_finished_spans()
    ]
    rows = [{"id": r["id"], "status": r["status"], "reason": r["reason"], "trigger": r["trigger"]}
            for r in runs]
    print(json.dumps({"spans": spans, "executions": rows}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
