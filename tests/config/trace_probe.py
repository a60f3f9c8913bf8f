"""Run one HTTP task through API, workflow and activity with tracing on; print the spans.

Used by test_tracing.py in a child process, since a tracer provider is set once per process.
Usage: python -m tests.config.trace_probe <temporal address>
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from datetime import UTC, datetime

import httpx
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config.temporal import connect
from config.tracing import setup_tracing
from store.engine import make_engine, migrate
from store.keys import create_key
from tests.api.conftest import serve_api
from tests.conftest import new_worker
from tests.target import TargetServer


async def main(address: str) -> None:
    memory = InMemorySpanExporter()
    assert setup_tracing("probe", None, processors=[SimpleSpanProcessor(memory)])
    client = await connect(address, "default", tracing=True)
    target = TargetServer()
    await target.start()
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/t.db")
        migrate(engine)
        _, key = create_key(engine, "t1")
        queue = f"trace-{uuid.uuid4()}"

        class Env:  # serve_api wants an object with .client
            pass

        env = Env()
        env.client = client  # type: ignore[attr-defined]
        async with new_worker(client, engine, task_queue=queue):
            async with serve_api(env, engine, temporal_task_queue=queue) as url:  # type: ignore[arg-type]
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as api:
                    created = await api.post("/task/create", json={
                        "task_name": "traced", "schedule_type": "once",
                        "run_at": datetime.now(UTC).isoformat(),
                        "job_details": {"type": "http", "url": target.url("/traced")},
                    })
                    assert created.status_code == 201, created.text
                    task_id = created.json()["task_id"]
                    await target.wait_for(1)
                    for _ in range(100):
                        if (await api.get(f"/tasks/{task_id}")).json()["status"] == "COMPLETED":
                            break
                        await asyncio.sleep(0.1)
        engine.dispose()
    await target.stop()
    spans = [
        {"name": s.name, "trace_id": format(s.context.trace_id, "032x"),
         "parent": format(s.parent.span_id, "016x") if s.parent else None,
         "span_id": format(s.context.span_id, "016x"), "attributes": dict(s.attributes or {})}
        for s in memory.get_finished_spans()
    ]
    print(json.dumps({"spans": spans, "task_id": task_id, "traceparent": target.received[0].headers.get("traceparent")}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
