"""The API's database threads, a bounded share per tenant, on SQLite and PostgreSQL: a tenant
whose store calls hang (here on a lock the test holds) keeps the threads it was given, and
another tenant's reads are answered meanwhile, not after its calls."""

from __future__ import annotations

import asyncio
import uuid

from api.database import DB_THREADS
from store.keys import create_key
from tests.api.conftest import ON_BOTH_DATABASES, Stack
from tests.workflows.helpers import locked_for_writes

pytestmark = ON_BOTH_DATABASES

# Past this the test releases the lock itself: a read that waited for it answers late, and fails.
HOLD_SECONDS = 8


async def test_a_tenant_whose_store_calls_hang_holds_up_no_other_tenants_reads(stack: Stack) -> None:
    tenant = f"stuck-{uuid.uuid4().hex[:8]}"
    _, key = create_key(stack.engine, tenant)
    async with stack.client(None) as stuck, stack.client("t1") as other:
        stuck.headers["Authorization"] = f"Bearer {key}"
        with locked_for_writes(stack.engine) as release:
            asyncio.get_running_loop().call_later(HOLD_SECONDS, release.set)
            # More calendar creates than there are threads, each waiting on the lock.
            creates = [asyncio.create_task(stuck.post("/calendars", json={"name": f"c{n}", "dates": []}))
                       for n in range(3 * DB_THREADS)]
            await asyncio.sleep(1)
            answer = await other.get("/tasks", params={"limit": 1})
            # Answered while every create still waits: before, it waited for the lock too.
            assert not release.is_set() and not any(create.done() for create in creates)
            assert answer.status_code == 200, answer.text
            release.set()
            created = await asyncio.gather(*creates)
    assert [c.status_code for c in created] == [201] * len(creates)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, requests: list[bytes]) -> None:
    """Send the requests at once (pipelined) and read an answer for each."""
    writer.write(b"".join(requests))
    await writer.drain()
    for _ in requests:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)


async def test_a_tenants_charge_does_not_carry_over_to_the_next_request_on_its_connection(
    stack: Stack
) -> None:
    # Pipelined on one connection, the next requests took the first one's context, its tenant
    # charge included: another tenant's key lookup on that connection then waited for the
    # stuck tenant's threads.
    tenant = f"stuck-{uuid.uuid4().hex[:8]}"
    _, key = create_key(stack.engine, tenant)
    host, port = stack.base_url.removeprefix("http://").split(":")

    def get(path: str, api_key: str) -> bytes:
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n\r\n".encode()

    reader, writer = await asyncio.open_connection(host, int(port))
    async with stack.client(None) as stuck:
        stuck.headers["Authorization"] = f"Bearer {key}"
        await _exchange(reader, writer, [get("/tasks?limit=1", key)] * 2)
        with locked_for_writes(stack.engine) as release:
            asyncio.get_running_loop().call_later(HOLD_SECONDS, release.set)
            creates = [asyncio.create_task(stuck.post("/calendars", json={"name": f"c{n}", "dates": []}))
                       for n in range(3 * DB_THREADS)]
            await asyncio.sleep(1)
            await _exchange(reader, writer, [get("/tasks?limit=1", stack.keys["t1"])])
            assert not release.is_set() and not any(create.done() for create in creates)
            release.set()
            await asyncio.gather(*creates)
    writer.close()
    await writer.wait_closed()
