"""Fire math of a request (previews, backfill ranges, calendar checks) off the event loop.

Listing 1,000 fires takes croniter about 75 ms for a daily cron and 0.35 s for a sparse one
(``0 0 29 2 1#5``): on the event loop that stalls every tenant's requests. Here it runs on a
thread, one computation at a time per tenant, and the reads that ask for it (previews, backfill
ranges) draw on a per-tenant budget of CPU time: past it they are refused (429) until it
refills, so a tenant's costly reads cannot take the API process from the others.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from anyio.lowlevel import RunVar

from api.errors import RateLimited

T = TypeVar("T")

# CPU seconds of fire math a tenant's reads may use per second, on average, per API process,
# and what they may spend at once.
CPU_SHARE = 0.1
CPU_BURST = 1.0


@dataclass
class _Tenant:
    threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
    balance: float = CPU_BURST
    at: float = field(default_factory=time.monotonic)

    def refilled(self) -> float:
        now = time.monotonic()
        self.balance = min(CPU_BURST, self.balance + (now - self.at) * CPU_SHARE)
        self.at = now
        return self.balance


_tenants: RunVar[dict[str, _Tenant]] = RunVar("fire_math_tenants")


def _tenant(tenant_id: str) -> _Tenant:
    try:
        tenants = _tenants.get()
    except LookupError:
        tenants = {}
        _tenants.set(tenants)
    return tenants.setdefault(tenant_id, _Tenant())


async def off_loop(tenant_id: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a thread, after the tenant's earlier computations."""
    return await to_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                    limiter=_tenant(tenant_id).threads)


async def charged(tenant_id: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Like ``off_loop``, for a read: refused (429) while the tenant's CPU budget is spent,
    and the CPU time it takes is drawn from it."""
    tenant = _tenant(tenant_id)
    if (balance := tenant.refilled()) <= 0:
        wait = max(1, math.ceil(-balance / CPU_SHARE))
        raise RateLimited(
            f"tenant {tenant_id} has used its share of this API process's CPU for listing fires "
            f"({CPU_SHARE:g} s a second); ask for fewer fires, or retry after {wait}s",
            headers={"Retry-After": str(wait)})

    used = 0.0

    def timed() -> T:
        nonlocal used
        began = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            used = time.thread_time() - began

    try:
        return await to_thread.run_sync(timed, limiter=tenant.threads)
    finally:
        tenant.balance -= used
