"""How many creates an API process takes on at once.

A create holds its slot while it starts the task's workflow and writes its row. When Temporal
or the database falls behind, creates pile up here; past the process's limit, or past the
tenant's share of it, a create is refused at once (503 or 429, with Retry-After) instead of
waiting until its client gives up. A tenant's share keeps one tenant's burst from taking every
slot: the other tenants' creates still get in. One instance per API process, used from its
event loop only (no lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from api.errors import Overloaded, RateLimited

RETRY_AFTER_SECONDS = 1


class CreateAdmission:
    """At most ``limit`` creates in progress in this process, at most ``per_tenant`` of a tenant."""

    def __init__(self, limit: int, per_tenant: int) -> None:
        self.limit = limit
        self.per_tenant = min(per_tenant, limit)
        self._by_tenant: Counter[str] = Counter()
        self._total = 0

    @property
    def in_progress(self) -> int:
        return self._total

    @asynccontextmanager
    async def admit(self, tenant_id: str) -> AsyncIterator[None]:
        """Hold a slot for one create of ``tenant_id``; refuse it when there is none."""
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        if self._by_tenant[tenant_id] >= self.per_tenant:
            raise RateLimited(
                f"tenant {tenant_id} has {self.per_tenant} creates in progress on this API "
                f"process, its share of {self.limit}; retry after {RETRY_AFTER_SECONDS}s",
                headers=headers)
        if self._total >= self.limit:
            raise Overloaded(
                f"this API process has {self.limit} creates in progress, as many as it takes; "
                f"retry after {RETRY_AFTER_SECONDS}s", headers=headers)
        self._total += 1
        self._by_tenant[tenant_id] += 1
        try:
            yield
        finally:
            self._total -= 1
            self._by_tenant[tenant_id] -= 1
            if not self._by_tenant[tenant_id]:
                del self._by_tenant[tenant_id]
