"""Host name lookups on threads of their own, a bounded share of them per tenant.

``getaddrinfo`` blocks a thread until the name servers answer or the resolver gives up, which
can take tens of seconds, and a caller's timeout does not stop the thread. On the event loop's
default executor (a handful of threads, shared with row reads and commits), one tenant whose
targets' name servers never answer could hold every thread and stall every other tenant's runs.
Here a tenant holds at most ``PER_TENANT`` lookup threads, counted until each thread is free
again, so the others find threads while fewer than ``THREADS / PER_TENANT`` tenants are stuck
at once (as the connection pool outlasts a number of tenants' hanging calls). The tenant is
whoever the calling context names (``charged_to``): an outbound call's tenant, or the caller
of an API check.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

THREADS = 64  # idle ones cost nothing: they are started as lookups need them
PER_TENANT = 4

_tenant: ContextVar[str] = ContextVar("lookup_tenant", default="")
Lookup = Callable[..., list[tuple[Any, ...]]]


@contextlib.contextmanager
def charged_to(tenant: str) -> Iterator[None]:
    """Lookups made in this context count against ``tenant``'s share."""
    token = _tenant.set(tenant)
    try:
        yield
    finally:
        _tenant.reset(token)


@dataclass
class _Share:
    slots: asyncio.Semaphore
    users: int = 0


class Lookups:
    """Resolves host names on ``threads`` threads, at most ``per_tenant`` of them per tenant."""

    def __init__(self, threads: int = THREADS, per_tenant: int = PER_TENANT,
                 lookup: Lookup = socket.getaddrinfo) -> None:
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="lookup")
        self._per_tenant = per_tenant
        self._lookup = lookup
        # Only tenants with a lookup running or waiting have an entry.
        self._shares: dict[str, _Share] = {}

    async def resolve(self, host: str, port: int) -> list[str]:
        """The host's addresses, in the resolver's order, each once."""
        tenant = _tenant.get()
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = _Share(asyncio.Semaphore(self._per_tenant))
        share.users += 1
        try:
            await share.slots.acquire()
        except BaseException:
            self._leave(tenant, share)
            raise
        loop = asyncio.get_running_loop()
        work = self._threads.submit(self._lookup, host, port, type=socket.SOCK_STREAM)

        def free(_: Future[list[tuple[Any, ...]]]) -> None:
            # When the thread is done, not when the caller stops waiting (a timeout or a
            # cancel leaves the lookup running, and it still holds its tenant's thread).
            try:
                loop.call_soon_threadsafe(self._free, tenant, share)
            except RuntimeError:  # its loop has closed: nothing waits there any more
                with contextlib.suppress(RuntimeError):
                    self._free(tenant, share)

        work.add_done_callback(free)
        infos = await asyncio.wrap_future(work)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def busy(self, tenant: str) -> int:
        """Lookups of ``tenant`` running or waiting for a thread of its share."""
        share = self._shares.get(tenant)
        return 0 if share is None else share.users

    def _free(self, tenant: str, share: _Share) -> None:
        self._leave(tenant, share)
        share.slots.release()

    def _leave(self, tenant: str, share: _Share) -> None:
        share.users -= 1
        if share.users == 0 and self._shares.get(tenant) is share:
            del self._shares[tenant]


SYSTEM = Lookups()
