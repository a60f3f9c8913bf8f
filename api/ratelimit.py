"""Per-tenant rate limits, separate for writes and reads, with the `limits` library.

The storage is chosen by URI: ``memory://`` (the default) counts per API process; for several
API replicas point every replica at one shared store, e.g. ``redis://redis:6379`` (limits'
Redis storage, needs the `redis` package), so a tenant's budget is shared by all of them.
The strategy is a moving window: at most N requests in any window of the given length, which
behaves like a token bucket of N tokens refilled as old requests age out of the window.

The same storage and strategy count failed sign-ins per client address (``AuthFailureLimiter``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from anyio import to_thread
from fastapi import Depends, Request
from limits import RateLimitItem, parse, storage, strategies

from api.deps import Creator, CreatorAuthDep, TenantDep
from api.errors import RateLimited
from api.service import Principal

T = TypeVar("T")


class _MovingWindow:
    """A moving-window limiter on a storage chosen by URI, called without blocking the loop."""

    def __init__(self, storage_uri: str) -> None:
        store = storage.storage_from_string(storage_uri)
        self._limiter = strategies.MovingWindowRateLimiter(store)
        # Counting in this process's memory takes microseconds: in place. A shared store (Redis)
        # is a network round trip: on a thread, so the event loop does not wait for it.
        self._in_place = isinstance(store, storage.MemoryStorage)

    async def _store(self, call: Callable[..., T], *args: Any) -> T:
        return call(*args) if self._in_place else await to_thread.run_sync(call, *args)

    async def _retry_after(self, item: RateLimitItem, *identifiers: str) -> int:
        stats = await self._store(self._limiter.get_window_stats, item, *identifiers)
        return max(1, math.ceil(stats.reset_time - time.time()))


class TenantRateLimiter(_MovingWindow):
    """Counts each tenant's reads and writes against their limits."""

    def __init__(self, storage_uri: str, writes: str, reads: str) -> None:
        super().__init__(storage_uri)
        self._limits = {"write": parse(writes), "read": parse(reads)}

    async def hit(self, who: Principal, kind: str) -> None:
        """Count one request; raises RateLimited with Retry-After when over the limit."""
        item: RateLimitItem = self._limits[kind]
        if await self._store(self._limiter.hit, item, who.tenant_id, kind):
            return
        retry_after = await self._retry_after(item, who.tenant_id, kind)
        raise RateLimited(
            f"tenant {who.tenant_id} is over its {kind} limit of {item}; retry after "
            f"{retry_after}s",
            headers={"Retry-After": str(retry_after)},
        )


class AuthFailureLimiter(_MovingWindow):
    """Counts failed sign-ins per client address; over the limit, the address is refused
    before its key is even looked up, so guessing keys costs a guesser time, not the database.

    A key that signed in from the address within ``KNOWN_FOR`` still passes (this process
    remembers a digest of it): many tenants may share one address (a NAT, a proxy), and one's
    wrong key must not lock the others out. A guess is never such a key."""

    KIND = "auth-failure"
    KNOWN_FOR = 3600.0  # seconds a sign-in vouches for its key from its address
    KNOWN_MAX = 10_000  # (address, key) pairs remembered, the oldest forgotten first

    def __init__(self, storage_uri: str, failures: str) -> None:
        super().__init__(storage_uri)
        self._item = parse(failures)
        self._known: OrderedDict[tuple[str, bytes], float] = OrderedDict()

    def succeeded(self, address: str, key: str) -> None:
        """Remember that ``key`` signed in from ``address``."""
        pair = (address, _digest(key))
        self._known[pair] = time.monotonic()
        self._known.move_to_end(pair)
        while len(self._known) > self.KNOWN_MAX:
            self._known.popitem(last=False)

    def _vouched(self, address: str, key: str | None) -> bool:
        seen = self._known.get((address, _digest(key))) if key is not None else None
        return seen is not None and time.monotonic() - seen < self.KNOWN_FOR

    async def refuse_if_over(self, address: str, key: str | None = None) -> None:
        """Raise RateLimited with Retry-After while ``address`` is over its failure limit,
        unless ``key`` signed in from it lately."""
        if self._vouched(address, key) or await self._store(
                self._limiter.test, self._item, self.KIND, address):
            return
        retry_after = await self._retry_after(self._item, self.KIND, address)
        raise RateLimited(
            f"too many failed sign-ins from this address (limit {self._item}); retry after "
            f"{retry_after}s", headers={"Retry-After": str(retry_after)},
        )

    async def failed(self, address: str) -> None:
        """Count one failed sign-in of ``address`` (a success is never counted)."""
        await self._store(self._limiter.hit, self._item, self.KIND, address)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


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
