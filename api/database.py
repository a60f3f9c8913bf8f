"""Calls into the task database from the event loop, on a bounded pool of threads. A database
outage, or a database that refuses writes, becomes 503."""

from __future__ import annotations

from collections.abc import Callable
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
# SQLSTATE of a write refused by a read-only database (PostgreSQL: a standby, or
# default_transaction_read_only during maintenance).
READ_ONLY = "25006"
_db_threads: RunVar[anyio.CapacityLimiter] = RunVar("db_threads")


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking store call off the event loop; database outages become 503."""
    try:
        limiter = _db_threads.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DB_THREADS)
        _db_threads.set(limiter)
    try:
        return await to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=limiter)
    except OperationalError as exc:
        raise ServiceUnavailable("the database is unavailable") from exc
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == READ_ONLY:
            raise ServiceUnavailable("the database refuses writes") from exc
        raise
