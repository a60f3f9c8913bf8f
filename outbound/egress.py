"""Egress guard for HTTP jobs and notification webhooks: a scheduler that calls URLs its
users give must not become a way into the private network (SSRF).

Targets that resolve to an address that is not globally reachable (``special_addresses``: the
IANA special-purpose registries, cloud metadata addresses included) are refused unless an
operator allowlists the host or network. The ports the scheduler's own parts listen on (API,
Temporal, metrics) are refused on every such address, allowlisted or not. The check runs
when a task is created and again at connect time, on the address actually connected to, for
every connection, redirects included, so a DNS answer that changes after creation
(rebinding) is caught.

Host names are checked before anything resolves them: ASCII labels (IDNA for others) of 1 to
63 characters, 253 in all. A host that ends in a number is an IPv4 address and must be
written as four decimal numbers: the octal, hex and short forms (``0177.0.0.1``, ``0x7f.1``,
``2130706433``) that resolvers accept are refused, as are IPv6 zone ids.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from config.settings import Settings
from outbound import lookups
from outbound.special_addresses import Address, Network, non_public

Resolver = Callable[[str, int], Awaitable[list[str]]]
RESOLVE_TIMEOUT_SECONDS = 5.0
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


class EgressRefused(Exception):
    """The target URL, host or address is not allowed."""


def target_host(host: str) -> str:
    """The host as it is resolved and compared: a canonical IP address or a lowercase ASCII
    name (raises EgressRefused for anything else)."""
    if not host.isascii():
        raise EgressRefused(f"host {host!r} is not ASCII (write a unicode name in IDNA)")
    name = host.lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if ":" in name:
        if "%" in name:
            raise EgressRefused(f"host {host!r}: an IPv6 zone id names a local interface")
        try:
            return str(ipaddress.IPv6Address(name))
        except ValueError:
            raise EgressRefused(f"host {host!r} is not a valid IPv6 address") from None
    labels = name.removesuffix(".").split(".")
    if _NUMBER.fullmatch(labels[-1]):
        try:
            return str(ipaddress.IPv4Address(".".join(labels)))
        except ValueError:
            raise EgressRefused(
                f"host {host!r} ends in a number but is not an IPv4 address written as four "
                "decimal numbers (octal, hex and short forms are refused)"
            ) from None
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise EgressRefused(
            f"host {host!r} is not a valid host name (ASCII or IDNA labels of 1 to 63 letters, "
            "digits, '-' or '_')"
        )
    for label in labels:
        if label.startswith("xn--"):
            try:
                decoded = label[4:].encode("ascii").decode("punycode")
            except UnicodeError:
                decoded = ""
            if not decoded:
                raise EgressRefused(f"host {host!r} has a malformed IDNA label {label!r}")
    return name


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the system resolver (getaddrinfo), on the lookup threads, within the
    calling tenant's share of them (``outbound.lookups``)."""
    return await lookups.SYSTEM.resolve(host, port)


def static_resolver(table: Mapping[str, list[str]]) -> Resolver:
    """A resolver from a fixed table (tests); unknown names fail to resolve."""

    async def resolve(host: str, port: int) -> list[str]:
        try:
            return list(table[host])
        except KeyError as exc:
            raise socket.gaierror(f"{host} does not resolve") from exc

    return resolve


