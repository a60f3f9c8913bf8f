"""How many creates an API process takes on at once, and how they are shared among tenants.

A create counts from its arrival (before its key and quota are read) until its workflow is
started and its row written. When Temporal or the database falls behind, creates pile up here:
past the process's bound a create is refused at once (503), and a tenant past its share of the
bound gets 429, both with Retry-After, instead of waiting until the client gives up. A tenant's
share is the bound over 2 + the other tenants with creates in progress: one tenant alone takes
half, and a tenant that comes while others burst still finds room. One instance per API
process, used from its event loop only (no lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, Request

from api.errors import Overloaded, RateLimited

RETRY_AFTER_SECONDS = 1
RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_SECONDS)}


class CreateAdmission:
    """At most ``limit`` creates in progress in this process; each tenant within its share."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._arrived = 0
        self._by_tenant: Counter[str] = Counter()

    @property
    def in_progress(self) -> int:
        return self._arrived

    def share(self, tenant_id: str) -> int:
        """How many creates ``tenant_id`` may have in progress now."""
        others = len(self._by_tenant) - (tenant_id in self._by_tenant)
        return max(1, self.limit // (others + 2))

    @asynccontextmanager
    async def arrival(self) -> AsyncIterator[None]:
        """Count a create from its arrival; refuse it (503) when the process has ``limit``."""
        if self._arrived >= self.limit:
            raise Overloaded(f"this API process has {self.limit} creates in progress, as many as "
                             f"it takes; retry after {RETRY_AFTER_SECONDS}s", headers=RETRY_AFTER)
        self._arrived += 1
        try:
            yield
        finally:
            self._arrived -= 1

    @asynccontextmanager
    async def tenant(self, tenant_id: str) -> AsyncIterator[None]:
        """Count a create of ``tenant_id``; refuse it (429) past the tenant's share."""
        share, held = self.share(tenant_id), self._by_tenant[tenant_id]
        if held >= share:
            raise RateLimited(f"tenant {tenant_id} has {held} creates in progress, its share of this "
                              f"API process's {self.limit} is {share} now; retry after "
                              f"{RETRY_AFTER_SECONDS}s",
                              headers=RETRY_AFTER)
        self._by_tenant[tenant_id] += 1
        try:
            yield
        finally:
            self._by_tenant[tenant_id] -= 1
            if not self._by_tenant[tenant_id]:
                del self._by_tenant[tenant_id]


async def _arrival(request: Request) -> AsyncIterator[None]:
    admission: CreateAdmission = request.app.state.admission
    async with admission.arrival():
        yield


# A create route's first dependency: counted before its key is read, released before it answers.
CreateArrival = Depends(_arrival, scope="function")
