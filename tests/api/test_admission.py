"""Creates in progress are bounded per API process, and each tenant within its share: with the
database holding the creates' row writes, a tenant past its share gets 429 while other tenants
still get in, a create past the process's bound gets 503, both at once and with Retry-After;
the held creates complete once the database lets them, and a refused one left nothing."""

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

from store.keys import create_key
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


async def test_creates_past_the_bound_or_a_tenants_share_are_refused_at_once(stack: Stack) -> None:
    names = {n: f"admission-{n}-{time.time_ns()}" for n in "abcdefgh"}
    async with serve_api(stack.env, stack.engine, temporal_task_queue=stack.task_queue,
                         api_max_creates_in_progress=4) as base:
        keys = {t: {"Authorization": f"Bearer {stack.keys[t]}"} for t in ("t1", "t2", "admin")}
        # A second key of t1: within its own share on arrival, held to t1's once read.
        keys["t1-other"] = {"Authorization": f"Bearer {create_key(stack.engine, 't1')[1]}"}
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            def create(tenant: str, n: str) -> Any:
                return http.post("/task/create", json=_once(names[n]), headers=keys[tenant])

            held: list[asyncio.Task[httpx.Response]] = []

            async def hold(tenant: str, n: str) -> None:
                held.append(asyncio.create_task(create(tenant, n)))
                deadline = time.monotonic() + 30
                while await _in_progress(http) < len(held):
                    assert time.monotonic() < deadline, "a create was not taken on"
                    assert not any(h.done() for h in held), [h.result().text for h in held if h.done()]
                    await asyncio.sleep(0.05)

            with _row_writes_held(stack.engine):
                await hold("t1", "a")
                await hold("t1", "b")  # alone, t1's share is half of 4
                await hold("t2", "c")  # t1 at its share: t2 still gets in
                over_t1 = await create("t1", "d")  # with t2 in: 4 // 3 = 1 each, t1 holds 2
                over_t2 = await create("t2", "e")  # t2 holds its 1
                over_tenant = await create("t1-other", "h")  # a new key of t1: t1 holds 2 of 1
                await hold("admin", "f")  # a third tenant finds room: the 4th create
                full = await create("t1", "g")  # the process holds 4 of 4
                listed = await http.get("/tasks", headers=keys["t1"])  # reads are not bounded
                # Refused while the held creates were still held: none waited for a slot.
                assert not any(h.done() for h in held)
            answers = await asyncio.gather(*held)
            assert await _in_progress(http) == 0

            assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
            # On arrival, by the key presented (before it is read); then by its tenant.
            for refused, holder in ((over_t1, "this API key has 2 creates arriving"),
                                    (over_t2, "this API key has 1 creates arriving"),
                                    (over_tenant, "tenant t1 has 2 creates in progress")):
                assert refused.status_code == 429, refused.text
                assert (f"{holder}, its share of this API process's 4 is 1 now"
                        in refused.json()["detail"]), refused.json()
            assert full.status_code == 503, full.text
            assert full.json()["type"].endswith("/overloaded")
            for refused in (over_t1, over_t2, over_tenant, full):
                assert refused.headers["Retry-After"] == "1"
                assert refused.headers["content-type"].startswith("application/problem+json")
            assert listed.status_code == 200
            # The refused creates left no task; the held ones are there, each once.
            owners = {"a": "t1", "b": "t1", "c": "t2", "d": "t1", "e": "t2", "f": "admin", "g": "t1",
                      "h": "t1"}
            found = set()
            for n, name in names.items():
                page = await http.get("/tasks", params={"name": name}, headers=keys[owners[n]])
                assert page.status_code == 200, page.text
                found |= {n for item in page.json()["items"] if item["task_name"] == name}
            assert found == {"a", "b", "c", "f"}