@dataclass
class EgressPolicy:
    """Which hosts and networks jobs and webhooks may reach beyond the public internet, and
    the ports of the scheduler's own services that they may never reach off it."""

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver)
    own_ports: frozenset[int] = frozenset()

    @classmethod
    def from_list(
        cls, entries: Iterable[str], resolver: Resolver = system_resolver,
        own_ports: Iterable[int] = (),
    ) -> EgressPolicy:
        """Build from operator entries (host names, IP addresses or CIDR networks) and the
        ports the scheduler's own services listen on; an entry that is none of these raises
        ValueError, so a mistyped network fails the start instead of allowing nothing."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            try:
                hosts.add(target_host(entry).removesuffix("."))
            except EgressRefused as exc:
                raise ValueError(
                    f"SCHEDULER_EGRESS_ALLOW: {raw.strip()!r} is not a host name, an IP address "
                    f"or a CIDR network ({exc})"
                ) from None
        return cls(frozenset(hosts), tuple(networks), resolver, frozenset(own_ports))

    def check_address(self, host: str, address: str, port: int | None = None) -> None:
        """Refuse an address that is not globally reachable unless its host or network is
        allowlisted, and one on a port of the scheduler's own services in any case."""
        try:
            ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            raise EgressRefused(f"{host} resolves to {address!r}, not an IP address") from None
        found = non_public(ip)
        if found is None:
            return
        what = str(found) if host == str(ip) else f"{host} resolves to {found}, which"
        if port is not None and port in self.own_ports:
            raise EgressRefused(
                f"{what} is not a public address, and port {port} is one of the scheduler's own "
                "services (API, Temporal, metrics): no job or webhook may call it"
            )
        name = host.lower().removesuffix(".")
        if name in self.allow_hosts:
            return
        # An IPv4-mapped address is the IPv4 address to the socket layer; other carriers go
        # through a relay or translator, so only their own network allowlists them.
        judged = found.judged if found.carrier in ("", "IPv4-mapped") else ip
        if any(judged in network or ip in network for network in self.allow_networks):
            return
        raise EgressRefused(
            f"{what} is not a public address; an operator must allowlist it "
            "(SCHEDULER_EGRESS_ALLOW)"
        )

    async def resolve_checked(self, host: str, port: int) -> list[str]:
        """The host's addresses, all of them allowed (raises EgressRefused otherwise)."""
        name = target_host(host)
        try:
            ipaddress.ip_address(name)
            addresses = [name]
        except ValueError:
            addresses = await self.resolver(name, port)
        if not addresses:
            raise socket.gaierror(f"{name} has no address")
        for address in addresses:
            self.check_address(name, address, port)
        return addresses

    async def check_url(self, url: str, *, tenant: str = "") -> None:
        """Refuse a URL no job or webhook may call (raises EgressRefused, never anything
        else); a name that does not resolve yet passes (it is checked again at every
        connect). Its lookup counts against ``tenant``'s share of the lookup threads."""
        try:
            parsed = httpx.URL(url)
            raw_host, host = parsed.raw_host.decode("ascii"), parsed.host
            split = urlsplit(url)
            split_host, split_port = split.hostname, split.port
        except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
            raise EgressRefused(f"not a valid URL: {exc}") from None
        if parsed.scheme not in ("http", "https") or not raw_host:
            raise EgressRefused("must be an absolute http:// or https:// URL")
        default = 443 if parsed.scheme == "https" else 80
        port = parsed.port if parsed.port is not None else default
        # The HTTP client sends the request, the standard library reads the URL for logs and
        # summaries: a URL they read differently is refused rather than logged as another.
        if (split_host or "") != host.lower() or (split_port or default) != (port or default):
            raise EgressRefused(
                "host or port reads differently to different URL parsers (write the host in "
                "lowercase, the port in decimal digits)"
            )
        if not 0 < port < 65536:
            raise EgressRefused(f"port {port} is not a TCP port (1 to 65535)")
        try:
            with lookups.charged_to(tenant):
                async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                    await self.resolve_checked(raw_host, port)
        except (OSError, UnicodeError):
            return  # not resolvable now (TimeoutError is an OSError)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves each host itself, checks every address, and connects to a checked one."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._policy.resolve_checked(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from exc
        # TLS still verifies against the host name: only the TCP target is pinned. Each checked
        # address in the resolver's order, as a client connecting by name does: one that is
        # down does not take the host down (the call's deadline bounds them all).
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # resolve_checked never returns no address
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("unix sockets are not a job target")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_client(
    policy: EgressPolicy, *, max_redirects: int = 5,
    max_connections: int = Settings.model_fields["http_max_connections"].default,
) -> httpx.AsyncClient:
    """The HTTP client of job activities: every connection goes through the egress guard."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx has no public hook for the network backend; swap the pool for one that uses ours.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=max_connections,
        max_keepalive_connections=50,
        network_backend=GuardedBackend(policy),
    )
    # Redirects are followed by outbound.calls, hop by hop, without reading their bodies; the
    # client's own following reads each redirect's body whole. The client is shared by every
    # tenant's calls, so its jar keeps no cookie: one target's would go out with another
    # tenant's calls to that domain.
    return httpx.AsyncClient(
        transport=transport, follow_redirects=False, max_redirects=max_redirects, trust_env=False,
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
    )
