"""Per-tenant rate limits, separate for writes and reads, with the `limits` library.

The storage is chosen by URI: ``memory://`` (the default) counts per API process; for several
API replicas point every replica at one shared store, e.g. ``redis://redis:6379`` (limits'
Redis storage, needs the `redis` package), so a tenant's budget is shared by all of them.
The strategy is a moving window: at most N requests in any window of the given length, which
behaves like a token bucket of N tokens refilled as old requests age out of the window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from anyio import to_thread
from fastapi import Depends, Request
from limits import RateLimitItem, parse, storage, strategies

from api.deps import Creator, CreatorAuthDep, TenantDep
from api.errors import RateLimited
from api.service import Principal

T = TypeVar("T")


class TenantRateLimiter:
    """Counts each tenant's reads and writes against their limits."""

    def __init__(self, storage_uri: str, writes: str, reads: str) -> None:
        store = storage.storage_from_string(storage_uri)
        self._limiter = strategies.MovingWindowRateLimiter(store)
        self._limits = {"write": parse(writes), "read": parse(reads)}
        # Counting in this process's memory takes microseconds: in place. A shared store (Redis)
        # is a network round trip: on a thread, so the event loop does not wait for it.
        self._in_place = isinstance(store, storage.MemoryStorage)

    async def _store(self, call: Callable[..., T], *args: Any) -> T:
        return call(*args) if self._in_place else await to_thread.run_sync(call, *args)

    async def hit(self, who: Principal, kind: str) -> None:
        """Count one request; raises RateLimited with Retry-After when over the limit."""
        item: RateLimitItem = self._limits[kind]
        if await self._store(self._limiter.hit, item, who.tenant_id, kind):
            return
        stats = await self._store(self._limiter.get_window_stats, item, who.tenant_id, kind)
        reset = stats.reset_time
        retry_after = max(1, math.ceil(reset - time.time()))
        raise RateLimited(
            f"tenant {who.tenant_id} is over its {kind} limit of {item}; retry after "
            f"{retry_after}s",
            headers={"Retry-After": str(retry_after)},
        )


def _limit(kind: str):  # type: ignore[no-untyped-def]
    async def check(request: Request, who: TenantDep) -> Principal:
        limiter: TenantRateLimiter = request.app.state.rate_limiter
        await limiter.hit(who, kind)
        return who

    return check


async def _limit_creator(request: Request, creator: CreatorAuthDep) -> Creator:
    limiter: TenantRateLimiter = request.app.state.rate_limiter
    await limiter.hit(creator.who, "write")
    return creator


WriterDep = Annotated[Principal, Depends(_limit("write"))]
ReaderDep = Annotated[Principal, Depends(_limit("read"))]
CreatorDep = Annotated[Creator, Depends(_limit_creator)]  # a write, with the tenant's usage
