"""Pages of many rows are built and turned into JSON on threads, one at a time per tenant.

A page of 500 tasks whose job bodies are near the tenant's 64 KB limit is about 30 MB of JSON:
built on the event loop it held every other tenant's requests for seconds. On a thread it
shares the interpreter with the loop, which keeps answering; and a tenant's pages wait for its
own earlier one, so asking for many at once takes no more of the process than asking for one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from fastapi import Response
from pydantic import BaseModel

T = TypeVar("T")

THREADS = 4


@dataclass
class _Turn:
    lock: anyio.Lock
    users: int = 0


class Rendering:
    """Runs the building of large answers on THREADS threads, one at a time per tenant."""

    def __init__(self) -> None:
        self._threads: anyio.CapacityLimiter | None = None  # made on the event loop
        # Only tenants with a page being built or waiting have an entry.
        self._turns: dict[str, _Turn] = {}

    async def run(self, tenant_id: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread, after the tenant's page before it."""
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(THREADS)
        turn = self._turns.get(tenant_id)
        if turn is None:
            turn = self._turns[tenant_id] = _Turn(anyio.Lock())
        turn.users += 1
        try:
            async with turn.lock:
                return await to_thread.run_sync(fn, *args, limiter=self._threads)
        finally:
            turn.users -= 1
            if turn.users == 0:
                del self._turns[tenant_id]

    async def json(self, tenant_id: str, page: BaseModel) -> Response:
        """The page as a JSON answer, its JSON made by ``run``."""
        return Response(await self.run(tenant_id, page.model_dump_json), media_type="application/json")
