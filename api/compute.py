"""Fire math of a read (previews, backfill ranges) off the event loop.

Listing many fires of a sparse cron (``0 0 29 2 1#5``) keeps croniter busy for a good part of a
second: on the event loop that would stall every tenant's requests. Here it runs on one thread
of the process (more would only fight the event loop for the interpreter), one listing at a
time per tenant, and draws on a per-tenant budget of CPU time. Past it a read is refused (429)
until the budget refills, so a tenant's costly reads cannot take the API process from the
others (docs/operations.md, "Rate limits"). One instance per API process, used from its event
loop only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio import to_thread

from api.errors import RateLimited

T = TypeVar("T")

# Threads of one process listing fires at once.
THREADS = 1


@dataclass
class _Tenant:
    balance: float  # CPU seconds left to spend
    at: float = field(default_factory=time.monotonic)
    turn: anyio.Lock = field(default_factory=anyio.Lock)


class FireMath:
    """Runs fire math on threads; ``charged`` keeps each tenant within ``cpu_share`` seconds of
    CPU a second, ``cpu_burst`` at once."""

    def __init__(self, cpu_share: float, cpu_burst: float) -> None:
        self.cpu_share = cpu_share
        self.cpu_burst = cpu_burst
        self._tenants: dict[str, _Tenant] = {}
        self._threads: anyio.CapacityLimiter | None = None  # made on the event loop

    async def charged(self, tenant_id: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread, after the tenant's earlier listings, its CPU time paid
        by the tenant's budget: refused (429) while the budget is spent. Judged in turn, so
        requests sent together are each judged on what the ones before cost."""
        tenant = self._tenant(tenant_id)
        async with tenant.turn:
            self.refuse_if_spent(tenant_id)
            clock = _CpuClock()
            try:
                return await self._thread(clock.run, fn, *args)
            finally:
                tenant.balance -= clock.spent

    def refuse_if_spent(self, tenant_id: str) -> None:
        """Raise RateLimited, with Retry-After, while the tenant's budget is spent."""
        tenant = self._tenant(tenant_id)
        now = time.monotonic()
        tenant.balance = min(self.cpu_burst, tenant.balance + (now - tenant.at) * self.cpu_share)
        tenant.at = now
        if tenant.balance <= 0:
            wait = max(1, math.ceil(-tenant.balance / self.cpu_share))
            raise RateLimited(
                f"tenant {tenant_id} has used its share of this API process's CPU for listing "
                f"fires ({self.cpu_share:g} s a second); ask for fewer fires, or retry after "
                f"{wait}s", headers={"Retry-After": str(wait)})

    def _tenant(self, tenant_id: str) -> _Tenant:
        if (tenant := self._tenants.get(tenant_id)) is None:
            tenant = self._tenants[tenant_id] = _Tenant(balance=self.cpu_burst)
        return tenant

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(THREADS)
        return await to_thread.run_sync(fn, *args, limiter=self._threads)


class _CpuClock:
    """The CPU time of the calls run through it, on their own thread (raised or not)."""

    def __init__(self) -> None:
        self.spent = 0.0

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        began = time.thread_time()
        try:
            return fn(*args)
        finally:
            self.spent += time.thread_time() - began
