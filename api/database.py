"""Calls into the task database from the event loop, on a bounded pool of threads, a bounded
share of them per tenant. A database outage, or a database that refuses writes, becomes 503.

A store call holds its thread until the database answers, whatever its caller does meanwhile.
A tenant whose calls are slow (pages of big tasks, a calendar delete over many tasks) could
hold every thread, and every other tenant's requests would queue behind its calls. A request
counts against its caller's tenant once its key is known (``charge_to``); the calls before
that, the key lookup itself, share one more share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from anyio.lowlevel import RunVar
from sqlalchemy.exc import DBAPIError, OperationalError

from api.errors import ServiceUnavailable

T = TypeVar("T")

# Store calls run on threads, at most this many at once: the database pool holds as many
# connections, so no call waits for (or opens and closes) a connection beyond it, and a burst of
# requests queues here instead of crowding the GIL with threads.
DB_THREADS = 10
# Of those, what one tenant's calls may hold at once: the others keep the rest.
PER_TENANT = 6
# SQLSTATE of a write refused by a read-only database (PostgreSQL: a standby, or
# default_transaction_read_only during maintenance).
READ_ONLY = "25006"
_db_threads: RunVar[anyio.CapacityLimiter] = RunVar("db_threads")
_shares: RunVar[dict[str, _Share]] = RunVar("db_thread_shares")
_payer: ContextVar[str] = ContextVar("db_payer", default="")


def charge_to(tenant: str) -> None:
    """The store calls of this request from now on count against ``tenant``'s share."""
    _payer.set(tenant)


@dataclass
class _Share:
    threads: anyio.CapacityLimiter
    users: int = 0


@asynccontextmanager
async def _tenant_share() -> AsyncIterator[None]:
    """Hold one of the paying tenant's threads (only tenants with calls have an entry)."""
    try:
        shares = _shares.get()
    except LookupError:
        shares = {}
        _shares.set(shares)
    tenant = _payer.get()
    share = shares.get(tenant)
    if share is None:
        share = shares[tenant] = _Share(anyio.CapacityLimiter(PER_TENANT))
    share.users += 1
    try:
        async with share.threads:
            yield
    finally:
        share.users -= 1
        if not share.users:
            del shares[tenant]


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking store call off the event loop; database outages become 503. A call
    cancelled while its thread runs still holds the thread, and its tenant's share, until the
    database answers."""
    try:
        limiter = _db_threads.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DB_THREADS)
        _db_threads.set(limiter)
    try:
        async with _tenant_share():
            return await to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=limiter)
    except OperationalError as exc:
        raise ServiceUnavailable("the database is unavailable") from exc
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == READ_ONLY:
            raise ServiceUnavailable("the database refuses writes") from exc
        raise
