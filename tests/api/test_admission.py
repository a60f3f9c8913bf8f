"""Creates in progress are bounded per API process and per tenant: with the database holding
the creates' row writes, a create past the tenant's share gets 429 and one past the process's
bound 503, both at once and with Retry-After, while another tenant still gets in; the held
creates complete once the database lets them, and a refused one left nothing behind."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine, text

from tests.api.conftest import ON_BOTH_DATABASES, Stack, serve_api

pytestmark = ON_BOTH_DATABASES
GAUGE = "scheduler_api_creates_in_progress"


@contextmanager
def _row_writes_held(engine: Engine) -> Iterator[None]:
    """Hold every write of the task table (reads go on) until the block ends."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn, conn.begin():
            conn.execute(text("LOCK TABLE task IN EXCLUSIVE MODE"))
            yield
        return
    holder = sqlite3.connect(str(engine.url.database), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock; WAL readers are not blocked
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def _once(name: str) -> dict[str, Any]:
    run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    return {"task_name": name, "job_details": {"type": "handler", "name": "noop"},
            "schedule_type": "once", "run_at": run_at}


async def _in_progress(http: httpx.AsyncClient) -> float:
    answer = await http.get("/metrics")
    assert answer.status_code == 200, answer.text
    [line] = [line for line in answer.text.splitlines() if line.startswith(GAUGE + " ")]
    return float(line.split()[1])


async def test_creates_past_the_bounds_are_refused_at_once_and_the_held_ones_complete(
    stack: Stack,
) -> None:
    names = {f"admission-{n}-{time.time_ns()}": n for n in ("a", "b", "c", "d", "e", "f")}
    by = {n: name for name, n in names.items()}
    async with serve_api(stack.env, stack.engine, temporal_task_queue=stack.task_queue,
                         api_max_creates_in_progress=3,
                         api_max_creates_in_progress_per_tenant=2) as base:
        keys = {t: {"Authorization": f"Bearer {stack.keys[t]}"} for t in ("t1", "t2", "admin")}
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            def create(tenant: str, n: str) -> Any:
                return http.post("/task/create", json=_once(by[n]), headers=keys[tenant])

            with _row_writes_held(stack.engine):
                held = [asyncio.create_task(create("t1", "a")), asyncio.create_task(create("t1", "b")),
                        asyncio.create_task(create("t2", "c"))]
                deadline = time.monotonic() + 30
                while await _in_progress(http) < 3:
                    assert time.monotonic() < deadline, "the creates did not reach their row writes"
                    assert not any(h.done() for h in held), [h.result().text for h in held if h.done()]
                    await asyncio.sleep(0.05)
                over_share = await create("t1", "d")  # t1 holds its share of 2
                full = await create("t2", "e")  # t2 holds 1 of its 2, but the process holds 3 of 3
                other = await create("admin", "f")
                listed = await http.get("/tasks", headers=keys["t1"])  # reads are not bounded
                # Refused while the held creates were still held: none waited for a slot.
                assert not any(h.done() for h in held)
            answers = await asyncio.gather(*held)
            assert await _in_progress(http) == 0

            assert [a.status_code for a in answers] == [201, 201, 201], [a.text for a in answers]
            assert over_share.status_code == 429, over_share.text
            assert "t1 has 2 creates in progress" in over_share.json()["detail"]
            for refused in (full, other):
                assert refused.status_code == 503, refused.text
                assert refused.json()["type"].endswith("/overloaded")
            for refused in (over_share, full, other):
                assert refused.headers["Retry-After"] == "1"
                assert refused.headers["content-type"].startswith("application/problem+json")
            assert listed.status_code == 200
            # The refused creates left no task; the held ones are there, each once.
            for tenant, wanted in (("t1", {"a", "b"}), ("t2", {"c"}), ("admin", set())):
                found = set()
                for name, n in names.items():
                    page = await http.get("/tasks", params={"name": name}, headers=keys[tenant])
                    assert page.status_code == 200, page.text
                    found |= {n for item in page.json()["items"] if item["task_name"] == name}
                assert found == wanted, (tenant, found)
