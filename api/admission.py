"""How many creates an API process takes on at once, and how they are shared among tenants.

A create counts from its arrival (before its key and quota are read) until its workflow is
started and its row written. When Temporal or the database falls behind, creates pile up here:
past the process's bound a create is refused at once (503), and a tenant past its share of the
bound gets 429, both with Retry-After, instead of waiting until the client gives up. A tenant's
share is the bound over 2 + the other tenants with creates in progress: one tenant alone takes
half, and a tenant that comes while others burst still finds room. The share is kept on arrival
too, by the API key presented (a tenant with several keys has a share for each until they are
read), so one tenant's flood of creates does not take the room of another's.

The bound holds the API's own queue, not Temporal's: when the workers fall behind, workflow
tasks wait in the task queue, every tenant's runs start late, and each new task adds its first
workflow task to that wait. So while the workers take workflow tasks but the oldest has waited
longer than a bound, a create is refused too (503, once its key is read and its body checked).
While nobody takes them (the workers down) creates go on: their tasks wait for the workers like
the rest. One instance per API process, used from its event loop only (no lock)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

import structlog
from fastapi import Depends, Request
from fastapi.security.utils import get_authorization_scheme_param

from api.errors import Overloaded, RateLimited
from api.temporal import TemporalGateway
from config.temporal import QueueReading

RETRY_AFTER_SECONDS = 1
RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_SECONDS)}
# Temporal refreshes a queue's backlog figures every few seconds (5 on the dev server): the
# workflow queue is read this often, and a create refused for its backlog retries after that.
BACKLOG_READ_EVERY = 1.0
BACKLOG_STALE_AFTER = 5 * BACKLOG_READ_EVERY
BEHIND_RETRY_AFTER_SECONDS = 5
BEHIND_RETRY_AFTER = {"Retry-After": str(BEHIND_RETRY_AFTER_SECONDS)}

log = structlog.get_logger("task_scheduler.api")
_K = TypeVar("_K", str, bytes)


class CreateAdmission:
    """At most ``limit`` creates in progress in this process; each tenant within its share."""

    def __init__(self, limit: int, max_backlog_seconds: float = 0.0) -> None:
        self.limit = limit
        self.max_backlog_seconds = max_backlog_seconds
        self._arrived = 0
        self._by_tenant: Counter[str] = Counter()
        self._by_caller: Counter[bytes] = Counter()
        self._backlog_age = 0.0  # of the workflow queue, while workers take its tasks
        self._read_at = float("-inf")  # monotonic time of the reading

    def note_backlog(self, reading: QueueReading | None) -> None:
        """The workflow queue's latest reading (None: it could not be read). A backlog nobody
        takes tasks from is the workers being down, not behind: it refuses nothing."""
        self._read_at = time.monotonic()
        if reading is None or reading.dispatch_rate <= 0:
            self._backlog_age = 0.0
        else:
            self._backlog_age = reading.backlog_age_seconds

    @property
    def behind(self) -> bool:
        """Temporal is behind: the oldest workflow task has waited past the bound (as read
        lately: a reading the reader could not renew refuses nothing)."""
        fresh = time.monotonic() - self._read_at < BACKLOG_STALE_AFTER
        return fresh and 0 < self.max_backlog_seconds < self._backlog_age

    @property
    def in_progress(self) -> int:
        return self._arrived

    def share(self, tenant_id: str) -> int:
        """How many creates ``tenant_id`` may have in progress now."""
        return _share(self.limit, self._by_tenant, tenant_id)

    @asynccontextmanager
    async def arrival(self, caller: bytes) -> AsyncIterator[None]:
        """Count a create from its arrival; refuse it (503) when the process has ``limit``, or
        (429) when the credential it presents (``caller``, a digest: its key is not read yet)
        holds its share, so that one tenant's flood never fills the process for the others."""
        if self._arrived >= self.limit:
            raise Overloaded(f"this API process has {self.limit} creates in progress, as many as "
                             f"it takes; retry after {RETRY_AFTER_SECONDS}s", headers=RETRY_AFTER)
        share, held = _share(self.limit, self._by_caller, caller), self._by_caller[caller]
        if held >= share:
            raise RateLimited(f"this API key has {held} creates arriving, its share of this API "
                              f"process's {self.limit} is {share} now; retry after "
                              f"{RETRY_AFTER_SECONDS}s", headers=RETRY_AFTER)
        self._arrived += 1
        self._by_caller[caller] += 1
        try:
            yield
        finally:
            self._arrived -= 1
            _release(self._by_caller, caller)

    @asynccontextmanager
    async def tenant(self, tenant_id: str) -> AsyncIterator[None]:
        """Count a create of ``tenant_id`` (its key read, its body valid); refuse it (503) while
        Temporal is behind, or (429) past the tenant's share."""
        if self.behind:
            raise Overloaded(f"the scheduler is behind: workflow tasks have waited "
                             f"{self._backlog_age:.0f}s in Temporal's queue (bound "
                             f"{self.max_backlog_seconds:g}s), and new tasks would make runs "
                             f"later still; retry after {BEHIND_RETRY_AFTER_SECONDS}s",
                             headers=BEHIND_RETRY_AFTER)
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
            _release(self._by_tenant, tenant_id)


def _share(limit: int, holders: Counter[_K], holder: _K) -> int:
    """A holder's share of ``limit``: it over 2 + the other holders."""
    others = len(holders) - (holder in holders)
    return max(1, limit // (others + 2))


def _release(holders: Counter[_K], holder: _K) -> None:
    holders[holder] -= 1
    if not holders[holder]:
        del holders[holder]


@asynccontextmanager
async def following_backlog(admission: CreateAdmission, temporal: TemporalGateway) -> AsyncIterator[None]:
    """Read the workflow queue's backlog into ``admission`` in the background while the
    context lasts (not at all when its bound is off)."""

    async def follow() -> None:
        while True:
            try:
                admission.note_backlog(await temporal.workflow_queue())
            except Exception as exc:  # Temporal down: the creates themselves will say so
                log.debug("backlog.unread", error=type(exc).__name__)
                admission.note_backlog(None)
            await asyncio.sleep(BACKLOG_READ_EVERY)

    reader = asyncio.create_task(follow()) if admission.max_backlog_seconds else None
    try:
        yield
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _arrival(request: Request) -> AsyncIterator[None]:
    admission: CreateAdmission = request.app.state.admission
    # The key as the API reads it (HTTPBearer): any spelling of the scheme is the same caller.
    scheme, key = get_authorization_scheme_param(request.headers.get("authorization"))
    credential = key.encode() if scheme.lower() == "bearer" else b""
    async with admission.arrival(hashlib.blake2b(credential, digest_size=16).digest()):
        yield


# A create route's first dependency: counted before its key is read, released before it answers.
CreateArrival = Depends(_arrival, scope="function")
