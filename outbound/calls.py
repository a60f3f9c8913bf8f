"""One bounded outbound HTTP call, for HTTP jobs and notification webhooks.

A call holds a slot of its tenant, and one of its tenant's slots for the host it is talking to,
so a slow or hostile target stalls only its own tenant's calls (and the connection pool, which
is larger than what one tenant may hold, is never drained by one tenant). Once it holds them,
the whole call (connect, every redirect hop, headers, body) ends at its deadline. Redirects are
followed here, one hop at a time, each hop through the same egress-guarded client (so every hop
is checked at connect) and never reading a redirect's body. No answer is read past the body cap.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from config.settings import Settings
from outbound.lookups import charged_to as lookups_charged_to

_DEFAULTS = Settings.model_fields


# Makes the signature headers of one call (see outbound.signing).
Signing = Callable[[], Awaitable[Mapping[str, str]]]

class WaitingGauge(Protocol):
    """Where the count of calls waiting for a slot goes (a Temporal runtime gauge)."""

    def set(self, value: int, additional_attributes: Mapping[str, str] | None = None) -> None:
        """Set the gauge for these attributes."""


@dataclass(frozen=True)
class OutboundLimits:
    """The bounds of every outbound call of a worker; the defaults are the settings'."""

    max_body_bytes: int = _DEFAULTS["http_max_response_bytes"].default
    per_tenant: int = _DEFAULTS["http_max_calls_per_tenant"].default
    per_host: int = _DEFAULTS["http_max_calls_per_host"].default

    @classmethod
    def of(cls, settings: Settings) -> OutboundLimits:
        """The limits a process's settings set."""
        return cls(settings.http_max_response_bytes, settings.http_max_calls_per_tenant,
                   settings.http_max_calls_per_host)


@dataclass(frozen=True)
class Answer:
    """The final answer of a call: its status and at most the body cap of its body."""

    status: int
    body: bytes

    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


class DeadlineExceeded(httpx.TimeoutException):
    """The call did not complete within its timeout (an httpx timeout: reported as one)."""


class NoSlot(httpx.PoolTimeout):
    """No slot of the tenant or the host came free within the wait allowed."""


@dataclass
class _Entry:
    slots: asyncio.Semaphore
    users: int = 0


@dataclass
class KeyedSlots:
    """At most ``limit`` concurrent holders per key, counting those that wait."""

    limit: int
    reason: str
    gauge: WaitingGauge | None = None
    waiting: int = 0
    # Only keys in use have an entry: an idle tenant or host costs nothing.
    _entries: dict[Hashable, _Entry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._count(0)  # the gauge reads 0 from the start, not absent

    @asynccontextmanager
    async def hold(self, key: Hashable, wait_at_most: float | None = None) -> AsyncIterator[None]:
        """Hold a slot of the key, waiting at most ``wait_at_most`` s (None: no bound) or NoSlot."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(asyncio.Semaphore(self.limit))
        entry.users += 1
        try:
            if entry.slots.locked():
                await self._wait(entry.slots, wait_at_most)
            else:
                await entry.slots.acquire()
            try:
                yield
            finally:
                entry.slots.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    async def _wait(self, slots: asyncio.Semaphore, wait_at_most: float | None) -> None:
        self._count(+1)
        try:
            async with asyncio.timeout(wait_at_most):
                await slots.acquire()
        except TimeoutError as exc:
            raise NoSlot(f"no free {self.reason} slot within {wait_at_most:g}s") from exc
        finally:
            self._count(-1)

    def _count(self, change: int) -> None:
        self.waiting += change
        if self.gauge is not None:
            self.gauge.set(self.waiting, {"reason": self.reason})


class Outbound:
    """Makes bounded outbound calls on one HTTP client (the egress-guarded one)."""

    def __init__(self, http: httpx.AsyncClient, limits: OutboundLimits = OutboundLimits(),
                 waiting: WaitingGauge | None = None) -> None:
        self._http = http
        self.limits = limits
        self._tenants = KeyedSlots(limits.per_tenant, "tenant", waiting)
        self._hosts = KeyedSlots(limits.per_host, "host", waiting)

    @property
    def waiting(self) -> dict[str, int]:
        """Calls waiting for a slot now, by reason (``tenant``, ``host``)."""
        return {"tenant": self._tenants.waiting, "host": self._hosts.waiting}

    async def call(
        self, method: str, url: str, *, tenant: str, timeout: float,
        headers: Mapping[str, str] | None = None, content: bytes | None = None,
        wait_at_most: float | None = None, sign: Signing | None = None,
    ) -> Answer:
        """The final answer after redirects, body capped; ends at ``timeout`` (DeadlineExceeded).
        ``sign`` adds the signature headers once the call holds its slot (a signature's
        timestamp must be fresh when it is sent)."""
        # The deadline starts once the tenant's slot is held: a tenant's own backlog delays its
        # calls rather than failing them (the run's run_timeout_seconds bounds that wait).
        # Its connections' host name lookups use the tenant's share of the lookup threads.
        async with self._tenants.hold(tenant, wait_at_most):
            with lookups_charged_to(tenant):
                deadline = asyncio.timeout(timeout)
                try:
                    async with deadline:  # the signing key's read too: it may be slow
                        if sign is not None:
                            headers = {**(headers or {}), **await sign()}
                        return await self._follow(method, url, tenant, timeout, headers, content)
                except TimeoutError as exc:
                    if not deadline.expired():
                        raise
                    raise DeadlineExceeded(f"no complete answer within {timeout:g}s") from exc

    async def _follow(self, method: str, url: str, tenant: str, timeout: float,
                      headers: Mapping[str, str] | None, content: bytes | None) -> Answer:
        request = self._http.build_request(method, url, headers=headers, content=content,
                                           timeout=timeout)
        hops = 0
        while True:
            # The host slot is per tenant: one tenant's slow host never queues another's calls.
            async with self._hosts.hold((tenant, request.url.host)):
                response = await self._http.send(request, stream=True, follow_redirects=False)
                try:
                    if response.next_request is None:
                        return Answer(response.status_code, await self._read(response))
                    request = response.next_request  # its body is never read: closed below
                finally:
                    await response.aclose()
            hops += 1
            if hops > self._http.max_redirects:
                raise httpx.TooManyRedirects("Exceeded maximum allowed redirects.", request=request)

    async def _read(self, response: httpx.Response) -> bytes:
        """At most the cap of the body, decoded."""
        # Raw bytes are capped before decoding: a compressed body cannot expand past it either.
        cap = self.limits.max_body_bytes
        raw = bytearray()
        async for chunk in response.aiter_raw():
            raw += chunk
            if len(raw) >= cap:
                break
        return _decoded(bytes(raw[:cap]), response.headers.get("Content-Encoding", ""), cap)


def _decoded(raw: bytes, encoding: str, cap: int) -> bytes:
    """The first ``cap`` bytes of the decoded body; raw bytes for an encoding not read here."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return raw
    if name in ("gzip", "x-gzip"):
        wbits = [zlib.MAX_WBITS | 16]
    elif name == "deflate":  # zlib-wrapped as the standard says, raw as some servers send it
        wbits = [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    else:
        return raw
    for bits in wbits:
        try:
            return zlib.decompressobj(bits).decompress(raw, cap)
        except zlib.error:
            continue
    return raw
